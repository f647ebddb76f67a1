// Message and byte counts of every algorithm under the `counting` decorator against closed
// forms. Formulas (per rank r of P, n elements of b bytes, N = n b; every count is 0 when
// P = 1 or n = 0; zero-element transfers are never posted):
//
//   chunks        c_j = chunk_size(n, P, j): the first n mod P chunks have floor(n/P) + 1
//                 elements, the others floor(n/P).
//   segments      s = max(1, floor(max_segment_bytes / b)); a chunk of c elements travels as
//                 ceil(c / s) messages.
//   ring          sent     = sum_{j != r} ceil(c_j/s) + sum_{j != r+1} ceil(c_j/s) messages,
//                            b (2n - c_r - c_{r+1}) bytes            (indices mod P)
//                 received = sum_{j != r-1} ceil(c_j/s) + sum_{j != r} ceil(c_j/s) messages,
//                            b (2n - c_{r-1} - c_r) bytes
//                 (one segment per chunk and P | n: 2(P-1) messages, 2 (P-1)/P N bytes)
//   fold          P' = largest power of two <= P, e = P - P'. Even r < 2e: 1 message of N
//                 sent, 1 received, nothing else (recursive doubling and halving-doubling).
//                 Odd r < 2e: the core below plus 1 message of N each way. Core rank
//                 q = r/2 (r < 2e) or r - e (r >= 2e).
//   recursive_doubling  core: log2 P' messages of N each way.
//   recursive_halving_doubling  core: L_0 = n, L_{i+1} = bit_i(q) ? ceil(L_i/2) : floor(L_i/2)
//                 for i < log2 P'; bytes each way = b sum_i L_i (= 2 (P'-1)/P' N when P' | n);
//                 messages each way = sum_i ([L_{i+1} > 0] + [L_i - L_{i+1} > 0]).
//   binomial tree v = (r - root) mod P; children(v) = #{m = 2^j : m < lowbit(v) (any m < P
//                 for v = 0), v + m < P}.
//                 reduce:    sent [v != 0] messages of N, received children(v) of N.
//                 broadcast: received [v != 0], sent children(v), each N.
//                 allreduce = reduce + broadcast with root 0: children(r) + [r != 0]
//                 messages of N each way (rank 0: ceil(log2 P)); 2(P-1) messages in total.
//   reduce, non-commutative op, root != 0: reduce with root 0, then rank 0 sends N to root.
//   ring reduce_scatter / allgather (blocks of n): (P-1) ceil(n/s) messages and (P-1) N
//                 bytes each way.
#include <doctest/doctest.h>

#include <tcoll/transport/counting.hpp>

#include "common/collective_cases.hpp"
#include "common/threads_team.hpp"

using namespace tcoll::testing;
namespace m = tcoll::testing::traffic_model;

template <class C>
concept has_barrier = requires(C& c) {
  c.barrier();
};

static_assert(tcoll::check_transport<tcoll::counting<tcoll::thread_transport>>());
static_assert(tcoll::transport_is_zero_copy<tcoll::counting<tcoll::thread_transport>>());
static_assert(has_barrier<tcoll::counting<tcoll::thread_transport>>);

namespace {
/// A transport without zero copy, barrier or native allreduce, to check what is forwarded.
struct minimal_transport {
  struct request {};
  int rank() const { return 0; }
  int size() const { return 1; }
  std::chrono::milliseconds timeout() const { return std::chrono::milliseconds(1); }
  request isend(int, const void*, std::size_t, int) { return {}; }
  request irecv(int, void*, std::size_t, int) { return {}; }
  request irecv_consume(int, std::size_t, int, tcoll::consumer, void*) { return {}; }
  bool test(request&) { return true; }
  void wait(request&, tcoll::deadline) {}
  void abort() noexcept {}
};
struct native_transport : minimal_transport {
  int calls = 0;
  template <class T, class Op>
  void native_allreduce(const T* s, T* r, std::size_t n, const Op&) {
    ++calls;
    std::copy(s, s + n, r);
  }
};
} // namespace

static_assert(tcoll::check_transport<tcoll::counting<minimal_transport>>());
static_assert(!tcoll::transport_is_zero_copy<tcoll::counting<minimal_transport>>());
static_assert(!has_barrier<tcoll::counting<minimal_transport>>);
static_assert(
    !tcoll::has_native_allreduce<tcoll::counting<minimal_transport>, float, tcoll::sum_op>);
static_assert(tcoll::has_native_allreduce<tcoll::counting<native_transport>, float, tcoll::sum_op>);

TEST_CASE("counting forwards native_allreduce (passthrough) and counts the calls") {
  native_transport inner;
  tcoll::counting<native_transport> c(inner);
  float in[3] = {1, 2, 3}, out[3] = {};
  tcoll::allreduce(c, in, out, 3, tcoll::sum_op{}, tcoll::passthrough{});
  CHECK(inner.calls == 1);
  CHECK(c.counts().native_allreduce_calls == 1);
  CHECK(c.counts().messages_sent == 0);
  CHECK(out[2] == 3.0f);
}

