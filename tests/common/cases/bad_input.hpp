#pragma once
/// \file
/// Shared rank-level test bodies, topic: Bad input.
/// (one of the topics of tests/common/collective_cases.hpp; see that file for the rules
/// every body follows).
#include "traffic.hpp"

namespace tcoll::testing {

// ---------------------------------------------------------------------------------------
// Bad input.

/// Runs `f`, expects exception type E whose message contains every string of `needles`.
template <class E, class F>
void expect_error(F&& f, const std::vector<std::string>& needles, const std::string& what) {
  try {
    f();
    FAIL_CHECK(what << ": no exception");
  } catch (const E& e) {
    const std::string msg = e.what();
    for (const auto& s : needles)
      if (msg.find(s) == std::string::npos)
        FAIL_CHECK(what << ": message '" << msg << "' does not mention '" << s << "'");
    CHECK(true);
  } catch (const std::exception& e) {
    FAIL_CHECK(what << ": wrong exception type: " << e.what());
  }
}

/// Argument errors every rank detects locally before any communication: null pointers with
/// non-zero count, overlapping but unequal ranges, overflowing counts, roots out of range,
/// span size mismatch. Each must throw `invalid_argument` naming the argument and the rank,
/// and leave the (out-of-place) input untouched. Every rank calls it.
template <transport Tr, class Buffers = host_buffers>
void bad_input_cases(Tr& t, const Buffers& b = {}) {
  using T = float;
  const int P = t.size(), rank = t.rank();
  const std::string at = "[rank " + std::to_string(rank) + "]";
  constexpr std::size_t n = 8;
  std::vector<T> init(2 * n * P);
  for (std::size_t i = 0; i < init.size(); ++i) init[i] = static_cast<T>(i + 1);
  auto in = b.template allocate<T>(init.size());
  auto out = b.template allocate<T>(init.size());
  b.upload(in, init);
  T* const ip = in.data();
  T* const outp = out.data();
  auto untouched = [&](const std::string& what) {
    check_equal(b.download(in, init.size()), init, what + ": input must stay untouched");
  };
  auto red = b.reducer();
  const std::size_t huge = std::numeric_limits<std::size_t>::max() / 2;

  expect_error<invalid_argument>([&] { allreduce(t, static_cast<const T*>(nullptr), outp, n); },
                                 {"allreduce", "sendbuf", "null", at}, "allreduce null sendbuf");
  expect_error<invalid_argument>(
      [&] { allreduce(t, static_cast<const T*>(ip), static_cast<T*>(nullptr), n); },
      {"allreduce", "recvbuf", "null", at}, "allreduce null recvbuf");
  untouched("allreduce null recvbuf");
  expect_error<invalid_argument>(
      [&] { allreduce(t, static_cast<const T*>(ip), ip + 1, n, sum_op{}, ring{}, red); },
      {"allreduce", "overlap", at}, "allreduce overlapping ranges");
  untouched("allreduce overlapping ranges");
  expect_error<invalid_argument>(
      [&] {
        allreduce(t, static_cast<const T*>(ip + 3), ip, n, sum_op{}, recursive_doubling{}, red);
      },
      {"allreduce", "overlap", at}, "allreduce overlapping ranges (recv before send)");
  untouched("allreduce overlapping ranges (recv before send)");
  expect_error<invalid_argument>(
      [&] { allreduce(t, static_cast<const T*>(ip), outp, huge, sum_op{}, ring{}, red); },
      {"allreduce", "count", "overflows", at}, "allreduce count overflow");
  untouched("allreduce count overflow");
  expect_error<invalid_argument>(
      [&] {
        allreduce(t, std::span<const T>(ip, n), std::span<T>(outp, n - 1), sum_op{}, ring{}, red);
      },
      {"allreduce", "sendbuf", "recvbuf", std::to_string(n), std::to_string(n - 1), at},
      "allreduce span size mismatch");
  untouched("allreduce span size mismatch");

  expect_error<invalid_argument>(
      [&] { reduce_scatter(t, static_cast<const T*>(nullptr), outp, n); },
      {"reduce_scatter", "sendbuf", "null", at}, "reduce_scatter null sendbuf");
  expect_error<invalid_argument>(
      [&] { reduce_scatter(t, static_cast<const T*>(ip), static_cast<T*>(nullptr), n); },
      {"reduce_scatter", "recvbuf", "null", at}, "reduce_scatter null recvbuf");
  expect_error<invalid_argument>(
      [&] {
        reduce_scatter(t, static_cast<const T*>(ip), outp,
                       std::numeric_limits<std::size_t>::max() / 2 / P + 1, sum_op{}, ring{}, red);
      },
      {"reduce_scatter", "count", "overflows", at}, "reduce_scatter count x P overflow");
  expect_error<invalid_argument>(
      [&] { reduce_scatter(t, static_cast<const T*>(ip), ip + 1, n, sum_op{}, ring{}, red); },
      {"reduce_scatter", "overlap", at}, "reduce_scatter overlapping ranges");
  untouched("reduce_scatter errors");

  expect_error<invalid_argument>([&] { allgather(t, static_cast<const T*>(nullptr), outp, n); },
                                 {"allgather", "sendbuf", "null", at}, "allgather null sendbuf");
  expect_error<invalid_argument>(
      [&] { allgather(t, static_cast<const T*>(ip), static_cast<T*>(nullptr), n); },
      {"allgather", "recvbuf", "null", at}, "allgather null recvbuf");
  expect_error<invalid_argument>(
      [&] { allgather(t, static_cast<const T*>(ip + rank * n + 1), ip, n, ring{}, red); },
      {"allgather", "overlap", at}, "allgather overlap (not the in-place block)");
  untouched("allgather errors");

  for (int root : {-1, P, P + 5})
    expect_error<invalid_argument>([&] { broadcast(t, outp, n, root); },
                                   {"broadcast", "root " + std::to_string(root), at},
                                   "broadcast root out of range");
  expect_error<invalid_argument>([&] { broadcast(t, static_cast<T*>(nullptr), n, 0); },
                                 {"broadcast", "buffer", "null", at}, "broadcast null buffer");
  for (int root : {-1, P})
    expect_error<invalid_argument>([&] { reduce(t, static_cast<const T*>(ip), outp, n, root); },
                                   {"reduce", "root " + std::to_string(root), at},
                                   "reduce root out of range");
  expect_error<invalid_argument>([&] { reduce(t, static_cast<const T*>(nullptr), outp, n, 0); },
                                 {"reduce", "sendbuf", "null", at}, "reduce null sendbuf");
  expect_error<invalid_argument>(
      [&] { reduce(t, static_cast<const T*>(ip), static_cast<T*>(nullptr), n, rank); },
      {"reduce", "recvbuf", "null", at}, "reduce null recvbuf at the root");
  expect_error<invalid_argument>([&] { reduce(t, static_cast<const T*>(ip), outp, huge, 0); },
                                 {"reduce", "count", "overflows", at}, "reduce count overflow");
  untouched("reduce errors");

  // zero counts are valid with null pointers: every rank takes part, nothing moves
  allreduce(t, static_cast<const T*>(nullptr), static_cast<T*>(nullptr), 0);
  broadcast(t, static_cast<T*>(nullptr), 0, 0);
  CHECK(true);
}

/// Malformed `parse_selection` strings (no transport needed).
inline void bad_selection_cases() {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"ring", "ring"},            // no colon
      {"ring:1K", "ring:1K"},      // no range
      {"foo:0-8K", "foo"},         // unknown algorithm
      {"ring:8K-1K", "min > max"}, // reversed range
      {"ring:1X-2K", "1X"},        // bad suffix
      {"ring:1KB-2K", "1KB"},      // trailing garbage
      {"ring:-5", "bad size"},     // empty min
      {"ring:0-", "bad size"},     // empty max
      {"ring:99999999999999999999999-max", "too large"},
      {"ring:17179869184G-max", "too large"}, // overflows after the suffix
      {"recursive_doubling:0-8K;bogus", "bogus"},
  };
  for (const auto& [text, needle] : bad)
    expect_error<invalid_argument>([&] { (void)parse_selection(text); }, {needle},
                                   "parse_selection(\"" + text + "\")");
  // and well-formed ones parse to the documented rules
  const auto rules = parse_selection("ring:1M-max;recursive_doubling:0-8K;");
  REQUIRE(rules.size() == 2);
  CHECK(rules[0].algorithm == algorithm_id::ring);
  CHECK(rules[0].min_bytes == (std::size_t{1} << 20));
  CHECK(rules[0].max_bytes == std::numeric_limits<std::size_t>::max());
  CHECK(rules[1].algorithm == algorithm_id::recursive_doubling);
  CHECK(rules[1].min_bytes == 0);
  CHECK(rules[1].max_bytes == 8192);
}

