// The execution layer on the threads transport (suite 'schedule'): non-blocking
// collectives, prepared allreduce, the gradient pool, the overlap scheduler with every
// algorithm (hierarchical too), its errors, autotune and the measured trace.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <sstream>
#include <tcoll/transport/subgroup.hpp>

#include "cases.hpp"

using namespace schedule_test;
using namespace std::chrono_literals;

namespace {
template <class F>
void on_team(int P, F&& f, std::chrono::milliseconds timeout = 20s) {
  tcoll::thread_team(P, timeout).run(f);
}
} // namespace

TEST_CASE("many non-blocking allreduces in flight, issued from several threads") {
  for (int P : {1, 2, 3, 5, 8})
    for (int threads : {1, 3}) {
      CAPTURE(P);
      CAPTURE(threads);
      on_team(P, [&](tcoll::thread_transport& t) { many_in_flight_case(t, 24, threads); });
    }
}

TEST_CASE("ireduce_scatter, iallgather, ibroadcast, iallreduce and ireduce in flight together") {
  for (int P : {1, 2, 4, 7}) {
    CAPTURE(P);
    on_team(P, [](tcoll::thread_transport& t) { mixed_collectives_case(t); });
  }
}

TEST_CASE("ialltoall(v), igather(v), iscatter(v), ireduce_scatterv, iallgatherv in flight") {
  for (int P : {1, 2, 3, 5, 8}) {
    CAPTURE(P);
    on_team(P, [](tcoll::thread_transport& t) { other_nonblocking_collectives_case(t); });
  }
}

TEST_CASE("prepared collectives: every collective of the table, run and started, bound once") {
  for (int P : {1, 2, 3, 5, 8}) {
    CAPTURE(P);
    on_team(P, [](tcoll::thread_transport& t) { prepared_collectives_case(t); });
  }
}

TEST_CASE("prepared collectives over a hierarchical machine (unequal groups, interleaved)") {
  const std::vector<int> group_of{0, 1, 2, 0, 1, 2, 0};
  on_team(7, [&](tcoll::thread_transport& t) {
    auto v = tcoll::split_groups(t, std::span<const int>(group_of));
    tcoll::hierarchical h(v.intra, v.inter_ptr(),
                          {v.world_rank, v.world_size, v.shards, {}, {}, v.group_members});
    prepared_collectives_case(h);
  });
}

TEST_CASE("requests: destroyed unfinished waits, wait_for, argument errors at the call") {
  on_team(3, [](tcoll::thread_transport& t) {
    destroyed_request_waits_case(t);
    request_released_by_its_completion_case(t);
    prepared_completion_case(t);
    wait_for_case(t);
    nonblocking_bad_arguments_case(t);
  });
}

TEST_CASE("non-blocking collectives on counting and shaped decorators share the engine") {
  on_team(3, [](tcoll::thread_transport& t) {
    tcoll::counting<tcoll::thread_transport> c(t);
    std::vector<float> v(1000, 1.0f);
    auto q = tcoll::iallreduce(c, std::span<float>(v), tcoll::sum_op{}, tcoll::ring{});
    q.wait();
    CHECK(c.counts().messages_sent == 2 * (3 - 1));
    for (float x : v) CHECK(x == 3.0f);
  });
}

TEST_CASE("a failed collective breaks the transport: the next call throws at once") {
  on_team(
      3,
      [](tcoll::thread_transport& t) {
        std::vector<float> v(100, 1.0f);
        if (t.rank() == 2) return; // never joins
        auto q = tcoll::iallreduce(t, std::span<float>(v), tcoll::sum_op{}, tcoll::ring{});
        CHECK_THROWS_AS(q.wait(), tcoll::error);
        const auto start = tcoll::clock::now();
        // the cause is thrown when the call is made, without waiting for anything
        CHECK_THROWS_AS((void)tcoll::iallreduce(t, std::span<float>(v)), tcoll::error);
        CHECK_THROWS_AS(tcoll::allreduce(t, std::span<float>(v)), tcoll::error);
        CHECK(tcoll::clock::now() - start < 100ms);
      },
      300ms);
}

