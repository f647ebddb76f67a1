// Four ranks (threads) run backward into a gradient pool; the overlap scheduler allreduces
// MG-WFBP's buckets in place while the remaining tensors are still being "computed".
#include <atomic>
#include <cstdio>
#include <tcoll/plan.hpp>
#include <tcoll/schedule.hpp>
#include <tcoll/tcoll.hpp>
#include <vector>

int main() {
  const std::vector<std::size_t> sizes{1000, 250000, 4000, 60000, 500}; // backward order
  tcoll::plan::workload w{{4000, 1000000, 16000, 240000, 2000}, {50, 400, 80, 200, 30}};
  const auto plan = tcoll::plan::make_plan(tcoll::plan::mgwfbp_planner{}, w,
                                           tcoll::plan::linear_cost{20.0, 0.001});
  std::atomic<int> wrong{0};
  tcoll::thread_team team(4);
  team.run([&](tcoll::thread_transport& t) {
    tcoll::gradient_pool<float> pool(sizes);
    tcoll::overlap_scheduler<tcoll::thread_transport, float, tcoll::avg_op> scheduler(pool, t,
                                                                                      plan);
    for (int iteration = 0; iteration < 3; ++iteration) {
      for (std::size_t i = 0; i < pool.tensor_count(); ++i) {
        for (float& g : pool.tensor(i)) g = 0.25f * float(t.rank() + iteration); // "backward"
        scheduler.mark_ready(i); // its bucket starts once all of its tensors are ready
      }
      scheduler.finish(); // waits for the last bucket; the pool now holds the averages
      for (float g : pool.all()) wrong += g != 0.25f * (1.5f + float(iteration));
    }
  });
  std::printf("%zu buckets over 4 thread ranks, 3 iterations: %d wrong elements\n",
              plan.ends.size(), wrong.load());
  return wrong == 0 ? 0 : 1;
}
