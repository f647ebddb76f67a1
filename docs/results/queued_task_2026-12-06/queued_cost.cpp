// Per-call cost of a queued 8-byte allreduce on a 2-thread team: iallreduce().wait() and a
// prepared allreduce's start().wait(); medians of R repetitions, us per call.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <span>
#include <vector>
#include <tcoll/collectives.hpp>
#include <tcoll/schedule.hpp>
#include <tcoll/transport/threads.hpp>
int main(int argc, char** argv) {
  const int calls = 20000, reps = argc > 1 ? std::atoi(argv[1]) : 7;
  std::vector<double> ia, pr;
  for (int r = 0; r < reps; ++r) {
    double a = 0, p = 0;
    tcoll::thread_team(2).run([&](tcoll::thread_transport& t) {
      std::vector<float> v(2, 0.5f), out(2);
      auto prepared = tcoll::prepare_allreduce(t, v.data(), out.data(), v.size());
      for (int i = 0; i < 500; ++i) tcoll::iallreduce(t, std::span<float>(v)).wait();
      tcoll::barrier(t);
      auto s = std::chrono::steady_clock::now();
      for (int i = 0; i < calls; ++i) tcoll::iallreduce(t, std::span<float>(v)).wait();
      double x = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - s).count() / calls;
      tcoll::barrier(t);
      s = std::chrono::steady_clock::now();
      for (int i = 0; i < calls; ++i) prepared.start().wait();
      double y = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - s).count() / calls;
      if (t.rank() == 0) a = x, p = y;
    });
    ia.push_back(a), pr.push_back(p);
  }
  std::sort(ia.begin(), ia.end()), std::sort(pr.begin(), pr.end());
  std::printf("iallreduce %.3f us  prepared.start %.3f us (medians of %d)\n", ia[reps / 2], pr[reps / 2], reps);
}
