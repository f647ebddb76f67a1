// shm_transport built without MPI: processes started by process_team_main.cpp meet through a
// tcoll::file_store (a key-value store, as PyTorch's c10d::Store is) and build the node's
// transport from a store_bootstrap. Compiled with TCOLL_NO_MPI and no MPI dependency, so it
// also proves that the transport needs neither. The shared rank-level bodies of
// tests/common/collective_cases.hpp run on it, then what is particular to the store:
// options agreement, a rank that never comes, no file left behind.
#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include <time.h>

#include <tcoll/schedule.hpp>
#include <tcoll/transport/shm.hpp>

#include "dev_shm.hpp"
#include "process_team.hpp"
#include "shm_cases.hpp"

#ifdef TCOLL_SHM_FROM_MPI
#error "this suite must build without MPI (TCOLL_NO_MPI)"
#endif

using namespace tcoll::testing;
using namespace std::chrono_literals;
namespace team = tcoll::testing::process_team;

namespace {

tcoll::shm_options small_slots() {
  tcoll::shm_options o;
  o.timeout = 30s;
  o.slot_bytes = 256;
  o.slots = 2;
  o.lanes = 2;
  o.single_copy_min_bytes = 512;
  o.single_copy_piece_bytes = 128;
  return o;
}

/// Constructs a transport with `options`; the invalid_argument's text, or "" when none.
std::string construction_error(const tcoll::shm_options& options) {
  try {
    tcoll::shm_transport t(team::bootstrap(), options);
  } catch (const tcoll::invalid_argument& e) {
    return e.what();
  }
  return "";
}

} // namespace

TEST_CASE("shm from a store: every algorithm, fractional rounding, the other collectives") {
  for (const auto& options : {tcoll::shm_options{}, small_slots()}) {
    tcoll::shm_transport t(team::bootstrap(), options);
    REQUIRE(t.rank() == team::rank());
    REQUIRE(t.size() == team::size());
    const int P = t.size();
    matrix_options opt;
    opt.types = {"float", "double", "int32"};
    opt.ops = {"sum", "max"};
    opt.counts = {0, 1, std::size_t(P + 1), 1000, (std::size_t{1} << 15) + 3};
    allreduce_matrix(t, opt);
    reduced_precision_rounding(t, {1, std::size_t(P + 1), 1000});
    collectives_values(t, {1, std::size_t(P + 1), 1000});
    alltoall_values(t, {1, std::size_t(P + 1), 1000});
    gather_scatter_values(t, {1, 1000});
  }
}

TEST_CASE("shm from a store: non-blocking collectives from the engine") {
  tcoll::shm_transport t(team::bootstrap(), small_slots());
  const int P = t.size();
  std::vector<std::vector<float>> data(4, std::vector<float>(777));
  std::vector<tcoll::request> pending;
  for (std::size_t k = 0; k < data.size(); ++k) {
    for (std::size_t i = 0; i < data[k].size(); ++i)
      data[k][i] = 0.125f * static_cast<float>(t.rank() + 1) + static_cast<float>(k + i % 5);
    pending.push_back(tcoll::iallreduce(t, std::span<float>(data[k])));
  }
  for (auto& r : pending) r.wait();
  for (std::size_t k = 0; k < data.size(); ++k)
    for (std::size_t i = 0; i < data[k].size(); i += 37) {
      double want = 0;
      for (int q = 0; q < P; ++q) want += 0.125 * (q + 1) + static_cast<double>(k + i % 5);
      CHECK(data[k][i] == doctest::Approx(want));
    }
}

TEST_CASE("shm from a store: options that differ between ranks fail on every rank") {
  if (team::size() < 2) return;
  tcoll::shm_options mine;
  if (team::rank() == 1) mine.lanes = 3;
  const std::string e = construction_error(mine);
  CHECK(e.find("options.lanes differs between ranks") != std::string::npos);
  INFO(e);
  tcoll::shm_options invalid;
  if (team::rank() == 0) invalid.slot_bytes = 8; // invalid on rank 0 only
  const std::string f = construction_error(invalid);
  CHECK(!f.empty());
  CHECK(f.find(team::rank() == 0 ? "slot_bytes" : "rank 0 passed invalid") != std::string::npos);
}

TEST_CASE("shm from a store: a rank that never comes is a timeout_error, not a hang") {
  tcoll::file_store impatient(std::getenv("TCOLL_TEST_STORE"), 300ms);
  const auto start = std::chrono::steady_clock::now();
  // a team of size()+1: the last rank never starts
  CHECK_THROWS_AS(tcoll::shm_transport(std::make_unique<tcoll::store_bootstrap<tcoll::file_store>>(
                      impatient, team::rank(), team::size() + 1, "absent")),
                  tcoll::timeout_error);
  CHECK(std::chrono::steady_clock::now() - start < 10s);
  CHECK_THROWS_AS(tcoll::store_bootstrap<tcoll::file_store>(impatient, 2, 2),
                  tcoll::invalid_argument);
}

