#pragma once
// Rank-level bodies of the elastic suite, written once over any transport (threads, MPI).
// Expectations never come from the code under test: the Eq. 2/3 values are worked out by
// hand below (dyadic numbers, so float arithmetic is exact), the convergence bound comes
// from this file's own analysis, and the order of arrival is fixed by tokens the test
// passes between the client leaders on its own tags.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <tcoll/elastic.hpp>
#include <tcoll/tcoll.hpp>

namespace elastic_test {

namespace el = tcoll::elastic;
using namespace std::chrono_literals;

/// Tags of the test's own tokens (below the library's default 700/701).
constexpr int token_tag = 50;

/// What a rank saw, for checks after the team joined (doctest's CHECK is not thread-safe
/// enough to call from every rank at once, so bodies collect and one place asserts).
struct log_lines {
  std::mutex mutex;
  std::vector<std::string> lines;
  void add(std::string_view s) {
    std::lock_guard lock(mutex);
    lines.emplace_back(s);
  }
};

template <class Tr>
void send_token(Tr& t, int peer, int tag) {
  int token = 1;
  auto r = t.isend(peer, &token, sizeof token, tag);
  t.wait(r, tcoll::clock::now() + t.timeout());
}
template <class Tr>
void recv_token(Tr& t, int peer, int tag) {
  int token = 0;
  auto r = t.irecv(peer, &token, sizeof token, tag);
  t.wait(r, tcoll::clock::now() + t.timeout());
}

/// Bitwise comparison of a rank's parameters with the expected values.
inline bool same(std::span<const float> got, const std::array<float, 4>& want) {
  return std::memcmp(got.data(), want.data(), sizeof want) == 0;
}
inline std::string show(std::span<const float> v) {
  std::string s = "[";
  for (float x : v) s += std::to_string(x) + " ";
  return s + "]";
}

/// Failures found on some rank, reported by the caller's thread.
struct failures {
  std::mutex mutex;
  std::vector<std::string> list;
  void add(const std::string& s) {
    std::lock_guard lock(mutex);
    list.push_back(s);
  }
};

// ---- Eq. 2 and 3 by hand: two clients, fixed arrival order -----------------------------
//
// alpha = 1/4, center w~ = (1, 2, 4, -8), client 0 w = (3, 6, 0, 8), client 1 w = (5, -2, 4, 0);
// two rounds, client 0 served first in each, no SGD in between.
// before_update (Eq. 3 with the center the push found):
//   c0 push 1: d = (2, 4, -4, 16), w~ = (1.5, 3, 3, -4),  w0 = (2.5, 5, 1, 4)
//   c1 push 1: d = (3.5, -5, 1, 4), w~ = (2.375, 1.75, 3.25, -3), w1 = (4.125, -0.75, 3.75, -1)
//   c0 push 2: d = (0.125, 3.25, -2.25, 7), w~ = (2.40625, 2.5625, 2.6875, -1.25),
//              w0 = (2.46875, 4.1875, 1.5625, 2.25)
//   c1 push 2: d = (1.71875, -3.3125, 1.0625, 0.25),
//              w~ = (2.8359375, 1.734375, 2.953125, -1.1875),
//              w1 = (3.6953125, 0.078125, 3.484375, -1.0625)
// after_update (Eq. 3 with the center after this push's Eq. 2):
//   c0 push 1: w~ = (1.5, 3, 3, -4), w0 = (3,6,0,8) - (1.5,3,-3,12)/4 = (2.625, 5.25, 0.75, 5)
//   c1 push 1: w~ = (2.375, 1.75, 3.25, -3), w1 = (5,-2,4,0) - (2.625,-3.75,0.75,3)/4
//              = (4.34375, -1.0625, 3.8125, -0.75)
//   c0 push 2: d = (0.25, 3.5, -2.5, 8), w~ = (2.4375, 2.625, 2.625, -1),
//              w0 = (2.625,5.25,0.75,5) - (0.1875,2.625,-1.875,6)/4
//              = (2.578125, 4.59375, 1.21875, 3.5)
//   c1 push 2: d = (1.90625, -2.6875, 1.1875, 0.25), w~ = (2.9140625, 1.703125, 2.921875, -0.9375),
//              w1 = (4.34375,-1.0625,3.8125,-0.75) - (1.4296875,-2.765625,0.890625,0.1875)/4
//              = (3.986328125, -0.37109375, 3.58984375, -0.796875)
struct hand_expectation {
  std::array<float, 4> w[2][2]; // [round][client]
  std::array<float, 4> center;  // after both rounds
};
inline hand_expectation hand_values(el::center_reply reply) {
  if (reply == el::center_reply::before_update)
    return {
        {{{{2.5f, 5, 1, 4}}, {{4.125f, -0.75f, 3.75f, -1}}},
         {{{2.46875f, 4.1875f, 1.5625f, 2.25f}}, {{3.6953125f, 0.078125f, 3.484375f, -1.0625f}}}},
        {{2.8359375f, 1.734375f, 2.953125f, -1.1875f}}};
  return {{{{{2.625f, 5.25f, 0.75f, 5}}, {{4.34375f, -1.0625f, 3.8125f, -0.75f}}},
           {{{2.578125f, 4.59375f, 1.21875f, 3.5f}},
            {{3.986328125f, -0.37109375f, 3.58984375f, -0.796875f}}}},
          {{2.9140625f, 1.703125f, 2.921875f, -0.9375f}}};
}

/// Asynchronous, 2 clients of (P-1)/2 ranks each (P odd, >= 3), server rank 0.
template <class Tr>
void hand_async_case(Tr& t, el::center_reply reply, failures& bad) {
  el::options o;
  o.clients = 2;
  o.interval = 1;
  o.alpha = 0.25;
  o.reply = reply;
  o.server_rank = 0;
  const hand_expectation want = hand_values(reply);
  const std::array<float, 4> center0{1, 2, 4, -8};
  const std::array<float, 4> w0[2] = {{3, 6, 0, 8}, {5, -2, 4, 0}};
  if (t.rank() == 0) {
    el::server<Tr> s(t, std::span<const float>(center0), o);
    // the center after each push (the w~ lines above), as serve's callback sees it
    const std::array<float, 4> third =
        reply == el::center_reply::before_update
            ? std::array<float, 4>{2.40625f, 2.5625f, 2.6875f, -1.25f}
            : std::array<float, 4>{2.4375f, 2.625f, 2.625f, -1};
    const std::array<float, 4> centers[4] = {
        {1.5f, 3, 3, -4}, {2.375f, 1.75f, 3.25f, -3}, third, want.center};
    std::uint64_t calls = 0;
    const el::server_report r =
        s.serve([&](int client, std::uint64_t pushes, std::span<const float> center) {
          const std::string at = "server callback " + std::to_string(calls) + ": ";
          if (pushes != calls + 1) bad.add(at + "pushes " + std::to_string(pushes));
          if (client != static_cast<int>(calls % 2))
            bad.add(at + "client " + std::to_string(client));
          if (calls < 4 && !same(center, centers[calls]))
            bad.add(at + "center " + show(center) + " != hand value");
          ++calls;
        });
    if (calls != 4) bad.add("server: the callback ran " + std::to_string(calls) + " times, not 4");
    if (!same(s.center(), want.center))
      bad.add("server: center " + show(s.center()) + " != hand value");
    if (r.service_order != std::vector<int>{0, 1, 0, 1})
      bad.add("server: service order is not 0 1 0 1");
    if (r.finished() != std::vector<int>{0, 1} || !r.dropped().empty())
      bad.add("server: both clients should have finished, none dropped");
    return;
  }
  el::client<Tr> c(t, 4, o);
  const int me = c.id(), other = 1 - me;
  const int other_leader = c.layout().leaders[static_cast<std::size_t>(other)];
  std::array<float, 4> w = w0[me];
  for (int round = 0; round < 2; ++round) {
    // fixed arrival order: client 0, then client 1 (tokens between the leaders)
    if (me == 1 && c.leader()) recv_token(t, other_leader, token_tag);
    if (!c.step(std::span<float>(w))) bad.add("step did not exchange at interval 1");
    if (c.leader()) send_token(t, other_leader, token_tag);
    if (me == 0 && c.leader()) recv_token(t, other_leader, token_tag);
    if (!same(w, want.w[round][me]))
      bad.add("rank " + std::to_string(t.rank()) + " client " + std::to_string(me) + " round " +
              std::to_string(round) + ": " + show(w) + " != hand value");
  }
  c.finish();
}

/// Synchronous, 2 clients of P/2 ranks (P even): center = mean of the leaders' w.
//   round 1: mean (4, 2, 2, 4); w0 = (3,6,0,8) - (-1,4,-2,4)/4 = (3.25, 5, 0.5, 7),
//            w1 = (5,-2,4,0) - (1,-4,2,-4)/4 = (4.75, -1, 3.5, 1)
//   round 2: mean (4, 2, 2, 4) again (Eq. 3 with the mean keeps the mean);
//            w0 = (3.25,5,0.5,7) - (-0.75,3,-1.5,3)/4 = (3.4375, 4.25, 0.875, 6.25),
//            w1 = (4.75,-1,3.5,1) - (0.75,-3,1.5,-3)/4 = (4.5625, -0.25, 3.125, 1.75)
template <class Tr>
void hand_sync_case(Tr& t, failures& bad) {
  el::options o;
  o.clients = 2;
  o.interval = 1;
  o.alpha = 0.25;
  o.variant = el::mode::synchronous;
  const std::array<float, 4> w0[2] = {{3, 6, 0, 8}, {5, -2, 4, 0}};
  const std::array<float, 4> want[2][2] = {
      {{3.25f, 5, 0.5f, 7}, {4.75f, -1, 3.5f, 1}},
      {{3.4375f, 4.25f, 0.875f, 6.25f}, {4.5625f, -0.25f, 3.125f, 1.75f}}};
  el::client<Tr> c(t, 4, o);
  std::array<float, 4> w = w0[c.id()];
  for (int round = 0; round < 2; ++round) {
    c.step(std::span<float>(w));
    if (!same(w, want[round][c.id()]))
      bad.add("sync rank " + std::to_string(t.rank()) + " round " + std::to_string(round) + ": " +
              show(w) + " != hand value");
  }
  c.finish();
}

// ---- Convergence to the mean of constant client parameters -------------------------------
//
// C clients keep constant parameters w_j (reset after every exchange) and push in
// round-robin order (tokens). Let e = center - mean. Serving client j maps
// e -> (1 - a) e + a (w_j - mean). Over one cycle, since sum_j (w_j - mean) = 0,
//   e -> (1-a)^C e + a sum_j ((1-a)^(C-1-j) - 1)(w_j - mean),
// the forcing term is at most a * C * (1 - (1-a)^(C-1)) * D <= a^2 C (C-1) D
// (D = max_j |w_j - mean|), so the cycle-end error settles at or below
// a^2 C (C-1) D / (1 - (1-a)^C) <= a (C-1) D / (1 - (C-1) a / 2), and within a cycle the
// center moves by at most (C-1) * 2 a D more. The transient from e_0 decays as (1-a)^(C R).
template <class Tr>
void convergence_case(Tr& t, int clients, int rounds, double alpha, failures& bad) {
  el::options o;
  o.clients = clients;
  o.interval = 1;
  o.alpha = alpha;
  const std::size_t n = 5;
  auto constant = [&](int c, std::size_t i) {
    return static_cast<float>((c * 7 + static_cast<int>(i) * 3) % 11) - 5.0f;
  };
  std::vector<double> mean(n, 0.0);
  double D = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    for (int c = 0; c < clients; ++c) mean[i] += constant(c, i) / clients;
    for (int c = 0; c < clients; ++c) D = std::max(D, std::abs(constant(c, i) - mean[i]));
  }
  D = std::max(D, 1.0); // one client: the mean is its own w; keep a scale for the bounds
  if (t.rank() == 0) {
    std::vector<float> center0(n);
    for (std::size_t i = 0; i < n; ++i) center0[i] = static_cast<float>(mean[i] + 50.0 * D);
    el::server<Tr> s(t, std::span<const float>(center0), o);
    const auto r = s.serve();
    const double C = clients, a = alpha;
    const double bound = a * (C - 1) * D / (1 - (C - 1) * a / 2) + (C - 1) * 2 * a * D +
                         50.0 * D * std::pow(1 - a, C * rounds) + 1e-4 * D;
    double worst = 0.0;
    for (std::size_t i = 0; i < n; ++i)
      worst = std::max(worst, std::abs(static_cast<double>(s.center()[i]) - mean[i]));
    if (!(worst <= bound))
      bad.add("center is " + std::to_string(worst) + " from the mean, bound " +
              std::to_string(bound) + " (D " + std::to_string(D) + ")");
    // and it did move from 50 D away: the bound is far below that
    if (!(bound < 5.0 * D)) bad.add("test bound too loose to mean anything");
    if (r.pushes != static_cast<std::uint64_t>(clients) * rounds)
      bad.add("server served " + std::to_string(r.pushes) + " pushes");
    return;
  }
  el::client<Tr> c(t, n, o);
  const auto& L = c.layout();
  const int me = c.id();
  const int prev = L.leaders[static_cast<std::size_t>((me + clients - 1) % clients)];
  const int next = L.leaders[static_cast<std::size_t>((me + 1) % clients)];
  std::vector<float> w(n);
  for (int round = 0; round < rounds; ++round) {
    for (std::size_t i = 0; i < n; ++i) w[i] = constant(me, i);
    if (c.leader() && !(me == 0 && round == 0) && clients > 1) recv_token(t, prev, token_tag);
    c.step(std::span<float>(w));
    if (c.leader() && !(me == clients - 1 && round == rounds - 1) && clients > 1)
      send_token(t, next, token_tag);
  }
  c.finish();
}

