// The timeline simulator against hand-computed timelines, MG-WFBP Eq. 11-13, OSF
// Eq. 3 and 8-10, and the Chrome trace writer.
#include <doctest/doctest.h>

#include <random>
#include <sstream>

#include "tcoll/plan.hpp"
#if TCOLL_HAVE_NLOHMANN_JSON // the JSON reader is optional (nlohmann/json)
#include "tcoll/plan/bench_records.hpp"
#endif

using namespace tcoll::plan;
using tcoll::algorithm_id;

TEST_CASE("hand-computed WFBP timeline without queueing") {
  const workload w{{100, 200, 300}, {2, 3, 4}, 10};
  const linear_cost c{1, 0.01};
  const auto t = simulate(w, c, layerwise_planner{}.plan(w, c));
  CHECK(t.backward_start_us == std::vector<double>{10, 12, 15});
  CHECK(t.backward_end_us == std::vector<double>{12, 15, 19});
  REQUIRE(t.buckets.size() == 3);
  CHECK(t.buckets[0].start_us == doctest::Approx(12));
  CHECK(t.buckets[0].end_us == doctest::Approx(14));
  CHECK(t.buckets[1].start_us == doctest::Approx(15));
  CHECK(t.buckets[1].end_us == doctest::Approx(18));
  CHECK(t.buckets[2].start_us == doctest::Approx(19));
  CHECK(t.buckets[2].end_us == doctest::Approx(23));
  CHECK(t.compute_us == doctest::Approx(19));
  CHECK(t.iteration_us == doctest::Approx(23));
  CHECK(t.non_overlapped_us == doctest::Approx(4));
  CHECK(t.scaling_factor == doctest::Approx(19.0 / 23.0));
  CHECK(t.total_wait_us == doctest::Approx(0));
}

TEST_CASE("hand-computed timeline with queueing, fusion and dispatch delay") {
  const workload w{{100, 200, 300}, {2, 3, 4}, 10};
  const linear_cost c{5, 0.01};
  const auto t = simulate(w, c, layerwise_planner{}.plan(w, c));
  // 12 -> 18, then ready at 15 waits until 18 -> 25, ready at 19 waits until 25 -> 33
  CHECK(t.buckets[1].start_us == doctest::Approx(18));
  CHECK(t.buckets[1].wait_us() == doctest::Approx(3));
  CHECK(t.buckets[2].start_us == doctest::Approx(25));
  CHECK(t.buckets[2].wait_us() == doctest::Approx(6));
  CHECK(t.iteration_us == doctest::Approx(33));
  CHECK(t.communication_us == doctest::Approx(6 + 7 + 8));
  // fused [0,1] + [2] with a 2 us dispatch delay on the first bucket:
  // bucket 0 ready 15, starts 17, takes 5 + 3 = 8 -> 25; bucket 1 ready 19 -> 25 + 8 = 33
  const bucket_plan fused{{2, 3}, {2.0, 0.0}};
  const auto f = simulate(w, c, fused);
  CHECK(f.buckets[0].bytes == 300);
  CHECK(f.buckets[0].start_us == doctest::Approx(17));
  CHECK(f.buckets[1].start_us == doctest::Approx(25));
  CHECK(f.iteration_us == doctest::Approx(33));
  CHECK_THROWS_AS(simulate(w, c, bucket_plan{{1, 1, 3}, {}}), tcoll::invalid_argument);
  CHECK_THROWS_AS(simulate(w, c, bucket_plan{{1, 2}, {}}), tcoll::invalid_argument);
}

TEST_CASE("MG-WFBP Case 1 / Eq. 11: fully hidden communication") {
  std::mt19937_64 rng(11);
  for (int round = 0; round < 50; ++round) {
    // t_c(l) <= t_b(l-1): in backward order, T(bytes[k]) <= backward[k+1]
    const linear_cost c{5, 0.001};
    workload w;
    w.forward_us = 30;
    const std::size_t L = 2 + rng() % 30;
    for (std::size_t k = 0; k < L; ++k) w.bytes.push_back(rng() % 100000);
    w.backward_us.push_back(1 + rng() % 50);
    for (std::size_t k = 1; k < L; ++k)
      w.backward_us.push_back(c(static_cast<double>(w.bytes[k - 1])) + rng() % 20);
    const auto t = simulate(w, c, layerwise_planner{}.plan(w, c));
    // t_iter = t_f + t_b + t_c^(1), layer 1 being the last tensor
    CHECK(t.iteration_us ==
          doctest::Approx(w.compute_us() + c(static_cast<double>(w.bytes.back()))));
  }
}

