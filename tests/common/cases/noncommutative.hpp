#pragma once
/// \file
/// Shared rank-level test bodies, topic: Non-commutative op: allreduce of the order-keeping
/// algorithms and reduce to every root. (one of the topics of tests/common/collective_cases.hpp;
/// see that file for the rules every body follows).
#include "reduced_precision.hpp"

namespace tcoll::testing {

// ---------------------------------------------------------------------------------------
// Non-commutative op: allreduce of the order-keeping algorithms and reduce to every root.

template <transport Tr, class Buffers = host_buffers>
void noncommutative_cases(Tr& t, const std::vector<std::size_t>& counts, const Buffers& b = {}) {
  const int P = t.size(), rank = t.rank();
  // allreduce through every order-keeping algorithm (and automatic, which must route the op
  // to one); instantiated for these types only, to keep the suites' compile time down
  for (const char* name :
       {"recursive_doubling", "recursive_halving_doubling", "binomial_tree", "automatic"})
    with_algorithm(name, 0, [&]<class Algo>(const Algo& algo) {
      if constexpr (accepts_noncommutative<Algo>()) {
        auto one = [&]<class T>(type_tag<T>) {
          for (std::size_t n : counts)
            for (int ip = 0; ip < 2; ++ip) {
              const case_id id{
                  algorithm_label(algo, 0), type_name<T>(), "noncommutative", n, P, rank, ip == 1};
              allreduce_case<Tr, T>(t, algo, noncommutative_op, op_kind::noncommutative, n, ip == 1,
                                    id, 77 + n, true, b);
            }
        };
        one(type_tag<std::uint8_t>{});
        one(type_tag<std::int16_t>{});
        one(type_tag<std::uint32_t>{});
        one(type_tag<std::int64_t>{});
        one(type_tag<std::uint64_t>{});
      }
    });

  // reduce: rank-order fold at every root, out of place and in place at the root
  auto one = [&]<class T>(type_tag<T>) {
    for (std::size_t n : counts)
      for (int root = 0; root < P; ++root)
        for (int ip = 0; ip < 2; ++ip) {
          const bool in_place = ip == 1;
          const case_data<T> d = make_case<T>(op_kind::noncommutative, P, rank, n, 91 + root);
          auto in = b.template allocate<T>(n);
          auto out = b.template allocate<T>(n);
          b.upload(in, d.input);
          const std::vector<T> sentinel(n, static_cast<T>(0x5a));
          b.upload(out, sentinel);
          T* recv = in_place && rank == root ? in.data() : out.data();
          reduce(t, static_cast<const T*>(in.data()), recv, n, root, noncommutative_op,
                 binomial_tree{}, b.reducer());
          const case_id id{"reduce(root=" + std::to_string(root) + ")",
                           type_name<T>(),
                           "noncommutative",
                           n,
                           P,
                           rank,
                           in_place && rank == root};
          if (rank == root) {
            check_equal(b.download(recv == in.data() ? in : out, n), d.expected, id.str());
            if (recv != in.data())
              check_equal(b.download(in, n), d.input, id.str() + " (input must stay untouched)");
          } else {
            check_equal(b.download(in, n), d.input, id.str() + " (input must stay untouched)");
            check_equal(b.download(out, n), sentinel, id.str() + " (non-root recvbuf untouched)");
          }
        }
  };
  one(type_tag<std::uint32_t>{});
  one(type_tag<std::int64_t>{});
}

} // namespace tcoll::testing