// ---- A client that stops answering is dropped; the others finish -------------------------
//
// Clients = min(3, P - 1), server rank 0, client_timeout `patience`. Client 1 exchanges
// twice and then goes silent (no goodbye). The others keep exchanging for longer than the
// timeout and finish. With `raw_leader`, client 1's leader instead speaks the wire by hand
// and vanishes right after a push, without taking the reply.
template <class Tr>
void dropped_client_case(Tr& t, std::chrono::milliseconds patience, bool raw_leader, failures& bad,
                         log_lines& notices, std::size_t n = 8) {
  const int clients = std::min(3, t.size() - 1);
  el::options o;
  o.clients = clients;
  o.interval = 1;
  o.alpha = 0.5;
  o.client_timeout = patience;
  o.log = [&](std::string_view s) { notices.add(s); };
  const auto steps_of_live = static_cast<int>(2 * patience / 40ms) + 10;
  if (t.rank() == 0) {
    std::vector<float> center0(n, 0.0f);
    el::server<Tr> s(t, std::span<const float>(center0), o);
    const auto r = s.serve();
    if (r.dropped() != std::vector<int>{1})
      bad.add("server dropped " + std::to_string(r.dropped().size()) + " clients, want only 1");
    std::vector<int> want_finished;
    for (int c = 0; c < clients; ++c)
      if (c != 1) want_finished.push_back(c);
    if (r.finished() != want_finished) bad.add("the live clients did not all finish");
    const auto& rec = r.clients[1];
    if (rec.pushes != (raw_leader ? 1u : 2u))
      bad.add("client 1 pushes " + std::to_string(rec.pushes));
    if (rec.drop_reason.find(std::to_string(patience.count()) + " ms") == std::string::npos)
      bad.add("drop reason does not name the timeout: " + rec.drop_reason);
    // the server went on serving the others after the drop
    if (clients > 1 && !(r.pushes > rec.dropped_at))
      bad.add("no push served after the drop (dropped at " + std::to_string(rec.dropped_at) +
              " of " + std::to_string(r.pushes) + ")");
    for (int c = 0; c < clients; ++c)
      if (c != 1 && r.clients[static_cast<std::size_t>(c)].pushes !=
                        static_cast<std::uint64_t>(steps_of_live))
        bad.add("live client " + std::to_string(c) + " pushes " +
                std::to_string(r.clients[static_cast<std::size_t>(c)].pushes));
    if (!(r.seconds >= patience.count() / 1000.0))
      bad.add("serve() returned before the timeout could expire");
    return;
  }
  if (raw_leader) {
    const el::layout L = el::make_layout(o, t.size(), t.rank());
    if (L.client_of[static_cast<std::size_t>(t.rank())] == 1) {
      if (L.leaders[1] != t.rank()) return; // its other ranks just stop
      std::vector<float> msg(8 + n, 1.0f);
      el::detail::header h{el::detail::push_kind, 0, n, 1};
      std::memcpy(msg.data(), &h, sizeof h);
      auto send = t.isend(0, msg.data(), msg.size() * sizeof(float), o.tag);
      t.wait(send, tcoll::clock::now() + t.timeout());
      return; // gone before the reply
    }
  }
  el::client<Tr> c(t, n, o);
  std::vector<float> w(n, static_cast<float>(c.id() + 1));
  if (c.id() == 1) {
    c.step(std::span<float>(w));
    c.step(std::span<float>(w));
    return; // silent from now on: no goodbye
  }
  for (int i = 0; i < steps_of_live; ++i) {
    c.step(std::span<float>(w));
    std::this_thread::sleep_for(40ms);
  }
  c.finish();
}