TEST_CASE("a completion that waits for a later collective runs the queue on the engine") {
  // The completion of collective A (on the engine thread) needs collective B, queued after
  // A: engine::run_queued_here runs B there, in queue order, instead of waiting for the
  // thread it is on. Fractional inputs; every rank ends with the same bits.
  for (int P : {1, 2, 3}) {
    CAPTURE(P);
    on_team(P, [&](tcoll::thread_transport& t) {
      std::vector<float> a(5000, 0.25f * static_cast<float>(t.rank() + 1)), b(7000, 0.1f);
      bool on_engine = false, b_done_in_completion = false;
      std::shared_ptr<tcoll::detail::task> second;
      std::mutex m;
      auto first = tcoll::detail::submit_collective(
          t,
          [&](int tag) {
            tcoll::cpu_reducer red;
            tcoll::detail::allreduce_tagged(t, tag, a.data(), a.data(), a.size(), tcoll::sum_op{},
                                            tcoll::ring{}, red);
          },
          [&](std::exception_ptr) {
            std::lock_guard lock(m);
            on_engine = tcoll::detail::on_engine_thread(t);
            tcoll::detail::started_engine(t)->run_queued_here();
            b_done_in_completion = second && second->finished();
          });
      {
        std::lock_guard lock(m);
        second = tcoll::detail::submit_collective(t, [&](int tag) {
          tcoll::cpu_reducer red;
          tcoll::detail::allreduce_tagged(t, tag, b.data(), b.data(), b.size(), tcoll::sum_op{},
                                          tcoll::ring{}, red);
        });
      }
      first->wait();
      second->wait();
      CHECK(on_engine);
      // B was queued before A finished unless A was already done when B was submitted
      if (second->timestamps().queued < first->timestamps().finished) CHECK(b_done_in_completion);
      CHECK(!tcoll::detail::on_engine_thread(t));
      float expect_a = 0.0f;
      for (int r = 0; r < P; ++r) expect_a += 0.25f * static_cast<float>(r + 1);
      for (float x : a) CHECK(x == expect_a);
      float expect_b = 0.0f;
      for (int r = 0; r < P; ++r) expect_b += 0.1f;
      for (float x : b) CHECK(std::abs(x - expect_b) < 1e-6f);
      CHECK_THROWS_AS(tcoll::detail::engine_of(t).run_queued_here(), tcoll::invalid_argument);
    });
  }
}

TEST_CASE("prepared allreduce equals the blocking call, allocates its workspace once") {
  for (int P : {1, 2, 3, 4}) {
    CAPTURE(P);
    on_team(P, [](tcoll::thread_transport& t) {
      for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{999}, std::size_t{65537}}) {
        prepared_case(t, tcoll::ring{}, n);
        prepared_case(t, tcoll::recursive_halving_doubling{}, n);
        prepared_case(t, tcoll::binomial_tree{}, n);
        prepared_case(t, tcoll::automatic{}, n);
      }
    });
  }
}

TEST_CASE("gradient pool: backward order, contiguous buckets, alignment padding, errors") {
  std::vector<std::size_t> sizes{3, 0, 5, 1};
  tcoll::gradient_pool<float> packed(sizes);
  CHECK(packed.size() == 9);
  CHECK(packed.tensor_offset(2) == 3);
  CHECK(packed.range_size(0, 4) == 9);
  CHECK(packed.tensor(1).empty());
  for (float x : packed.all()) CHECK(x == 0.0f);
  tcoll::gradient_pool<float> aligned(sizes, {.alignment_bytes = 32});
  CHECK(aligned.tensor_offset(0) == 0);
  CHECK(aligned.tensor_offset(2) == 8);
  CHECK(aligned.tensor_offset(3) == 16);
  CHECK(aligned.range_offset(2, 4) == 8);
  CHECK(aligned.range_size(2, 4) == 9);
  CHECK(reinterpret_cast<std::uintptr_t>(aligned.tensor(3).data()) % 32 == 0);
  CHECK_THROWS_AS(aligned.tensor(4), tcoll::invalid_argument);
  CHECK_THROWS_AS(aligned.range(3, 2), tcoll::invalid_argument);
  CHECK_THROWS_AS(tcoll::gradient_pool<double>(sizes, {.alignment_bytes = 12}),
                  tcoll::invalid_argument);
  std::vector<std::vector<float>> model{std::vector<float>(4), std::vector<float>(2)};
  auto from_model = tcoll::gradient_pool<tcoll::half>::from_tensors(model);
  CHECK(from_model.tensor_count() == 2);
  CHECK(from_model.bytes() == 6 * sizeof(tcoll::half));
  tcoll::plan::workload w;
  w.bytes = {400, 8};
  w.backward_us = {1, 1};
  CHECK(tcoll::gradient_pool<float>::from_workload(w).tensor_size(0) == 100);
}

