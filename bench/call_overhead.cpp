// call_overhead: what one small allreduce costs in tcoll on top of the transport it runs on
// (issue 11 sec. 2). Under mpirun with 2 processes, for the shared-memory and the MPI
// transport, at one message size (default 8 bytes, float sum), interleaved per repetition:
//   raw        the transport alone: the one exchange recursive doubling makes at 2 ranks
//              (isend + irecv_consume reducing into the buffer, both waited), no tcoll call
//   prepared   tcoll::prepared_allreduce<..., recursive_doubling>::run (steps recorded once)
//   allreduce  tcoll::allreduce(t, span, sum_op, recursive_doubling{}) (plans every call)
//   runtime    the same call with the type and op as values (scalar_type::float32,
//              reduce_kind::sum: the runtime-typed path of the preload and the torch backend)
//   MPI        MPI_Allreduce on the same processes
// Each is timed over -n back-to-back calls after a barrier (per-call time = elapsed / n,
// max over ranks) and the median of -R repetitions is printed. The overhead of tcoll is
// allreduce - raw (planning + executor + collective bookkeeping) and prepared - raw;
// runtime - allreduce is what the runtime-typed dispatch adds.
//
// `-t threads` adds the thread transport: two threads of rank 0 (rank 1 sleeps meanwhile,
// so the two threads own the two cores), once with the default eager lanes and once with
// `eager_bytes = 0` (every message zero copy, the transport's path before the lanes); its
// MPI column is MPI_Allreduce between the two processes, timed in the same repetition.
//
//   mpirun -np 2 build/bench/call_overhead [-b bytes] [-n calls] [-R reps] [-t shm,mpi,threads]
#include <mpi.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include <tcoll/collectives.hpp>
#include <tcoll/schedule.hpp>
#include <tcoll/transport/mpi.hpp>
#include <tcoll/transport/shm.hpp>
#include <tcoll/transport/threads.hpp>

#include <unistd.h>

namespace {

struct options {
  std::size_t bytes = 8;
  int calls = 20000;
  int reps = 7;
  std::string transports = "shm,mpi";
};

/// Per-call microseconds of `body` over `calls` calls, the maximum over ranks.
template <class Body>
double time_calls(int calls, Body&& body) {
  MPI_Barrier(MPI_COMM_WORLD);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) body();
  const double mine =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() /
      calls;
  double slowest = 0;
  MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// The exchange recursive doubling makes at 2 ranks, on the transport alone.
template <class Tr>
void raw_exchange(Tr& t, float* data, float* staging, std::size_t n) {
  struct context {
    float* data;
    std::size_t n;
  } c{data, n};
  auto reduce = [](void* ctx, const void* remote, std::size_t) {
    auto& k = *static_cast<context*>(ctx);
    const float* r = static_cast<const float*>(remote);
    for (std::size_t i = 0; i < k.n; ++i) k.data[i] += r[i];
  };
  const int peer = 1 - t.rank();
  // the send reads `data` while the receive would write it: send a copy, as the executor's
  // out-of-place step does
  static thread_local std::vector<float> copy;
  copy.assign(data, data + n);
  auto s = t.isend(peer, copy.data(), n * sizeof(float), 7);
  auto r =
      t.irecv_consume(peer, n * sizeof(float), 7, tcoll::consumer{reduce, &c, nullptr}, staging);
  const auto when = tcoll::clock::now() + t.timeout();
  t.wait(r, when);
  t.wait(s, when);
}

template <class Tr>
void measure(const char* name, Tr& t, const options& o) {
  const std::size_t n = std::max<std::size_t>(1, o.bytes / sizeof(float));
  std::vector<float> data(n, 0.0f), staging(n); // zeros: the sums stay finite
  tcoll::prepared_allreduce<Tr, float, tcoll::sum_op, tcoll::recursive_doubling> prepared(t, n);
  std::vector<double> raw, prep, plain, mpi, runtime;
  auto reset = [&] { std::fill(data.begin(), data.end(), 0.0f); };
  for (int rep = 0; rep < o.reps; ++rep) {
    reset();
    raw.push_back(time_calls(o.calls, [&] { raw_exchange(t, data.data(), staging.data(), n); }));
    reset();
    prep.push_back(time_calls(o.calls, [&] { prepared.run(data.data()); }));
    reset();
    plain.push_back(time_calls(o.calls, [&] {
      tcoll::allreduce(t, std::span<float>(data), tcoll::sum_op{}, tcoll::recursive_doubling{});
    }));
    reset();
    mpi.push_back(time_calls(o.calls, [&] {
      MPI_Allreduce(MPI_IN_PLACE, data.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM,
                    MPI_COMM_WORLD);
    }));
    reset();
    runtime.push_back(time_calls(o.calls, [&] {
      tcoll::allreduce(t, data.data(), data.data(), n, tcoll::scalar_type::float32,
                       tcoll::reduce_kind::sum, tcoll::recursive_doubling{});
    }));
  }
  if (t.rank() == 0)
    std::printf("%-6s %8zu %9.3f %9.3f %9.3f %9.3f %10.3f %10.3f %9.3f\n", name, n * sizeof(float),
                median(raw), median(prep), median(plain), median(mpi), median(prep) - median(raw),
                median(plain) - median(raw), median(runtime));
}

/// Rank 0 runs `f`; the other ranks wait in a polled, sleeping barrier so they take no core.
template <class F>
void on_rank0_alone(F&& f) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0) f();
  MPI_Request done = MPI_REQUEST_NULL;
  MPI_Ibarrier(MPI_COMM_WORLD, &done);
  for (int flag = 0; !flag;) {
    MPI_Test(&done, &flag, MPI_STATUS_IGNORE);
    if (!flag) usleep(1000);
  }
}

