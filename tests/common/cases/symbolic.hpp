#pragma once
/// \file
/// Shared rank-level test bodies, topic: Symbolic proof: every output element holds every rank's
/// contribution exactly once. (one of the topics of tests/common/collective_cases.hpp; see that
/// file for the rules every body follows).
#include "collectives.hpp"

namespace tcoll::testing {

// ---------------------------------------------------------------------------------------
// Symbolic proof: every output element holds every rank's contribution exactly once.

/// Runs every allreduce algorithm (in and out of place, ring also with 1-element segments),
/// reduce_scatter, allgather, broadcast and reduce (every root) on `symbolic::rank_set`
/// with `disjoint_union`, input = rank_set::of(rank). Needs P <= 63.
template <transport Tr, class Buffers = host_buffers>
void symbolic_all(Tr& t, std::size_t count, const Buffers& b = {}) {
  using symbolic::rank_set;
  const int P = t.size(), rank = t.rank();
  REQUIRE(P <= rank_set::max_ranks);
  const symbolic::disjoint_union op{};
  const std::size_t n = count;
  const rank_set me = rank_set::of(rank), all = rank_set::all(P);
  const std::vector<rank_set> mine(n, me), want_all(n, all);

  for (std::size_t seg : {std::size_t{0}, sizeof(rank_set)})
    for (const std::string& name : all_algorithms()) {
      if (seg && name != "ring") continue;
      with_algorithm(name, seg, [&]<class Algo>(const Algo& algo) {
        for (int ip = 0; ip < 2; ++ip) {
          const case_id id{
              algorithm_label(algo, seg), "rank_set", "disjoint_union", n, P, rank, ip == 1};
          auto out = b.template allocate<rank_set>(n);
          if (ip == 1) {
            b.upload(out, mine);
            allreduce(t, out.data(), out.data(), n, op, algo, b.reducer());
          } else {
            auto in = b.template allocate<rank_set>(n);
            b.upload(in, mine);
            allreduce(t, static_cast<const rank_set*>(in.data()), out.data(), n, op, algo,
                      b.reducer());
            check_equal(b.download(in, n), mine, id.str() + " (input must stay untouched)");
          }
          check_equal(b.download(out, n), want_all, id.str());
        }
      });
    }
  for (std::size_t seg : {std::size_t{0}, sizeof(rank_set)}) {
    ring rg{};
    if (seg) rg.max_segment_bytes = seg;
    const std::string label = seg ? "{seg=8B}" : "";
    // reduce_scatter and allgather by every algorithm the table lists for them (ring with
    // these knobs)
    for_each_algorithm<collective::reduce_scatter>(
        [&]<class A>(const A& algo) {
          // reduce_scatter: all P blocks carry my contribution; my block must hold everyone's
          auto in = b.template allocate<rank_set>(n * P);
          auto out = b.template allocate<rank_set>(n);
          b.upload(in, std::vector<rank_set>(n * P, me));
          reduce_scatter(t, static_cast<const rank_set*>(in.data()), out.data(), n, op, algo,
                         b.reducer());
          check_equal(b.download(out, n), want_all,
                      case_id{"reduce_scatter[" + std::string(A::name) + "]" + label, "rank_set",
                              "disjoint_union", n, P, rank, false}
                          .str());
        },
        rg);
    for_each_algorithm<collective::allgather>(
        [&]<class A>(const A& algo) {
          // allgather: block j must hold exactly rank j
          auto in = b.template allocate<rank_set>(n);
          auto out = b.template allocate<rank_set>(n * P);
          b.upload(in, mine);
          allgather(t, static_cast<const rank_set*>(in.data()), out.data(), n, algo, b.reducer());
          std::vector<rank_set> want(n * P);
          for (int j = 0; j < P; ++j)
            std::fill(want.begin() + j * n, want.begin() + (j + 1) * n, rank_set::of(j));
          check_equal(b.download(out, n * P), want,
                      case_id{"allgather[" + std::string(A::name) + "]" + label, "rank_set", "-", n,
                              P, rank, false}
                          .str());
        },
        rg);
  }
  for (int root = 0; root < P; ++root) {
    // broadcast, by every algorithm the table lists for it: everyone ends with exactly the
    // root's contribution
    for_each_algorithm<collective::broadcast>([&]<class A>(const A& algo) {
      auto buf = b.template allocate<rank_set>(n);
      b.upload(buf, std::vector<rank_set>(n, rank == root ? me : rank_set{}));
      broadcast(t, buf.data(), n, root, algo, b.reducer());
      check_equal(
          b.download(buf, n), std::vector<rank_set>(n, rank_set::of(root)),
          case_id{"broadcast[" + std::string(A::name) + "](root=" + std::to_string(root) + ")",
                  "rank_set", "-", n, P, rank, true}
              .str());
    });
    // reduce, by every algorithm: the root ends with every rank exactly once
    for_each_algorithm<collective::reduce>([&]<class A>(const A& algo) {
      auto in = b.template allocate<rank_set>(n);
      auto out = b.template allocate<rank_set>(n);
      b.upload(in, mine);
      b.upload(out, std::vector<rank_set>(n));
      reduce(t, static_cast<const rank_set*>(in.data()), out.data(), n, root, op, algo,
             b.reducer());
      if (rank == root)
        check_equal(
            b.download(out, n), want_all,
            case_id{"reduce[" + std::string(A::name) + "](root=" + std::to_string(root) + ")",
                    "rank_set", "disjoint_union", n, P, rank, false}
                .str());
    });
  }
}

} // namespace tcoll::testing