TEST_CASE("scheduler: random plans, sizes and ready orders, fractional inputs") {
  for (int P : {1, 2, 3, 4, 6}) {
    CAPTURE(P);
    on_team(P, [&](tcoll::thread_transport& t) {
      for (unsigned seed = 1; seed <= 6; ++seed) {
        scheduler_random_case(t, tcoll::recursive_doubling{}, seed, false);
        scheduler_random_case(t, tcoll::recursive_halving_doubling{}, seed + 100, false);
        scheduler_random_case(t, tcoll::binomial_tree{}, seed + 200, false);
        scheduler_random_case(t, tcoll::ring{}, seed + 300, false);
        scheduler_random_case(t, tcoll::ring{}, seed + 400, true);
        scheduler_random_case(t, tcoll::multi_ring{}, seed + 500, false);
        scheduler_random_case<tcoll::thread_transport, tcoll::recursive_doubling, tcoll::avg_op>(
            t, tcoll::recursive_doubling{}, seed + 600, false, {.alignment_bytes = 64});
      }
    });
  }
}

TEST_CASE("scheduler: one-tensor pool and a pool of empty tensors") {
  on_team(3, [](tcoll::thread_transport& t) {
    tcoll::gradient_pool<float> one(std::vector<std::size_t>{1000});
    tcoll::overlap_scheduler<tcoll::thread_transport, float> s(one, t, plan_with_ends({1}));
    for (auto& x : one.all()) x = 0.5f;
    s.mark_ready(0);
    s.finish();
    for (float x : one.all()) CHECK(x == 1.5f);
    tcoll::gradient_pool<float> empty(std::vector<std::size_t>{0, 0});
    tcoll::overlap_scheduler<tcoll::thread_transport, float> e(empty, t, plan_with_ends({1, 2}));
    e.mark_ready(1);
    e.mark_ready(0);
    CHECK(e.finish().buckets.size() == 2);
  });
}

TEST_CASE("scheduler: mixed-precision wire (half, bfloat16) equals allreduce_mixed per bucket") {
  for (int P : {1, 2, 3, 5}) {
    CAPTURE(P);
    on_team(P, [&](tcoll::thread_transport& t) {
      for (unsigned seed = 1; seed <= 3; ++seed) {
        scheduler_mixed_case<tcoll::half>(t, tcoll::ring{}, seed, 1.0f);
        scheduler_mixed_case<tcoll::half>(t, tcoll::recursive_doubling{}, seed + 10, 256.0f);
        scheduler_mixed_case<tcoll::bfloat16>(t, tcoll::ring{}, seed + 20, 1.0f);
        scheduler_mixed_case<tcoll::bfloat16>(t, tcoll::automatic{}, seed + 30, 1.0f);
      }
    });
  }
}

TEST_CASE("scheduler over a hierarchical allreduce (groups of 2 and 3)") {
  for (int group : {2, 3})
    on_team(6, [&](tcoll::thread_transport& t) {
      auto v = tcoll::split_groups(t, group);
      tcoll::hierarchical h(v.intra, v.inter_ptr(), {v.world_rank, v.world_size, v.shards});
      std::vector<std::size_t> sizes{100, 5000, 3, 20000};
      tcoll::gradient_pool<float> pool(sizes);
      tcoll::overlap_scheduler<decltype(h), float> s(pool, h, plan_with_ends({2, 4}));
      for (int it = 0; it < 2; ++it) {
        for (std::size_t i = 0; i < pool.tensor_count(); ++i) {
          auto g = pool.tensor(i);
          for (std::size_t j = 0; j < g.size(); ++j) g[j] = integral(t.rank(), int(i), j);
        }
        const std::vector<float> input(pool.all().begin(), pool.all().end());
        for (std::size_t i = pool.tensor_count(); i-- > 0;) s.mark_ready(i);
        s.finish();
        auto whole = input;
        tcoll::allreduce(t, std::span<float>(whole), tcoll::sum_op{}, tcoll::ring{});
        CHECK(same_bits(whole, pool.all()));
      }
      // non-blocking hierarchical allreduce, two in flight
      std::vector<float> a(777, 0.5f), b(10, 1.0f);
      auto qa = tcoll::iallreduce(h, a.data(), a.data(), a.size());
      auto qb = tcoll::iallreduce(h, b.data(), b.data(), b.size());
      qb.wait();
      qa.wait();
      for (float x : a) CHECK(x == 3.0f);
      for (float x : b) CHECK(x == 6.0f);
    });
}