/// raw, prepared, allreduce and runtime on a 2-thread team with `eager_bytes`, per-call us, the
/// maximum over the two threads.
std::array<double, 4> thread_calls(const options& o, std::size_t eager_bytes) {
  const std::size_t n = std::max<std::size_t>(1, o.bytes / sizeof(float));
  double per_rank[2][4] = {};
  tcoll::thread_options team_options;
  team_options.eager_bytes = eager_bytes;
  tcoll::thread_team(2, team_options).run([&](tcoll::thread_transport& t) {
    std::vector<float> data(n, 0.0f), staging(n);
    tcoll::prepared_allreduce<tcoll::thread_transport, float, tcoll::sum_op,
                              tcoll::recursive_doubling>
        prepared(t, n);
    auto time = [&](int which, auto&& body) {
      std::fill(data.begin(), data.end(), 0.0f);
      t.barrier();
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < o.calls; ++i) body();
      per_rank[t.rank()][which] =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
              .count() /
          o.calls;
      t.barrier();
    };
    time(0, [&] { raw_exchange(t, data.data(), staging.data(), n); });
    time(1, [&] { prepared.run(data.data()); });
    time(2, [&] {
      tcoll::allreduce(t, std::span<float>(data), tcoll::sum_op{}, tcoll::recursive_doubling{});
    });
    time(3, [&] {
      tcoll::allreduce(t, data.data(), data.data(), n, tcoll::scalar_type::float32,
                       tcoll::reduce_kind::sum, tcoll::recursive_doubling{});
    });
  });
  return {std::max(per_rank[0][0], per_rank[1][0]), std::max(per_rank[0][1], per_rank[1][1]),
          std::max(per_rank[0][2], per_rank[1][2]), std::max(per_rank[0][3], per_rank[1][3])};
}

/// The thread transport with its eager lanes and without, next to MPI_Allreduce.
void measure_threads(const options& o) {
  const std::size_t n = std::max<std::size_t>(1, o.bytes / sizeof(float));
  const std::size_t eager_settings[2] = {tcoll::thread_options{}.eager_bytes, 0};
  std::vector<double> raw[2], prep[2], plain[2], runtime[2], mpi;
  std::vector<float> data(n, 0.0f);
  for (int rep = 0; rep < o.reps; ++rep) {
    std::fill(data.begin(), data.end(), 0.0f);
    mpi.push_back(time_calls(o.calls, [&] {
      MPI_Allreduce(MPI_IN_PLACE, data.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM,
                    MPI_COMM_WORLD);
    }));
    for (int e = 0; e < 2; ++e)
      on_rank0_alone([&] {
        const auto r = thread_calls(o, eager_settings[e]);
        raw[e].push_back(r[0]);
        prep[e].push_back(r[1]);
        plain[e].push_back(r[2]);
        runtime[e].push_back(r[3]);
      });
  }
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) return;
  const char* names[2] = {"threads", "thr-e0"};
  for (int e = 0; e < 2; ++e)
    std::printf("%-6s %8zu %9.3f %9.3f %9.3f %9.3f %10.3f %10.3f %9.3f\n", names[e],
                n * sizeof(float), median(raw[e]), median(prep[e]), median(plain[e]), median(mpi),
                median(prep[e]) - median(raw[e]), median(plain[e]) - median(raw[e]),
                median(runtime[e]));
}

} // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "-b")
      o.bytes = static_cast<std::size_t>(std::atol(argv[i + 1]));
    else if (flag == "-n")
      o.calls = std::atoi(argv[i + 1]);
    else if (flag == "-R")
      o.reps = std::atoi(argv[i + 1]);
    else if (flag == "-t")
      o.transports = argv[i + 1];
    else {
      std::fprintf(stderr,
                   "call_overhead: unknown flag %s (flags: -b bytes -n calls -R reps -t "
                   "shm,mpi,threads)\n",
                   flag.c_str());
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 2 || o.calls < 1 || o.reps < 1) {
    std::fprintf(stderr, "call_overhead: run with exactly 2 processes, -n and -R positive\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  {
    tcoll::mpi_transport m(MPI_COMM_WORLD);
    tcoll::shm_transport s(MPI_COMM_WORLD);
    if (m.rank() == 0)
      std::printf("# per-call us, medians of %d reps of %d calls (max over ranks), float sum\n"
                  "# transport bytes       raw  prepared allreduce       MPI  prep-raw  "
                  "allreduce-raw   runtime\n",
                  o.reps, o.calls);
    if (o.transports.find("shm") != std::string::npos) measure("shm", s, o);
    if (o.transports.find("mpi") != std::string::npos) measure("mpi", m, o);
  }
  if (o.transports.find("threads") != std::string::npos) measure_threads(o);
  MPI_Finalize();
  return 0;
}
