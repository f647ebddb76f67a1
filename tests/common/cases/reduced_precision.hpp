#pragma once
/// \file
/// Shared rank-level test bodies, topic: Reduced precision with rounding: half/bfloat16 on
/// fractional inputs. (one of the topics of tests/common/collective_cases.hpp; see that file for
/// the rules every body follows).
#include "allreduce.hpp"

namespace tcoll::testing {

// ---------------------------------------------------------------------------------------
// Reduced precision with rounding: half/bfloat16 on fractional inputs.

/// Unit roundoff of T.
template <class T>
constexpr double unit_roundoff() {
  if constexpr (std::is_same_v<T, half>)
    return 1.0 / 2048; // 2^-11
  else if constexpr (std::is_same_v<T, bfloat16>)
    return 1.0 / 256; // 2^-8
  else
    return std::numeric_limits<T>::epsilon() / 2;
}

/// Largest number of roundings on any path from an input to the result: ring reduces each
/// chunk in a chain of P-1 steps; the tree algorithms in ceil(log2 P) levels, plus one for
/// the non-power-of-two fold of recursive doubling / halving-doubling; in_segment folds
/// every rank's copy in a chain of P-1 steps.
/// `automatic` may pick either, so it gets the larger.
template <class Algo>
int rounding_depth(int P) {
  int lg = 0;
  while ((1 << lg) < P) ++lg;
  if constexpr (std::is_same_v<Algo, ring> || std::is_same_v<Algo, in_segment>)
    return P - 1;
  else if constexpr (std::is_same_v<Algo, automatic>)
    return std::max(P - 1, lg + 1);
  else
    return lg + 1;
}

/// half/bfloat16 sum and avg of fractional inputs (multiples of 1/64, |x| < 16): each
/// element must be within (depth + 1) u sum|x_r| of the exact sum of the (rounded) inputs,
/// and all ranks bitwise identical.
template <transport Tr, class Buffers = host_buffers>
void reduced_precision_rounding(Tr& t, const std::vector<std::size_t>& counts,
                                const std::vector<std::string>& algorithms = all_algorithms(),
                                const Buffers& b = {}) {
  const int P = t.size(), rank = t.rank();
  for (const std::string& name : algorithms)
    with_algorithm(name, 0, [&]<class Algo>(const Algo& algo) {
      auto run = [&]<class T, class Op>(type_tag<T>, const Op& op, op_kind k) {
        for (std::size_t n : counts) {
          auto value = [&](int r, std::size_t i) {
            const auto h =
                static_cast<std::int64_t>(mix((std::uint64_t(r) << 40) ^ i) % 2001) - 1000;
            return T(static_cast<float>(h) / 64.0f);
          };
          std::vector<T> input(n);
          for (std::size_t i = 0; i < n; ++i) input[i] = value(rank, i);
          auto buf = b.template allocate<T>(n);
          b.upload(buf, input);
          allreduce(t, buf.data(), buf.data(), n, op, algo, b.reducer());
          const std::vector<T> got = b.download(buf, n);
          const int depth = rounding_depth<Algo>(P) + (k == op_kind::avg ? 1 : 0);
          std::size_t bad = 0, first = 0;
          double first_err = 0, first_bound = 0;
          for (std::size_t i = 0; i < n; ++i) {
            double exact = 0, mag = 0;
            for (int r = 0; r < P; ++r) {
              const double x = static_cast<float>(value(r, i));
              exact += x;
              mag += std::abs(x);
            }
            if (k == op_kind::avg) {
              exact /= P;
              mag /= P;
            }
            const double err = std::abs(static_cast<double>(static_cast<float>(got[i])) - exact);
            const double bound = (depth + 1) * unit_roundoff<T>() * mag * 1.001 + 1e-30;
            if (!(err <= bound) && bad++ == 0) {
              first = i;
              first_err = err;
              first_bound = bound;
            }
          }
          const case_id id{algorithm_label(algo, 0), type_name<T>(), op_name(k), n, P, rank, true};
          if (bad == 0)
            CHECK(true);
          else
            FAIL_CHECK(id.str() << " (fractional inputs): " << bad << " elements outside the error "
                                << "bound; first [" << first << "] error " << first_err
                                << " > bound " << first_bound);
          check_identical_across_ranks(t, got.data(), n * sizeof(T), id.str() + " (fractional)");
        }
      };
      run(type_tag<half>{}, sum_op{}, op_kind::sum);
      run(type_tag<bfloat16>{}, sum_op{}, op_kind::sum);
      run(type_tag<half>{}, avg_op{}, op_kind::avg);
      run(type_tag<bfloat16>{}, avg_op{}, op_kind::avg);
    });
}

} // namespace tcoll::testing