// A hierarchical machine is an ordinary communicator: the same prepared-allreduce body as
// every transport, blocking and started on the group transport's engine.
static_assert(tcoll::communicator<tcoll::thread_transport>);
static_assert(!tcoll::composite_communicator<tcoll::thread_transport>);
static_assert(
    tcoll::composite_communicator<tcoll::hierarchical<tcoll::subgroup<tcoll::thread_transport>,
                                                      tcoll::subgroup<tcoll::thread_transport>>>);

TEST_CASE("prepared allreduce over a hierarchical machine (groups of 2 and 3, both forms)") {
  for (int group : {2, 3})
    on_team(6, [&](tcoll::thread_transport& t) {
      auto v = tcoll::split_groups(t, group);
      tcoll::hierarchical h(v.intra, v.inter_ptr(), {v.world_rank, v.world_size, v.shards});
      for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{999}, std::size_t{40000}}) {
        CAPTURE(n);
        prepared_case(h, tcoll::hierarchical_options<tcoll::ring>{}, n);
        tcoll::hierarchical_options<tcoll::recursive_doubling> leader;
        leader.form = tcoll::hierarchical_form::leader;
        prepared_case(h, leader, n);
      }
    });
}

TEST_CASE("scheduler: plans that differ across ranks, bad plans, bad marks") {
  on_team(4, [](tcoll::thread_transport& t) { plan_mismatch_case(t); });
  on_team(2, [](tcoll::thread_transport& t) { bad_marks_case(t); });
}

TEST_CASE("scheduler: finish() before every tensor is ready fails everywhere, fast") {
  for (int early : {0, 2})
    on_team(
        3, [&](tcoll::thread_transport& t) { finish_early_case(t, early); }, 2s);
}

TEST_CASE("scheduler: a peer that never marks makes the others fail within the timeout") {
  on_team(
      3, [](tcoll::thread_transport& t) { silent_peer_case(t, 1); }, 300ms);
}

TEST_CASE("scheduler: on a broken transport mark_ready returns and finish() throws the cause") {
  for (int P : {1, 3}) on_team(P, [](tcoll::thread_transport& t) { broken_transport_case(t); });
}

TEST_CASE("scheduler: autotune re-plans after K iterations, every rank adopts rank 0's plan") {
  for (int P : {2, 3}) on_team(P, [](tcoll::thread_transport& t) { autotune_case(t); });
}

TEST_CASE("scheduler: plans from every planner, and one computed at compile time") {
  constexpr auto compile_time = [] {
    tcoll::plan::bucket_plan p =
        tcoll::plan::detail::plan_from_closings(6, [](std::size_t k) { return k % 2 == 1; });
    std::array<std::size_t, 3> ends{};
    for (std::size_t k = 0; k < 3; ++k) ends[k] = p.ends[k];
    return ends;
  }();
  static_assert(compile_time[0] == 2 && compile_time[2] == 6);
  on_team(3, [&](tcoll::thread_transport& t) {
    std::vector<std::size_t> sizes{1000, 20, 30000, 5, 4000, 800};
    tcoll::plan::workload w;
    for (auto n : sizes) {
      w.bytes.push_back(n * sizeof(float));
      w.backward_us.push_back(50);
    }
    const tcoll::plan::linear_cost cost{20, 0.001};
    std::vector<tcoll::plan::bucket_plan> plans;
    for (auto name : {"layerwise", "single", "threshold", "ddp", "mgwfbp", "adafusion", "optimal"})
      plans.push_back(tcoll::plan::make_plan(*tcoll::plan::planner_by_name(name), w, cost));
    plans.push_back(plan_with_ends({compile_time.begin(), compile_time.end()}));
    tcoll::gradient_pool<float> pool(sizes);
    for (const auto& p : plans) {
      tcoll::overlap_scheduler<tcoll::thread_transport, float> s(pool, t, p);
      for (auto& x : pool.all()) x = 0.25f;
      for (std::size_t i = 0; i < sizes.size(); ++i) s.mark_ready(i);
      s.finish();
      for (float x : pool.all()) REQUIRE(x == 0.75f);
    }
  });
}

