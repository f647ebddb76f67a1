// The execution layer on device memory: a gradient pool allocated by `cuda_reducer` and the
// overlap scheduler running a random fusion plan over `device_team`, with fractional inputs.
// Expectations never come from the scheduler: each scheduled iteration is compared, bit for
// bit, with blocking allreduces (one per bucket, same algorithm) of a device copy of the same
// inputs, and the pools of all ranks are compared with each other on the host.
#include <doctest/doctest.h>

#include <cstring>
#include <mutex>
#include <random>
#include <vector>

#include <tcoll/reduce/cuda.cuh>
#include <tcoll/schedule.hpp>
#include <tcoll/transport/device_team.hpp>

#include "../schedule/cases.hpp"
#include "device_buffers.hpp"

namespace {

using tcoll::clock;
using tcoll::testing::download_array;

/// Runs `iterations` scheduled iterations of a random plan (seed shared by all ranks) with
/// algorithm `Algo` on P virtual ranks; checks each against per-bucket blocking allreduces and
/// across ranks.
template <class Algo>
void scheduled_iterations_case(int P, unsigned seed, int iterations) {
  std::mt19937 shape_rng(seed);
  const auto sizes = schedule_test::random_sizes(shape_rng, 24);
  const auto plan = schedule_test::random_plan(sizes.size(), shape_rng);
  std::mutex m;
  std::vector<std::vector<float>> pools(static_cast<std::size_t>(P) * iterations);
  tcoll::device_team(P, tcoll::testing::gpu_timeout).run([&](tcoll::device_transport& t) {
    const int r = t.rank();
    const tcoll::cuda_reducer red{t.stream()};
    tcoll::gradient_pool<float, tcoll::cuda_reducer> pool(sizes, {}, red);
    tcoll::overlap_scheduler<tcoll::device_transport, float, tcoll::sum_op, Algo,
                             tcoll::cuda_reducer>
        sched(pool, t, plan, {}, Algo{});
    for (int it = 0; it < iterations; ++it) {
      std::vector<float> input(pool.size());
      for (std::size_t i = 0; i < input.size(); ++i) input[i] = schedule_test::fractional(r, it, i);
      red.copy_from_host(pool.data(), input.data(), input.size());
      tcoll::device_buffer<float> expected(input.size(), t.stream());
      red.copy(expected.data(), pool.data(), input.size());
      red.synchronize();

      std::mt19937 order_rng(seed * 31 + it);
      schedule_test::mark_all_random(sched, pool.tensor_count(), order_rng);
      const auto& timing = sched.finish();
      REQUIRE(timing.buckets.size() == plan.bucket_count());
      for (const auto& b : timing.buckets) CHECK(b.finished >= b.started);

      for (std::size_t k = 0; k < plan.bucket_count(); ++k) {
        const std::size_t off = pool.range_offset(plan.begin(k), plan.end(k));
        const std::size_t n = pool.range_size(plan.begin(k), plan.end(k));
        tcoll::allreduce(t, expected.data() + off, expected.data() + off, n, tcoll::sum_op{},
                         Algo{}, red);
      }
      const auto got = download_array(pool.data(), pool.size(), t.stream());
      const auto want = download_array(expected.data(), input.size(), t.stream());
      CHECK_MESSAGE(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0,
                    "rank " << r << " iteration " << it
                            << ": scheduled pool differs from blocking per-bucket allreduces");
      std::lock_guard lock(m);
      pools[static_cast<std::size_t>(it) * P + r] = got;
    }
  });
  for (int it = 0; it < iterations; ++it)
    for (int r = 1; r < P; ++r) {
      const auto& a = pools[static_cast<std::size_t>(it) * P];
      const auto& b = pools[static_cast<std::size_t>(it) * P + r];
      REQUIRE(a.size() == b.size());
      CHECK_MESSAGE(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0,
                    "rank " << r << " differs from rank 0 in iteration " << it);
    }
}

} // namespace

TEST_CASE("overlap_scheduler on device_team + cuda_reducer: device gradient pool, random plans, "
          "fractional inputs, same bits as blocking per-bucket allreduces on every rank") {
  for (int P : {1, 2, 3, 4}) {
    for (unsigned seed : {1u, 7u}) {
      CAPTURE(P);
      CAPTURE(seed);
      scheduled_iterations_case<tcoll::ring>(P, seed, 2);
      scheduled_iterations_case<tcoll::recursive_halving_doubling>(P, seed + 100, 2);
    }
  }
}
