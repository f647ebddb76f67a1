// Elastic averaging on the threads transport (suite 'elastic'): Eq. 2 and 3 against hand
// computations (asynchronous with both center replies, synchronous), convergence of the
// center to the mean of constant clients, a dropped client while the others finish, a
// slow client that does not hold up the others, a silent server, bad input.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "cases.hpp"

using namespace elastic_test;
using namespace std::chrono_literals;

namespace {
template <class F>
void on_team(int P, F&& f) {
  tcoll::thread_team(P, 30s).run(f);
}
void report(failures& bad) {
  for (const auto& s : bad.list) FAIL_CHECK(s);
  CHECK(bad.list.empty());
}
} // namespace

TEST_CASE("Eq. 2 and 3 by hand: asynchronous, two clients, fixed arrival order") {
  for (auto reply : {el::center_reply::before_update, el::center_reply::after_update})
    for (int P : {3, 5}) {
      CAPTURE(P);
      CAPTURE(static_cast<int>(reply));
      failures bad;
      on_team(P, [&](tcoll::thread_transport& t) { hand_async_case(t, reply, bad); });
      report(bad);
    }
}

TEST_CASE("Eq. 3 by hand: synchronous, center = average of the two leaders") {
  for (int P : {2, 4, 6}) {
    CAPTURE(P);
    failures bad;
    on_team(P, [&](tcoll::thread_transport& t) { hand_sync_case(t, bad); });
    report(bad);
  }
}

TEST_CASE("the center converges to the mean of constant client parameters") {
  for (int clients : {2, 3}) {
    CAPTURE(clients);
    failures bad;
    on_team(clients + 1,
            [&](tcoll::thread_transport& t) { convergence_case(t, clients, 300, 0.01, bad); });
    report(bad);
  }
  failures bad; // two ranks per client
  on_team(5, [&](tcoll::thread_transport& t) { convergence_case(t, 2, 100, 0.05, bad); });
  report(bad);
}

TEST_CASE("a client that stops answering is dropped after the timeout; the others finish") {
  for (bool raw : {false, true})
    for (int P : {3, 4, 6}) {
      CAPTURE(P);
      CAPTURE(raw);
      failures bad;
      log_lines notices;
      on_team(
          P, [&](tcoll::thread_transport& t) { dropped_client_case(t, 400ms, raw, bad, notices); });
      report(bad);
      REQUIRE(notices.lines.size() == 1);
      const std::string& line = notices.lines[0];
      CAPTURE(line);
      CHECK(line.find("dropped client 1") != std::string::npos);
      CHECK(line.find("400 ms") != std::string::npos);
    }
}

TEST_CASE("a slow client does not hold up the others (asynchronous)") {
  failures bad;
  on_team(4, [&](tcoll::thread_transport& t) { slow_client_case(t, bad); });
  report(bad);
}

TEST_CASE("a silent server: every rank of the client throws timeout_error naming it") {
  for (int P : {2, 3}) {
    CAPTURE(P);
    failures bad;
    on_team(P, [&](tcoll::thread_transport& t) { silent_server_case(t, bad); });
    report(bad);
  }
}

TEST_CASE("bad input: invalid_argument naming the argument and the rank") {
  for (int P : {2, 3}) {
    CAPTURE(P);
    failures bad;
    on_team(P, [&](tcoll::thread_transport& t) { bad_input_case(t, bad); });
    report(bad);
  }
}

TEST_CASE("Eq. 2 and 3 as functions keep center + w (the elastic pair moves symmetrically)") {
  std::vector<double> c{1, 2, 4, -8}, w{3, 6, 0, 8};
  const std::vector<double> w0 = w, c0 = c;
  // Eq. 3 with the center before Eq. 2, then Eq. 2
  el::client_update<double>(w, c, 0.25);
  el::center_update<double>(c, w0, 0.25);
  for (std::size_t i = 0; i < c.size(); ++i) CHECK(c[i] + w[i] == c0[i] + w0[i]);
  CHECK(c == std::vector<double>{1.5, 3, 3, -4});
  CHECK(w == std::vector<double>{2.5, 5, 1, 4});
}
