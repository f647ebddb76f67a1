// Four ranks as threads of one process sum a gradient buffer with ring allreduce.
#include <atomic>
#include <cstdio>
#include <tcoll/tcoll.hpp>
#include <vector>

int main() {
  tcoll::thread_team team(4);
  std::atomic<int> wrong{0};
  team.run([&](tcoll::thread_transport& t) {
    std::vector<float> grad(1 << 20, float(t.rank() + 1)); // this rank's gradient
    tcoll::allreduce(t, std::span<float>(grad), tcoll::sum_op{}, tcoll::ring{});
    for (float g : grad) wrong += g != 1.0f + 2.0f + 3.0f + 4.0f;
  });
  std::printf("allreduce over 4 thread ranks: %d wrong elements\n", wrong.load());
  return wrong == 0 ? 0 : 1;
}