TEST_CASE("shm from a store: a long wait sleeps (sleep_after), leaving its core, and completes") {
  tcoll::shm_options o;
  o.timeout = 30s;
  o.sleep_after = 1ms;
  o.idle_sleep = 200us;
  tcoll::shm_transport t(team::bootstrap(), o);
  if (t.size() < 2) return;
  std::vector<double> data(1000);
  if (t.rank() == 1) { // the sender comes 300 ms late
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = 0.25 + static_cast<double>(i);
    std::this_thread::sleep_for(300ms);
    auto r = t.isend(0, data.data(), data.size() * sizeof(double), 5);
    t.wait(r, tcoll::clock::now() + o.timeout);
  } else if (t.rank() == 0) {
    timespec cpu0{}, cpu1{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu0);
    const auto start = std::chrono::steady_clock::now();
    auto r = t.irecv(1, data.data(), data.size() * sizeof(double), 5);
    t.wait(r, tcoll::clock::now() + o.timeout);
    const auto wall = std::chrono::steady_clock::now() - start;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu1);
    const double cpu_s = static_cast<double>(cpu1.tv_sec - cpu0.tv_sec) +
                         1e-9 * static_cast<double>(cpu1.tv_nsec - cpu0.tv_nsec);
    for (std::size_t i = 0; i < data.size(); ++i) REQUIRE(data[i] == 0.25 + static_cast<double>(i));
    CHECK(wall >= 250ms);
    // a wait that only yields keeps its core busy for the whole 300 ms; one that sleeps
    // 200 us between polls after 1 ms uses a few ms of it
    INFO("the waiting thread used " << cpu_s << " s of CPU in "
                                    << std::chrono::duration<double>(wall).count() << " s");
    CHECK(cpu_s < 0.5 * std::chrono::duration<double>(wall).count());
  }
  t.barrier();
  tcoll::shm_options bad;
  bad.idle_sleep = 0us;
  CHECK(construction_error(bad).find("idle_sleep") != std::string::npos);
}

TEST_CASE("shm from a store: the segment leaves no file in /dev/shm") {
  tcoll::shm_transport t(team::bootstrap());
  CHECK(t.segment_bytes() > 0);
  CHECK(tcoll_files_in_dev_shm() == 0);
}

TEST_CASE("shm from a store: probe sees a waiting message that no posted receive takes") {
  tcoll::shm_transport t(team::bootstrap(), small_slots());
  if (t.size() < 2) return;
  const auto until = [&] { return tcoll::clock::now() + 30s; };
  // rank 1 sends rank 0 two messages of tag 9 (one inline, one over several slots) and one
  // of tag 4; rank 0 probes before and after they arrive and as receives are posted
  std::vector<double> big(200);
  double small = 0.0;
  if (t.rank() == 1) {
    for (std::size_t i = 0; i < big.size(); ++i) big[i] = 0.5 + static_cast<double>(i);
    small = 2.25;
    CHECK(!t.probe(0, 9)); // nothing sent to this rank
    auto a = t.isend(0, &small, sizeof small, 9);
    auto b = t.isend(0, big.data(), big.size() * sizeof(double), 9);
    t.wait(a, until());
    t.barrier(); // 1: the first message is in its lane
    auto c = t.isend(0, &small, sizeof small, 4);
    t.wait(b, until());
    t.wait(c, until());
  } else if (t.rank() == 0) {
    CHECK_THROWS_AS(t.probe(t.size(), 9), tcoll::invalid_argument); // no such peer
    t.barrier();                                                    // 1
    const auto deadline = tcoll::clock::now() + 10s;
    auto probed = [&](int tag) { // polls until a probe sees `tag` or the deadline passes
      while (!t.probe(1, tag))
        if (tcoll::clock::now() >= deadline) return false;
      return true;
    };
    REQUIRE(probed(9));
    CHECK(!t.probe(1, 3)); // another tag
    // one receive posted (not yet progressed): it will take the first message, the
    // second (still being sent, or waiting) is what a probe reports, once it has arrived
    auto first = t.irecv(1, &small, sizeof small, 9);
    CHECK(probed(9));
    auto second = t.irecv(1, big.data(), big.size() * sizeof(double), 9);
    CHECK(!t.probe(1, 9)); // both are taken by posted receives now
    t.wait(first, until());
    t.wait(second, until());
    CHECK(small == 2.25);
    for (std::size_t i = 0; i < big.size(); ++i) REQUIRE(big[i] == 0.5 + static_cast<double>(i));
    CHECK(!t.probe(1, 9));
    REQUIRE(probed(4));
    auto third = t.irecv(1, &small, sizeof small, 4);
    t.wait(third, until());
  } else {
    t.barrier(); // 1
  }
  t.barrier();
}