/// A peer that never answers: every rank except `absent` calls an out-of-place allreduce
/// of `n` floats with `Algo`. Each must throw, naming its rank, well before 3x the transport
/// timeout, with its input untouched: `timeout_error` no sooner than the timeout (the rank
/// that gave up waiting), or `aborted_error` (a rank whose transport the first failure
/// broke: failed collectives abort their transport, so peers stop early). Meant for
/// transports whose timeout is short (e.g. 200 ms); `absent` just returns.
template <transport Tr, class Algo, class Buffers = host_buffers>
void absent_peer_case(Tr& t, int absent, const Algo& algo, std::size_t n = 1000,
                      const Buffers& b = {}) {
  using T = float;
  const int rank = t.rank();
  if (rank == absent) return;
  std::vector<T> init(n);
  for (std::size_t i = 0; i < n; ++i) init[i] = static_cast<T>(i % 17);
  auto in = b.template allocate<T>(n);
  auto out = b.template allocate<T>(n);
  b.upload(in, init);
  const std::string what = std::string(Algo::name) + " with rank " + std::to_string(absent) +
                           " absent, rank " + std::to_string(rank);
  const std::string rank_tag = "[rank " + std::to_string(rank) + "]";
  const auto start = clock::now();
  try {
    allreduce(t, static_cast<const T*>(in.data()), out.data(), n, sum_op{}, algo, b.reducer());
    FAIL_CHECK(what << ": no exception");
  } catch (const timeout_error& e) {
    const std::string msg = e.what();
    CHECK_MESSAGE(msg.find(rank_tag) != std::string::npos, what << ": " << msg);
    CHECK_MESSAGE(msg.find("timed out") != std::string::npos, what << ": " << msg);
    CHECK_MESSAGE(clock::now() - start >= t.timeout(), what << ": gave up before the timeout");
  } catch (const aborted_error& e) {
    const std::string msg = e.what();
    CHECK_MESSAGE(msg.find(rank_tag) != std::string::npos, what << ": " << msg);
  } catch (const std::exception& e) {
    FAIL_CHECK(what << ": wrong exception type: " << e.what());
  }
  const auto elapsed = clock::now() - start;
  CHECK_MESSAGE(elapsed < 3 * t.timeout() + std::chrono::seconds(1),
                what << ": took " << std::chrono::duration<double>(elapsed).count() << " s");
  check_equal(b.download(in, n), init, what + ": input must stay untouched");
  // the transport is broken now: the next call fails at once and says so, naming the rank
  const auto again = clock::now();
  try {
    allreduce(t, static_cast<const T*>(in.data()), out.data(), n, sum_op{}, algo, b.reducer());
    FAIL_CHECK(what << ": the call after the failure did not throw");
  } catch (const error& e) {
    const std::string msg = e.what();
    CHECK_MESSAGE(msg.find("broken by an earlier failure") != std::string::npos,
                  what << ": " << msg);
    CHECK_MESSAGE(msg.find(rank_tag) != std::string::npos, what << ": " << msg);
    CHECK_MESSAGE(
        (dynamic_cast<const timeout_error*>(&e) || dynamic_cast<const aborted_error*>(&e)),
        what << ": the cause's class is kept: " << msg);
  }
  CHECK_MESSAGE(clock::now() - again < t.timeout(), what << ": the broken call waited");
  check_equal(b.download(in, n), init, what + ": input must stay untouched after the retry");
}

} // namespace tcoll::testing
