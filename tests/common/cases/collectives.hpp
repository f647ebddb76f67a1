#pragma once
/// \file
/// Shared rank-level test bodies, topic: reduce_scatter, allgather, broadcast, reduce with values
/// (float and int32 sum). (one of the topics of tests/common/collective_cases.hpp; see that file
/// for the rules every body follows).
#include "noncommutative.hpp"

namespace tcoll::testing {

// ---------------------------------------------------------------------------------------
// reduce_scatter, allgather, broadcast, reduce with values (float and int32 sum).

template <transport Tr, class Buffers = host_buffers>
void collectives_values(Tr& t, const std::vector<std::size_t>& counts,
                        std::size_t ring_segment_bytes = 0, const Buffers& b = {}) {
  const int P = t.size(), rank = t.rank();
  ring rg{};
  if (ring_segment_bytes) rg.max_segment_bytes = ring_segment_bytes;
  auto one = [&]<class T>(type_tag<T>) {
    for (std::size_t n : counts) {
      const additive_inputs<T> in(P, 5 + n);
      // reduce_scatter: block j of rank r's input is x(r, j n + k); by every algorithm the
      // table lists for it
      for_each_algorithm<collective::reduce_scatter>(
          [&]<class A>(const A& algo) {
            std::vector<T> input(n * P), want(n);
            for (std::size_t i = 0; i < n * P; ++i) input[i] = in.x(rank, i);
            for (std::size_t k = 0; k < n; ++k)
              want[k] = from_int<T>(P * in.u(rank * n + k) + in.vsum);
            auto sb = b.template allocate<T>(n * P);
            auto rb = b.template allocate<T>(n);
            b.upload(sb, input);
            reduce_scatter(t, static_cast<const T*>(sb.data()), rb.data(), n, sum_op{}, algo,
                           b.reducer());
            const case_id id{"reduce_scatter[" + std::string(A::name) + "]",
                             type_name<T>(),
                             "sum",
                             n,
                             P,
                             rank,
                             false};
            check_equal(b.download(rb, n), want, id.str());
            check_equal(b.download(sb, n * P), input, id.str() + " (input must stay untouched)");
          },
          rg);
      // allgather: rank r contributes x(r, k); out of place and in place, by every algorithm
      for_each_algorithm<collective::allgather>(
          [&]<class A>(const A& algo) {
            for (int ip = 0; ip < 2; ++ip) {
              std::vector<T> mine(n), want(n * P);
              for (std::size_t k = 0; k < n; ++k) mine[k] = in.x(rank, k);
              for (int r = 0; r < P; ++r)
                for (std::size_t k = 0; k < n; ++k) want[r * n + k] = in.x(r, k);
              auto rb = b.template allocate<T>(n * P);
              auto sb = b.template allocate<T>(n);
              const case_id id{"allgather[" + std::string(A::name) + "]",
                               type_name<T>(),
                               "-",
                               n,
                               P,
                               rank,
                               ip == 1};
              if (ip == 1) {
                std::vector<T> init(n * P, from_int<T>(-1));
                std::copy(mine.begin(), mine.end(), init.begin() + rank * n);
                b.upload(rb, init);
                allgather(t, static_cast<const T*>(rb.data() + rank * n), rb.data(), n, algo,
                          b.reducer());
              } else {
                b.upload(sb, mine);
                allgather(t, static_cast<const T*>(sb.data()), rb.data(), n, algo, b.reducer());
                check_equal(b.download(sb, n), mine, id.str() + " (input must stay untouched)");
              }
              const auto got = b.download(rb, n * P);
              check_equal(got, want, id.str());
              check_identical_across_ranks(t, got.data(), got.size() * sizeof(T), id.str());
            }
          },
          rg);
      // broadcast from every root, by every algorithm the table lists for it
      for_each_algorithm<collective::broadcast>([&]<class A>(const A& algo) {
        for (int root = 0; root < P; ++root) {
          std::vector<T> want(n), init(n, from_int<T>(-3));
          for (std::size_t k = 0; k < n; ++k) want[k] = in.x(root, k);
          auto buf = b.template allocate<T>(n);
          b.upload(buf, rank == root ? want : init);
          broadcast(t, buf.data(), n, root, algo, b.reducer());
          const case_id id{"broadcast[" + std::string(A::name) + "](root=" + std::to_string(root) +
                               ")",
                           type_name<T>(),
                           "-",
                           n,
                           P,
                           rank,
                           true};
          check_equal(b.download(buf, n), want, id.str());
        }
      });
      // reduce (sum) to every root, by every algorithm; non-root recvbuf untouched
      for_each_algorithm<collective::reduce>([&]<class A>(const A& algo) {
        for (int root = 0; root < P; ++root) {
          std::vector<T> input(n), want(n), sentinel(n, from_int<T>(-7));
          for (std::size_t k = 0; k < n; ++k) {
            input[k] = in.x(rank, k);
            want[k] = from_int<T>(P * in.u(k) + in.vsum);
          }
          auto sb = b.template allocate<T>(n);
          auto rb = b.template allocate<T>(n);
          b.upload(sb, input);
          b.upload(rb, sentinel);
          reduce(t, static_cast<const T*>(sb.data()), rb.data(), n, root, sum_op{}, algo,
                 b.reducer());
          const case_id id{"reduce[" + std::string(A::name) + "](root=" + std::to_string(root) +
                               ")",
                           type_name<T>(),
                           "sum",
                           n,
                           P,
                           rank,
                           false};
          check_equal(b.download(rb, n), rank == root ? want : sentinel, id.str());
          check_equal(b.download(sb, n), input, id.str() + " (input must stay untouched)");
        }
      });
    }
  };
  one(type_tag<float>{});
  one(type_tag<std::int32_t>{});
}

} // namespace tcoll::testing