// ---- A slow client does not hold up the others -------------------------------------------
template <class Tr>
void slow_client_case(Tr& t, failures& bad) {
  const int clients = std::min(3, t.size() - 1);
  el::options o;
  o.clients = clients;
  o.interval = 1;
  const std::size_t n = 16;
  const int steps = 10;
  if (t.rank() == 0) {
    std::vector<float> center0(n, 0.0f);
    el::server<Tr> s(t, std::span<const float>(center0), o);
    const auto r = s.serve();
    // the last push of the slow client (client 0) comes after every push of the fast ones
    const auto& order = r.service_order;
    const auto last_slow = std::find(order.rbegin(), order.rend(), 0);
    const auto slow_pos = order.rend() - last_slow - 1;
    for (int c = 1; c < clients; ++c) {
      const auto last = std::find(order.rbegin(), order.rend(), c);
      if (!(order.rend() - last - 1 < slow_pos))
        bad.add("fast client " + std::to_string(c) + " was held up by the slow one");
    }
    return;
  }
  el::client<Tr> c(t, n, o);
  std::vector<float> w(n, 1.0f);
  for (int i = 0; i < steps; ++i) {
    c.step(std::span<float>(w));
    if (c.id() == 0) std::this_thread::sleep_for(60ms);
  }
  c.finish();
}