TEST_CASE("counting: raw sends and receives are counted on both sides") {
  on_team(3, [](tcoll::thread_transport& t) {
    tcoll::counting<tcoll::thread_transport> c(t);
    CHECK(c.rank() == t.rank());
    CHECK(c.size() == 3);
    CHECK(c.timeout() == t.timeout());
    const int next = (t.rank() + 1) % 3, prev = (t.rank() + 2) % 3;
    char out[10] = "abcdefghi", in[10] = {};
    auto s = c.isend(next, out, 7, 5);
    auto r = c.irecv(prev, in, 7, 5);
    const auto when = tcoll::clock::now() + c.timeout();
    c.wait(r, when);
    c.wait(s, when);
    CHECK(std::string(in, 7) == "abcdefg");
    CHECK(c.counts() == tcoll::traffic{1, 7, 1, 7, 0});
    c.barrier();
    c.reset();
    CHECK(c.counts() == tcoll::traffic{});
  });
}

TEST_CASE("closed-form traffic model: hand-computed values") {
  // ring, P = 4, n = 10 floats: chunks 3,3,2,2; rank 1 sends all but c1 and all but c2
  CHECK(m::ring_allreduce(4, 1, 10, 4, 1 << 20) ==
        tcoll::traffic{6, 4 * (7 + 8), 6, 4 * (7 + 7), 0});
  // ... with 2-element segments: chunks of 3 take 2 messages, of 2 one
  CHECK(m::ring_allreduce(4, 1, 10, 4, 8).messages_sent == (2 + 1 + 1) + (2 + 2 + 1));
  // fewer elements than ranks: n = 2, P = 4 -> chunks 1,1,0,0; rank 0 sends c1 (reduce-
  // scatter) and c0 (allgather), receives c0, c1 (reduce-scatter) and c1 (allgather)
  CHECK(m::ring_allreduce(4, 0, 2, 4, 1 << 20) == tcoll::traffic{2, 8, 3, 12, 0});
  // recursive doubling, P = 6 (P' = 4, e = 2): rank 0 folded sender, 1 folded receiver, 5 core
  CHECK(m::recursive_doubling(6, 0, 5, 8) == tcoll::traffic{1, 40, 1, 40, 0});
  CHECK(m::recursive_doubling(6, 1, 5, 8) == tcoll::traffic{3, 120, 3, 120, 0});
  CHECK(m::recursive_doubling(6, 5, 5, 8) == tcoll::traffic{2, 80, 2, 80, 0});
  // halving-doubling P = 4, n = 8: sum L_i = 8 + 4 = 12 = 2 (3/4) 8
  CHECK(m::recursive_halving_doubling(4, 2, 8, 1) == tcoll::traffic{4, 12, 4, 12, 0});
  // binomial P = 5: rank 0 has children 1, 2, 4; rank 4 none; rank 2 child 3
  CHECK(m::binomial_allreduce(5, 0, 1, 4) == tcoll::traffic{3, 12, 3, 12, 0});
  CHECK(m::binomial_allreduce(5, 4, 1, 4) == tcoll::traffic{1, 4, 1, 4, 0});
  CHECK(m::binomial_allreduce(5, 2, 1, 4) == tcoll::traffic{2, 8, 2, 8, 0});
  // totals: every message sent is received, binomial has 2(P-1)
  for (int P = 1; P <= 16; ++P)
    for (std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(P + 3), std::size_t(1000)}) {
      tcoll::traffic tot[4] = {};
      for (int r = 0; r < P; ++r) {
        const tcoll::traffic x[4] = {
            m::ring_allreduce(P, r, n, 4, 12), m::recursive_doubling(P, r, n, 4),
            m::recursive_halving_doubling(P, r, n, 4), m::binomial_allreduce(P, r, n, 4)};
        for (int a = 0; a < 4; ++a) {
          tot[a].messages_sent += x[a].messages_sent;
          tot[a].messages_received += x[a].messages_received;
          tot[a].bytes_sent += x[a].bytes_sent;
          tot[a].bytes_received += x[a].bytes_received;
        }
      }
      for (int a = 0; a < 4; ++a) {
        CHECK(tot[a].messages_sent == tot[a].messages_received);
        CHECK(tot[a].bytes_sent == tot[a].bytes_received);
      }
      CHECK(tot[3].messages_sent == (n ? 2u * (P - 1) : 0u));
      // power of two and P | n: ring and RHD move 2 (P-1)/P N per rank, RD log2(P) N
      if ((P & (P - 1)) == 0 && n % P == 0) {
        CHECK(tot[0].bytes_sent == std::size_t(P) * 2 * (P - 1) * n / P * 4);
        CHECK(tot[2].bytes_sent == std::size_t(P) * 2 * (P - 1) * n / P * 4);
      }
    }
}

TEST_CASE("traffic of every algorithm and collective equals the closed forms, P = 1..16") {
  std::vector<int> ps;
  for (int P = 1; P <= 16; ++P) ps.push_back(P);
  if (level() == test_level::quick) ps = {1, 2, 3, 4, 5, 6, 7, 8, 12, 16};
  for (int P : ps) {
    CAPTURE(P);
    const std::vector<std::size_t> counts = {
        0, 1, std::size_t(P > 1 ? P - 1 : 2), std::size_t(P), std::size_t(P + 1), 1000};
    on_team(P, [&](tcoll::thread_transport& t) { traffic_cases(t, counts); });
  }
}
