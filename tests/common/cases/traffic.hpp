#pragma once
/// \file
/// Shared rank-level test bodies, topic: Traffic: closed-form per-rank message and byte
/// counts (formulas in tests/threads_traffic.cpp and docs/algorithms.md).
/// (one of the topics of tests/common/collective_cases.hpp; see that file for the rules
/// every body follows).
#include "symbolic.hpp"

namespace tcoll::testing {

// ---------------------------------------------------------------------------------------
// Traffic: closed-form per-rank message and byte counts (see the formulas in
// tests/threads_traffic.cpp and docs/algorithms.md).

namespace traffic_model {

inline int ceil_log2(int P) {
  int lg = 0;
  while ((1 << lg) < P) ++lg;
  return lg;
}
inline std::size_t ceil_div(std::size_t a, std::size_t b) {
  return (a + b - 1) / b;
}
inline std::size_t segment_elems(std::size_t max_segment_bytes, std::size_t elem) {
  return std::max<std::size_t>(1, max_segment_bytes / elem);
}

/// Both directions of `messages` transfers of `bytes` bytes each.
inline traffic symmetric(std::size_t messages, std::size_t bytes) {
  return traffic{messages, bytes, messages, bytes, 0};
}

/// Ring allreduce, rank r: sends every chunk but c_r (reduce-scatter) and every chunk but
/// c_{r+1} (allgather), receives every chunk but c_{r-1} and every chunk but c_r; chunk j
/// has c_j = chunk_size(n, P, j) elements and travels as ceil(c_j / s) messages,
/// s = max(1, max_segment_bytes / sizeof(T)).
inline traffic ring_allreduce(int P, int r, std::size_t n, std::size_t elem,
                              std::size_t max_segment_bytes) {
  traffic x{};
  if (P == 1 || n == 0) return x;
  const std::size_t s = segment_elems(max_segment_bytes, elem);
  auto c = [&](int j) { return detail::chunk_size(n, P, detail::mod(j, P)); };
  for (int j = 0; j < P; ++j) {
    const std::size_t msgs = ceil_div(c(j), s);
    if (j != r) { // reduce-scatter send
      x.messages_sent += msgs;
      x.bytes_sent += c(j) * elem;
    }
    if (j != detail::mod(r + 1, P)) { // allgather send
      x.messages_sent += msgs;
      x.bytes_sent += c(j) * elem;
    }
    if (j != detail::mod(r - 1, P)) { // reduce-scatter receive
      x.messages_received += msgs;
      x.bytes_received += c(j) * elem;
    }
    if (j != r) { // allgather receive
      x.messages_received += msgs;
      x.bytes_received += c(j) * elem;
    }
  }
  return x;
}

/// Recursive doubling, P' = floor_pow2(P), e = P - P': ranks >= 2e exchange the whole
/// buffer log2 P' times; odd ranks < 2e also absorb their even partner's buffer and send
/// the result back (log2 P' + 1 each way); even ranks < 2e send once and receive once.
inline traffic recursive_doubling(int P, int r, std::size_t n, std::size_t elem) {
  if (P == 1 || n == 0) return {};
  const int core = detail::floor_pow2(P), e = P - core, lg = ceil_log2(core);
  const std::size_t N = n * elem;
  if (r < 2 * e && r % 2 == 0) return symmetric(1, N);
  if (r < 2 * e) return symmetric(static_cast<std::size_t>(lg) + 1, (lg + 1) * N);
  return symmetric(static_cast<std::size_t>(lg), lg * N);
}

/// Recursive halving-doubling: core rank q (renumbered after the fold) halves its range
/// L_0 = n, L_{i+1} = bit_i(q) ? ceil(L_i / 2) : floor(L_i / 2) for i < log2 P'; step i
/// sends L_i - L_{i+1} and receives L_{i+1} (reduce-scatter), then the allgather reverses
/// it, so bytes each way = elem * sum_i L_i (= 2 (P'-1)/P' N when P' divides n); a message
/// per non-empty half. Fold as in recursive doubling (+1 message of N each way for odd
/// ranks < 2e; even ranks < 2e send and receive N once).
inline traffic recursive_halving_doubling(int P, int r, std::size_t n, std::size_t elem) {
  if (P == 1 || n == 0) return {};
  const int core = detail::floor_pow2(P), e = P - core;
  const std::size_t N = n * elem;
  if (r < 2 * e && r % 2 == 0) return symmetric(1, N);
  const int q = r < 2 * e ? r / 2 : r - e;
  traffic x{};
  std::size_t L = n;
  for (int i = 0; (1 << i) < core; ++i) {
    const std::size_t keep = ((q >> i) & 1) ? L - L / 2 : L / 2, give = L - keep;
    const std::size_t msgs = (keep ? 1 : 0) + (give ? 1 : 0);
    x.messages_sent += msgs;
    x.messages_received += msgs;
    x.bytes_sent += L * elem;
    x.bytes_received += L * elem;
    L = keep;
  }
  if (r < 2 * e) {
    x.messages_sent += 1;
    x.messages_received += 1;
    x.bytes_sent += N;
    x.bytes_received += N;
  }
  return x;
}

/// Children of virtual rank v in a binomial tree over P ranks: masks 2^j below v's lowest
/// set bit (all masks < P for v = 0) with v + 2^j < P.
inline int binomial_children(int v, int P) {
  int c = 0;
  for (int m = 1; m < P; m <<= 1) {
    if (v & m) break;
    if (v + m < P) ++c;
  }
  return c;
}

/// Binomial reduce to `root` (v = (r - root) mod P): receive N from each child, send N to
/// the parent unless v = 0.
inline traffic binomial_reduce(int P, int r, std::size_t n, std::size_t elem, int root) {
  if (P == 1 || n == 0) return {};
  const int v = detail::mod(r - root, P), kids = binomial_children(v, P);
  const std::size_t N = n * elem;
  return traffic{v ? 1u : 0u, v ? N : 0, static_cast<std::size_t>(kids), kids * N, 0};
}

/// Binomial broadcast from `root`: the mirror image of `binomial_reduce`.
inline traffic binomial_broadcast(int P, int r, std::size_t n, std::size_t elem, int root) {
  const traffic x = binomial_reduce(P, r, n, elem, root);
  return traffic{x.messages_received, x.bytes_received, x.messages_sent, x.bytes_sent, 0};
}

/// Binomial allreduce = reduce to 0 + broadcast from 0: children(r) + [r != 0] messages of
/// N each way (rank 0: ceil(log2 P) each way).
inline traffic binomial_allreduce(int P, int r, std::size_t n, std::size_t elem) {
  const traffic a = binomial_reduce(P, r, n, elem, 0), b = binomial_broadcast(P, r, n, elem, 0);
  return traffic{a.messages_sent + b.messages_sent, a.bytes_sent + b.bytes_sent,
                 a.messages_received + b.messages_received, a.bytes_received + b.bytes_received, 0};
}

/// Ring reduce-scatter and allgather of blocks of n: P-1 blocks each way, each block as
/// ceil(n / s) messages.
inline traffic ring_blocks(int P, std::size_t n, std::size_t elem, std::size_t max_segment_bytes) {
  if (P == 1 || n == 0) return {};
  const std::size_t s = segment_elems(max_segment_bytes, elem);
  return symmetric((P - 1) * ceil_div(n, s), (P - 1) * n * elem);
}

} // namespace traffic_model

/// Checks `got` against `want` field by field.
inline void check_traffic(const traffic& got, const traffic& want, const std::string& what) {
  if (got == want) {
    CHECK(true);
    return;
  }
  FAIL_CHECK(what << ": sent " << got.messages_sent << " msgs/" << got.bytes_sent << " B, received "
                  << got.messages_received << " msgs/" << got.bytes_received
                  << " B; closed form says sent " << want.messages_sent << "/" << want.bytes_sent
                  << ", received " << want.messages_received << "/" << want.bytes_received);
}

/// Runs each algorithm and collective under `counting<Tr>` and compares each rank's
/// traffic with the closed forms of `traffic_model` (float elements).
template <transport Tr>
void traffic_cases(Tr& t, const std::vector<std::size_t>& counts,
                   const std::vector<std::size_t>& ring_segments = {std::size_t{1} << 20, 8, 12}) {
  using T = float;
  namespace m = traffic_model;
  counting<Tr> c(t);
  const int P = t.size(), rank = t.rank();
  for (std::size_t n : counts) {
    std::vector<T> in(n * P, 1.0f), out(n * P, 0.0f);
    auto label = [&](std::string what) {
      return what + " count=" + std::to_string(n) + " P=" + std::to_string(P) +
             " rank=" + std::to_string(rank);
    };
    for (std::size_t seg : ring_segments) {
      ring rg{};
      rg.max_segment_bytes = seg;
      c.reset();
      allreduce(c, in.data(), out.data(), n, sum_op{}, rg);
      check_traffic(c.counts(), m::ring_allreduce(P, rank, n, sizeof(T), seg),
                    label("ring{seg=" + std::to_string(seg) + "B} allreduce"));
      c.reset();
      reduce_scatter(c, in.data(), out.data(), n, sum_op{}, rg);
      check_traffic(c.counts(), m::ring_blocks(P, n, sizeof(T), seg),
                    label("ring{seg=" + std::to_string(seg) + "B} reduce_scatter"));
      c.reset();
      allgather(c, in.data(), out.data(), n, rg);
      check_traffic(c.counts(), m::ring_blocks(P, n, sizeof(T), seg),
                    label("ring{seg=" + std::to_string(seg) + "B} allgather"));
    }
    for (int ip = 0; ip < 2; ++ip) {
      T* src = ip ? out.data() : in.data();
      c.reset();
      allreduce(c, src, out.data(), n, sum_op{}, recursive_doubling{});
      check_traffic(c.counts(), m::recursive_doubling(P, rank, n, sizeof(T)),
                    label("recursive_doubling"));
      c.reset();
      allreduce(c, src, out.data(), n, sum_op{}, recursive_halving_doubling{});
      check_traffic(c.counts(), m::recursive_halving_doubling(P, rank, n, sizeof(T)),
                    label("recursive_halving_doubling"));
      c.reset();
      allreduce(c, src, out.data(), n, sum_op{}, binomial_tree{});
      check_traffic(c.counts(), m::binomial_allreduce(P, rank, n, sizeof(T)),
                    label("binomial_tree"));
    }
    for (int root = 0; root < P; ++root) {
      c.reset();
      broadcast(c, out.data(), n, root);
      check_traffic(c.counts(), m::binomial_broadcast(P, rank, n, sizeof(T), root),
                    label("broadcast root=" + std::to_string(root)));
      c.reset();
      reduce(c, in.data(), out.data(), n, root, sum_op{});
      check_traffic(c.counts(), m::binomial_reduce(P, rank, n, sizeof(T), root),
                    label("reduce root=" + std::to_string(root)));
      // a non-commutative reduce goes to rank 0 in rank order, then 0 forwards to the root
      std::vector<std::uint32_t> ui(n, 1u), uo(n, 0u);
      c.reset();
      reduce(c, ui.data(), uo.data(), n, root, noncommutative_op);
      traffic want = m::binomial_reduce(P, rank, n, sizeof(std::uint32_t), 0);
      if (root != 0 && n != 0 && rank == 0) {
        want.messages_sent += 1;
        want.bytes_sent += n * sizeof(std::uint32_t);
      }
      if (root != 0 && n != 0 && rank == root) {
        want.messages_received += 1;
        want.bytes_received += n * sizeof(std::uint32_t);
      }
      check_traffic(c.counts(), want, label("reduce(noncommutative) root=" + std::to_string(root)));
    }
  }
}

} // namespace tcoll::testing