// ---- The server stops answering: every rank of the client gets a timeout_error -----------
template <class Tr>
void silent_server_case(Tr& t, failures& bad) {
  el::options o;
  o.clients = 1;
  o.interval = 1;
  o.server_timeout = 200ms;
  if (t.rank() == 0) return; // the server never serves
  el::client<Tr> c(t, 3, o);
  std::vector<float> w(3, 1.0f);
  try {
    c.step(std::span<float>(w));
    bad.add("rank " + std::to_string(t.rank()) + ": step returned without a server");
  } catch (const tcoll::timeout_error& e) {
    const std::string what = e.what();
    if (what.find("server (rank 0)") == std::string::npos ||
        what.find("[rank " + std::to_string(t.rank()) + "]") == std::string::npos)
      bad.add("timeout message does not name the server and the rank: " + what);
    if (e.peer() != 0) bad.add("timeout_error::peer() is not the server");
  }
}

// ---- Bad input ----------------------------------------------------------------------------
template <class F>
void expect_invalid(F&& f, const std::string& needle, int rank, const std::string& label,
                    failures& bad) {
  try {
    f();
    bad.add(label + ": no exception");
  } catch (const tcoll::invalid_argument& e) {
    const std::string what = e.what();
    if (what.find(needle) == std::string::npos ||
        what.find("[rank " + std::to_string(rank) + "]") == std::string::npos || e.rank() != rank)
      bad.add(label + ": message does not name '" + needle + "' and the rank: " + what);
  } catch (const std::exception& e) {
    bad.add(label + ": wrong exception type: " + e.what());
  }
}