TEST_CASE("measured Chrome trace: Horovod's phase names, bucket args, one process per rank") {
  std::vector<tcoll::rank_iteration> ranks(2);
  on_team(2, [&](tcoll::thread_transport& t) {
    tcoll::gradient_pool<float> pool(std::vector<std::size_t>{100, 200, 300});
    tcoll::overlap_scheduler<tcoll::thread_transport, float, tcoll::sum_op, tcoll::ring> s(
        pool, t, plan_with_ends({2, 3}));
    for (std::size_t i = 0; i < 3; ++i) {
      std::this_thread::sleep_for(2ms);
      s.mark_ready(i);
    }
    ranks[static_cast<std::size_t>(t.rank())] = {t.rank(), s.finish()};
  });
  std::ostringstream out;
  tcoll::write_chrome_trace(out, ranks, ranks[0].timing.begin);
  const std::string json = out.str();
  for (const char* needle :
       {"\"BACKWARD\"", "\"WAIT_FOR_DATA\"", "\"ALLREDUCE\"", "\"QUEUE\"", "\"bucket\":1",
        "\"bytes\":1200", "\"algorithm\":\"ring\"", "\"pid\":1", "\"name\":\"rank 1\""})
    CHECK_MESSAGE(json.find(needle) != std::string::npos, needle);
  CHECK(json.rfind("\n]}\n") == json.size() - 4);
}

TEST_CASE("collective_tasks: queued and run bodies keep start order; done, idleness, failure") {
  std::atomic<int> wrong{0};
  tcoll::thread_team(3, std::chrono::seconds(20)).run([&](tcoll::thread_transport& t) {
    const int r = t.rank();
    std::vector<float> queued(1000), here(8);
    for (std::size_t i = 0; i < queued.size(); ++i) queued[i] = 0.25f * float(r + 1);
    for (std::size_t i = 0; i < here.size(); ++i) here[i] = float(r + 1);
    std::promise<bool> finished;
    auto done_seen = finished.get_future();
    // queued on the engine, then one run here while it may still be queued: their message
    // spaces were drawn in this order on every rank, so each matches its peers' own
    tcoll::queue_collective(
        t,
        [&t, &queued](int tag) {
          tcoll::cpu_reducer red;
          tcoll::allreduce_in(t, tag, queued.data(), queued.data(), queued.size(), tcoll::sum_op{},
                              tcoll::ring{}, red);
        },
        [&t, &finished](std::exception_ptr error) {
          finished.set_value(!error && tcoll::called_from_engine(t));
        });
    wrong += tcoll::called_from_engine(t);
    tcoll::run_collective(t, [&t, &here](int tag) {
      tcoll::cpu_reducer red;
      tcoll::allreduce_in(t, tag, here.data(), here.data(), here.size(), tcoll::sum_op{},
                          tcoll::recursive_doubling{}, red);
    });
    wrong += done_seen.wait_for(std::chrono::seconds(20)) != std::future_status::ready ||
             !done_seen.get();
    wrong += !tcoll::wait_engine_idle(t.collectives(), std::chrono::seconds(5)) ||
             !tcoll::engine_is_idle(t);
    for (float x : queued) wrong += x != 0.25f * 6;
    for (float x : here) wrong += x != 6.0f;
  });
  // a body that throws breaks the transport: the next collective throws the cause (the
  // failing rank's own error, or on a peer the abort it caused if that came first)
  tcoll::thread_team(3, std::chrono::seconds(20)).run([&](tcoll::thread_transport& t) {
    std::vector<float> v(8, 1.0f);
    try {
      tcoll::run_collective(t, [&t](int) { throw tcoll::invalid_argument("stop here", t.rank()); });
      wrong += 1;
    } catch (const tcoll::error&) {
    }
    try {
      tcoll::allreduce(t, std::span<float>(v));
      wrong += 1;
    } catch (const tcoll::error& e) {
      wrong += std::string(e.what()).find("broken by an earlier failure") == std::string::npos;
    }
  });
  CHECK(wrong == 0);
}
