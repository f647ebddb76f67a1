// Device collectives are stream ordered: on `device_team` a collective enqueues every round
// and returns without waiting for the GPU, and a whole team's collective can be captured in
// one CUDA graph and replayed. Expectations are closed forms (integer-valued inputs) and, for
// fractional inputs, the bits of the same collective run eagerly.
#include <doctest/doctest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <tcoll/collectives.hpp>
#include <tcoll/reduce/cuda.cuh>
#include <tcoll/schedule/prepared.hpp>
#include <tcoll/transport/device_team.hpp>

#include "device_buffers.hpp"

namespace {

using tcoll::clock;
using tcoll::testing::download_array;
using tcoll::testing::gpu_timeout;

/// Spins until the host sets `*flag` (mapped pinned memory), or about `max_cycles` pass so a
/// failing test cannot hold the GPU forever.
__global__ void spin_until(const volatile int* flag, long long max_cycles) {
  const long long start = clock64();
  while (*flag == 0 && clock64() - start < max_cycles) {
  }
}

float integral(int r, std::size_t i) {
  return static_cast<float>(int((i * 7 + r) % 13) + r);
}
float fractional(int r, int salt, std::size_t i) {
  const auto h = static_cast<std::uint32_t>(i * 2654435761u) ^
                 static_cast<std::uint32_t>(r * 40503 + salt * 977);
  return 0.1f + static_cast<float>(h % 100003) / 7919.0f * (r % 2 ? -1.0f : 1.0f);
}
float integral_sum(int P, std::size_t i) {
  float s = 0;
  for (int r = 0; r < P; ++r) s += integral(r, i);
  return s;
}

void upload(float* d, const std::vector<float>& h, cudaStream_t s) {
  tcoll::detail::cuda::check(
      cudaMemcpyAsync(d, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice, s), "upload");
}
template <class Algo>
void returns_before_gpu_case(int P, std::size_t n) {
  int* flag = nullptr;
  tcoll::detail::cuda::check(cudaHostAlloc(&flag, sizeof(int), cudaHostAllocMapped),
                             "cudaHostAlloc");
  *flag = 0;
  int* dflag = nullptr;
  tcoll::detail::cuda::check(cudaHostGetDevicePointer(&dflag, flag, 0), "cudaHostGetDevicePointer");
  std::atomic<int> returned{0};
  std::mutex m;
  std::vector<std::vector<float>> results(P);
  tcoll::device_team(P, gpu_timeout).run([&](tcoll::device_transport& t) {
    const cudaStream_t s = t.stream();
    tcoll::device_buffer<float> in(n, s), out(n, s);
    std::vector<float> h(n);
    for (std::size_t i = 0; i < n; ++i) h[i] = integral(t.rank(), i);
    tcoll::cuda_reducer red{s};
    // Warm-up: CUDA loads a kernel at its first launch (lazy loading, the default since CUDA
    // 12.2), and loading may wait for the device, which the spinning kernel holds (CUDA
    // Programming Guide, "Lazy Loading", concurrent execution). Seen on an H100: the first
    // P = 2 ring here waited 10 s, until the spin gave up.
    tcoll::allreduce(t, in.data(), out.data(), n, tcoll::sum_op{}, Algo{}, red);
    tcoll::detail::cuda::synchronize(s, clock::now() + gpu_timeout);
    // the GPU is held until the host lets it go, after every rank's call returned
    spin_until<<<1, 1, 0, s>>>(dflag, 20'000'000'000LL);
    tcoll::detail::cuda::check(cudaGetLastError(), "spin_until launch");
    upload(in.data(), h, s);
    red.knobs.timeout = std::chrono::milliseconds(2000); // a host wait for the GPU would throw
    const auto t0 = clock::now();
    tcoll::allreduce(t, in.data(), out.data(), n, tcoll::sum_op{}, Algo{}, red);
    CHECK_MESSAGE(clock::now() - t0 < std::chrono::milliseconds(1500),
                  "allreduce waited for the GPU on rank " << t.rank());
    CHECK_MESSAGE(cudaStreamQuery(s) == cudaErrorNotReady,
                  "the GPU ran before the host released it (rank " << t.rank() << ")");
    returned.fetch_add(1);
    t.barrier();
    if (t.rank() == 0) {
      CHECK(returned.load() == P);
      std::atomic_ref<int>(*flag).store(1, std::memory_order_release);
    }
    auto got = download_array(out.data(), n, s);
    std::lock_guard lock(m);
    results[t.rank()] = std::move(got);
  });
  cudaFreeHost(flag);
  for (int r = 0; r < P; ++r)
    for (std::size_t i = 0; i < n; ++i)
      if (results[r][i] != integral_sum(P, i)) {
        FAIL_CHECK("rank " << r << " element " << i << ": " << results[r][i] << ", want "
                           << integral_sum(P, i));
        break;
      }
}

/// TCOLL_CAPTURE_STAGES=1 (diagnosis): synchronize the device after each stage of a capture
/// case, so a sticky error names the stage that raised it instead of the next replay.
void stage_check(const char* stage, int rank) {
  if (!std::getenv("TCOLL_CAPTURE_STAGES")) return;
  const cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess)
    FAIL("stage '" << stage << "' (rank " << rank << "): " << cudaGetErrorString(e));
}

/// Rank 0 captures the whole team's allreduce into one graph: the other ranks' streams join
/// the capture through a fork event and rejoin rank 0's stream at the end. The graph is then
/// replayed on new inputs.
template <class Algo>
void captured_team_case(int P, std::size_t n) {
  cudaEvent_t fork = nullptr;
  std::vector<cudaEvent_t> join(P);
  tcoll::detail::cuda::check(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming), "event");
  for (auto& e : join)
    tcoll::detail::cuda::check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "event");
  cudaGraphExec_t exec = nullptr;
  std::mutex m;
  std::vector<std::vector<float>> replayed(P), eager(P);
  tcoll::device_team(P, gpu_timeout).run([&](tcoll::device_transport& t) {
    const int r = t.rank();
    const cudaStream_t s = t.stream();
    tcoll::device_buffer<float> in(n, s), out(n, s);
    tcoll::detail::cuda::synchronize(s, clock::now() + gpu_timeout);
    tcoll::cuda_reducer red{s};
    // warm-up outside the capture: loads the kernels (see returns_before_gpu_case)
    tcoll::allreduce(t, in.data(), out.data(), n, tcoll::sum_op{}, Algo{}, red);
    tcoll::detail::cuda::synchronize(s, clock::now() + gpu_timeout);
    stage_check("warm-up", r);
    // TCOLL_CAPTURE_PREPARED=1 (diagnosis): capture a prepared allreduce, whose scratch is
    // allocated here, outside the capture, so the graph has no memory nodes
    std::optional<tcoll::prepared_allreduce<tcoll::device_transport, float, tcoll::sum_op, Algo,
                                            tcoll::cuda_reducer>>
        prepared;
    if (std::getenv("TCOLL_CAPTURE_PREPARED"))
      prepared.emplace(t, n, false, tcoll::sum_op{}, Algo{}, red);
    if (std::getenv("TCOLL_CAPTURE_DOT"))
      MESSAGE(Algo::name << " P=" << P << " rank " << r << ": in " << in.data() << " out "
                         << out.data());
    t.barrier();
    bool capturing = false;
    try {
      if (r == 0) {
        tcoll::detail::cuda::check(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed),
                                   "cudaStreamBeginCapture");
        capturing = true;
        tcoll::detail::cuda::check(cudaEventRecord(fork, s), "fork record");
      }
      t.barrier();
      if (r != 0) tcoll::detail::cuda::check(cudaStreamWaitEvent(s, fork, 0), "join the capture");
      if (prepared)
        prepared->run(in.data(), out.data());
      else
        tcoll::allreduce(t, in.data(), out.data(), n, tcoll::sum_op{}, Algo{}, red);
      if (r != 0) tcoll::detail::cuda::check(cudaEventRecord(join[r], s), "join record");
      t.barrier();
      if (r == 0) {
        for (int q = 1; q < P; ++q)
          tcoll::detail::cuda::check(cudaStreamWaitEvent(s, join[q], 0), "rejoin");
        cudaGraph_t graph = nullptr;
        capturing = false;
        tcoll::detail::cuda::check(cudaStreamEndCapture(s, &graph), "cudaStreamEndCapture");
        // TCOLL_CAPTURE_DOT=DIR (diagnosis): the captured graph with every node's parameters
        if (const char* dir = std::getenv("TCOLL_CAPTURE_DOT")) {
          const std::string path =
              std::string(dir) + "/" + std::string(Algo::name) + "_P" + std::to_string(P) + ".dot";
          tcoll::detail::cuda::check(
              cudaGraphDebugDotPrint(graph, path.c_str(), cudaGraphDebugDotFlagsVerbose),
              "cudaGraphDebugDotPrint");
        }
        const unsigned long long flags =
            std::getenv("TCOLL_CAPTURE_AUTOFREE") ? cudaGraphInstantiateFlagAutoFreeOnLaunch : 0;
        tcoll::detail::cuda::check(cudaGraphInstantiate(&exec, graph, flags),
                                   "cudaGraphInstantiate");
        cudaGraphDestroy(graph);
        stage_check("instantiate", r);
      }
    } catch (...) {
      // never leave a capture open: later tests on this GPU would fail with capture errors
      if (capturing) {
        cudaGraph_t broken = nullptr;
        (void)cudaStreamEndCapture(s, &broken);
        if (broken) cudaGraphDestroy(broken);
        (void)cudaGetLastError();
      }
      throw;
    }
    t.barrier();
    for (int round = 0; round < 3; ++round) {
      std::vector<float> h(n);
      for (std::size_t i = 0; i < n; ++i)
        h[i] = round == 0 ? integral(r, i) : fractional(r, round, i);
      upload(in.data(), h, s);
      tcoll::detail::cuda::synchronize(s, clock::now() + gpu_timeout);
      stage_check("upload", r);
      t.barrier();
      if (r == 0) {
        tcoll::detail::cuda::check(cudaGraphLaunch(exec, s), "cudaGraphLaunch");
        tcoll::detail::cuda::check(cudaStreamSynchronize(s),
                                   ("graph replay " + std::to_string(round)).c_str());
      }
      t.barrier();
      auto got = download_array(out.data(), n, s);
      // the same collective, eagerly, on the same inputs
      tcoll::allreduce(t, in.data(), out.data(), n, tcoll::sum_op{}, Algo{}, red);
      tcoll::detail::cuda::check(cudaStreamSynchronize(s),
                                 ("eager allreduce after replay " + std::to_string(round)).c_str());
      auto want = download_array(out.data(), n, s);
      t.barrier();
      std::lock_guard lock(m);
      if (round == 0)
        for (std::size_t i = 0; i < n; ++i)
          if (got[i] != integral_sum(P, i)) {
            FAIL_CHECK("graph replay, rank " << r << " element " << i << ": " << got[i] << ", want "
                                             << integral_sum(P, i));
            break;
          }
      CHECK_MESSAGE(std::memcmp(got.data(), want.data(), n * sizeof(float)) == 0,
                    "graph replay differs from the eager allreduce, rank " << r << " round "
                                                                           << round);
      replayed[r] = got;
    }
  });
  if (exec) cudaGraphExecDestroy(exec);
  if (std::getenv("TCOLL_CAPTURE_SYNC")) cudaDeviceSynchronize();
  if (std::getenv("TCOLL_CAPTURE_TRIM")) {
    cudaDeviceSynchronize();
    int dev = 0;
    cudaGetDevice(&dev);
    cudaDeviceGraphMemTrim(dev);
  }
  cudaEventDestroy(fork);
  for (auto e : join) cudaEventDestroy(e);
  for (int r = 1; r < P; ++r)
    CHECK_MESSAGE(std::memcmp(replayed[0].data(), replayed[r].data(), n * sizeof(float)) == 0,
                  "rank " << r << " differs from rank 0");
}

} // namespace