TEST_CASE("MG-WFBP Case 3 / Eq. 13: communication from layer C on is the bottleneck") {
  // Layers L..C+1 are slow to compute and cheap to send (hidden); layer C's allreduce
  // starts when its backward ends and every later allreduce queues behind it because
  // layers C-1..1 compute faster than they communicate. Then
  //   t_iter = t_f + sum_{j=C}^{L} t_b(j) + sum_{j=1}^{C} t_c(j)
  // (Eq. 13 as printed shifts the first sum's indices by one; this is the timeline of
  // its Fig. 3.)
  const linear_cost c{10, 0.0};
  workload w;
  w.forward_us = 7;
  const std::size_t hidden = 5, C = 6; // tensors 0..4 are layers L..C+1, tensor 5 is layer C
  for (std::size_t k = 0; k < hidden; ++k) {
    w.bytes.push_back(1);
    w.backward_us.push_back(50);
  }
  w.bytes.push_back(1);
  w.backward_us.push_back(50); // layer C
  for (std::size_t k = 0; k + 1 < C; ++k) {
    w.bytes.push_back(1);
    w.backward_us.push_back(3);
  } // layers C-1..1
  const auto t = simulate(w, c, layerwise_planner{}.plan(w, c));
  const double expected = w.forward_us + (hidden + 1) * 50.0 + C * 10.0;
  CHECK(t.iteration_us == doctest::Approx(expected));
}

TEST_CASE("OSF Eq. 3, 8-10: scaling factor of the no-fusion timeline") {
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> unit(0, 1);
  for (int round = 0; round < 100; ++round) {
    const std::size_t n = 1 + rng() % 40;
    workload w;
    w.forward_us = 100 * unit(rng);
    for (std::size_t k = 0; k < n; ++k) {
      w.bytes.push_back(rng() % 2'000'000);
      w.backward_us.push_back(200 * unit(rng));
    }
    const auto cost = flat_allreduce(algorithm_id::ring, 16, {20, 8e-4, 1e-5});
    // OSF numbers layers n..1 in backward order: layer i is tensor n - i.
    auto D = [&](std::size_t i) { return static_cast<double>(w.bytes[n - i]); };
    auto tb = [&](std::size_t i) { return w.backward_us[n - i]; };
    // Eq. 8 with the backward sum starting at j = i (as Eq. 15 writes it): a layer's
    // gradients cannot be sent before its own backward ends.
    std::vector<double> tau(n + 1, 0.0);
    for (std::size_t i = n - 1; i >= 1; --i) {
      double backward = 0;
      for (std::size_t j = i; j <= n - 1; ++j) backward += tb(j);
      tau[i] = std::max(tau[i + 1] + cost(D(i + 1)), backward);
    }
    const double update = tau[1] + cost(D(1)); // Eq. 9
    double overlap = 0;                        // Eq. 10
    for (std::size_t i = 1; i <= n - 1; ++i) overlap += tb(i);
    const double comp = w.compute_us();                  // Eq. 4-5
    const double osf = comp / (comp + update - overlap); // Eq. 3
    CAPTURE(n);
    CHECK(simulate(w, cost, layerwise_planner{}.plan(w, cost)).scaling_factor ==
          doctest::Approx(osf).epsilon(1e-12));
  }
}

#if TCOLL_HAVE_NLOHMANN_JSON
TEST_CASE("Chrome trace: one compute and one communication track, buckets in args") {
  const workload w{{100, 200, 300}, {2, 3, 4}, 10};
  const linear_cost c{5, 0.01};
  const auto t = simulate(w, c, bucket_plan{{2, 3}, {}});
  std::ostringstream out;
  const std::vector<std::string> names{"fc.bias", "fc.\"weight\"", "conv1.weight"};
  write_chrome_trace(out, t, names);
  const std::string json = out.str();
  const auto begin = json.find('['), end = json.rfind(']');
  REQUIRE(begin != std::string::npos);
  const auto events = parse_json_records(std::string_view(json).substr(begin, end - begin + 1));
  // 2 track names + FORWARD + 3 BACKWARD + 2 ALLREDUCE
  REQUIRE(events.size() == 8);
  int allreduce = 0, backward = 0;
  for (const auto& e : events) {
    const auto& name = std::get<std::string>(e.at("name"));
    if (name.rfind("ALLREDUCE", 0) == 0) {
      ++allreduce;
      CHECK(std::get<double>(e.at("tid")) == 1);
    }
    if (name == "BACKWARD") {
      ++backward;
      CHECK(std::get<double>(e.at("tid")) == 0);
    }
  }
  CHECK(allreduce == 2);
  CHECK(backward == 3);
  CHECK(json.find("\"bytes\":300") != std::string::npos);
  CHECK(json.find("\"first\":\"fc.bias\",\"last\":\"fc.\\\"weight\\\"\"") != std::string::npos);
  CHECK(json.find("\"ts\":15,\"dur\":8") != std::string::npos); // bucket 0: ready 15, 5 + 3 us
}
#endif // TCOLL_HAVE_NLOHMANN_JSON