/// Needs P >= 2. Every rank checks every bad knob locally; nothing communicates except the
/// final allreduce, which shows the transport is still usable.
template <class Tr>
void bad_input_case(Tr& t, failures& bad) {
  const int me = t.rank(), P = t.size();
  const std::vector<float> center(4, 0.0f);
  auto client_with = [&](el::options o) { return [&t, o] { el::client<Tr> c(t, 4, o); }; };
  auto base = [] {
    el::options o;
    o.clients = 1;
    return o;
  };
  for (double a : {0.0, -0.5, 1.5, std::numeric_limits<double>::quiet_NaN()}) {
    el::options o = base();
    o.alpha = a;
    expect_invalid(client_with(o), "alpha must be in (0, 1]", me, "alpha", bad);
  }
  {
    el::options o = base();
    o.interval = 0;
    expect_invalid(client_with(o), "interval must be >= 1, got 0", me, "interval 0", bad);
  }
  {
    el::options o = base();
    o.clients = 0;
    expect_invalid(client_with(o), "clients must be >= 1", me, "clients 0", bad);
  }
  {
    el::options o = base();
    o.clients = P; // asynchronous: one rank is the server
    expect_invalid(client_with(o), "clients " + std::to_string(P), me, "too many clients", bad);
  }
  {
    el::options o = base();
    o.server_rank = P;
    expect_invalid(client_with(o), "server_rank", me, "server_rank", bad);
  }
  {
    el::options o = base();
    o.tag = 1023;
    expect_invalid(client_with(o), "tag must be", me, "tag", bad);
  }
  {
    el::options o = base();
    o.client_timeout = -1ms;
    expect_invalid(client_with(o), "client_timeout", me, "client_timeout", bad);
  }
  {
    el::options o = base();
    o.server_rank = (me + 1) % P; // this rank is a client
    expect_invalid([&] { el::server<Tr> s(t, std::span<const float>(center), o); },
                   "server_rank is", me, "server on a client rank", bad);
    o.server_rank = me;
    expect_invalid([&] { el::server<Tr> s(t, std::span<const float>{}, o); }, "initial_center", me,
                   "empty center", bad);
    expect_invalid([&] { el::client<Tr> c(t, 4, o); }, "is the server", me, "client on server",
                   bad);
    o.server_rank = (me + 1) % P;
    expect_invalid([&] { el::client<Tr> c(t, 0, o); }, "count must be >= 1", me, "count 0", bad);
    el::client<Tr> c(t, 4, o);
    std::vector<float> w(3);
    expect_invalid([&] { c.step(std::span<float>(w)); }, "params has 3 elements", me, "step size",
                   bad);
  }
  {
    el::options o = base();
    o.variant = el::mode::synchronous;
    o.clients = P + 1;
    expect_invalid(client_with(o), "exceed", me, "sync clients", bad);
    o.clients = 1;
    expect_invalid([&] { el::server<Tr> s(t, std::span<const float>(center), o); },
                   "synchronous mode has no server", me, "sync server", bad);
  }
  int one = 1, sum = 0;
  tcoll::allreduce(t, &one, &sum, 1);
  if (sum != P) bad.add("transport unusable after the bad input");
}

} // namespace elastic_test