TEST_CASE("device_team collectives are stream ordered: every round enqueued, no host wait for "
          "the GPU") {
  for (int P : {1, 2, 3, 4}) {
    CAPTURE(P);
    returns_before_gpu_case<tcoll::ring>(P, 1000);
    returns_before_gpu_case<tcoll::recursive_doubling>(P, 37);
    returns_before_gpu_case<tcoll::recursive_halving_doubling>(P, 4099);
    returns_before_gpu_case<tcoll::binomial_tree>(P, 513);
  }
}

TEST_CASE("a whole device_team allreduce captured in one CUDA graph, replayed on new inputs") {
  // Diagnosis on a GPU machine: TCOLL_CAPTURE_ONLY=ring|rd|rhd runs one algorithm,
  // TCOLL_CAPTURE_P=N one team size, TCOLL_CAPTURE_REVERSE=1 the algorithms in reverse order,
  // TCOLL_CAPTURE_KEEP_POOL=1 keeps freed memory of the default pool mapped (release
  // threshold at its maximum instead of 0, which unmaps it at every synchronization).
  if (std::getenv("TCOLL_CAPTURE_KEEP_POOL")) {
    int dev = 0;
    cudaMemPool_t pool = nullptr;
    tcoll::detail::cuda::check(cudaGetDevice(&dev), "cudaGetDevice");
    tcoll::detail::cuda::check(cudaDeviceGetDefaultMemPool(&pool, dev), "default pool");
    std::uint64_t keep = UINT64_MAX;
    tcoll::detail::cuda::check(
        cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep), "release threshold");
  }
  const bool reverse = std::getenv("TCOLL_CAPTURE_REVERSE") != nullptr;
  const char* only = std::getenv("TCOLL_CAPTURE_ONLY");
  const auto wanted = [&](const char* name) { return !only || std::strcmp(only, name) == 0; };
  const char* only_p = std::getenv("TCOLL_CAPTURE_P");
  for (int P : {1, 2, 3, 4, 8}) {
    if (only_p && std::atoi(only_p) != P) continue;
    CAPTURE(P);
    const auto ring_case = [&] {
      if (!wanted("ring")) return;
      MESSAGE("ring P=" << P);
      captured_team_case<tcoll::ring>(P, 4099);
    };
    const auto rd_case = [&] {
      if (!wanted("rd")) return;
      MESSAGE("recursive_doubling P=" << P);
      captured_team_case<tcoll::recursive_doubling>(P, 100);
    };
    const auto rhd_case = [&] {
      if (!wanted("rhd")) return;
      MESSAGE("recursive_halving_doubling P=" << P);
      captured_team_case<tcoll::recursive_halving_doubling>(P, 1000);
    };
    if (reverse) {
      rhd_case();
      rd_case();
      ring_case();
    } else {
      ring_case();
      rd_case();
      rhd_case();
    }
  }
}
