// allreduce_perf: nccl-tests style allreduce benchmark of every tcoll algorithm, on the
// threads transport in process (default without a launcher) or on MPI under mpirun, where
// `passthrough` (MPI_Allreduce) is measured in the same run as the baseline. `-t node` adds
// the two-level `hierarchical` (shared memory or MPI inside a node, MPI across nodes).
//
//   ./allreduce_perf -b 8 -e 64M -f 8 -g 2                  # threads, 2 ranks
//   mpirun -np 4 ./allreduce_perf -t mpi -b 8 -e 256M -f 8 -R 5 --json out.json
//   mpirun -np 4 ./allreduce_perf -t shm -a ring,recursive_doubling,passthrough
//   mpirun -np 4 ./allreduce_perf -t node --ranks-per-node 2 --intra shm,mpi
//       --inter ring,recursive_doubling -a hierarchical,ring,passthrough   # one command
//   ./allreduce_perf -J nccl.json                           # nccl-tests' JSON layout too
//
// Timing (as nccl-tests): after `-w` warm-up calls and a barrier, `-n` back-to-back calls
// are timed on every rank; the iteration time is the elapsed time / n, and the time of the
// run is the maximum over ranks. `-R` repeats that and reports the median. Algorithms are
// interleaved per size (all algorithms at one size, then the next size) so that slow phases
// of a noisy machine hit every algorithm alike. The check runs one more call on fresh
// integer-valued inputs and compares every element bit for bit with an expectation
// computed independently (bench/common/perf_check.hpp).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <unistd.h>
#include <vector>

extern char** environ;

#include <tcoll/core/error.hpp>
#include <tcoll/reduce/runtime.hpp>
#include <tcoll/transport/threads.hpp>

#ifdef TCOLL_HAVE_MPI
#include <mpi.h>

#include <tcoll/transport/mpi.hpp>
#include <tcoll/transport/shm.hpp>
#endif

#include "common/perf_entry.hpp"
#include "common/perf_options.hpp"
#include "common/perf_report.hpp"

// the runtime kernels of every transport's file, compiled here only (bench/meson.build)
TCOLL_RUNTIME_KERNELS_INSTANCE

namespace {

using namespace tcoll;
using namespace tcoll::bench;

void print_header(std::FILE* f, const perf_options& o, const std::string& transport, int nranks) {
  std::fprintf(f,
               "# tcoll allreduce_perf: transport %s nranks %d minBytes %zu maxBytes %zu "
               "step: %g(factor) warmup iters: %d iters: %d reps: %d validation: %d\n",
               transport.c_str(), nranks, o.min_bytes, o.max_bytes, o.step_factor, o.warmup,
               o.iters, o.reps, o.check ? 1 : 0);
  std::string algos;
  for (const auto& a : o.algorithms) algos += (algos.empty() ? "" : " ") + a;
  std::fprintf(f, "# algorithms: %s\n", algos.c_str());
  if (transport == "threads")
    std::fprintf(f, "# eager messages: up to %zu bytes (thread_options::eager_bytes)\n",
                 o.eager_bytes >= 0 ? static_cast<std::size_t>(o.eager_bytes)
                                    : thread_options{}.eager_bytes);
  if (o.registered)
    std::fprintf(f, "# buffers: registered (shm_transport::allocate, in the node's shared "
                    "memory; passthrough = MPI_Allreduce on the same buffers)\n");
  // The tests set it to get Open MPI 4.1.4's 8-bit sums right; it also turns off Open MPI's
  // vectorised reductions, which slows the MPI reference (2 MiB float sum on 2 processes:
  // 3.9 against 4.9 GB/s), so a timing run should not inherit it unnoticed.
  if (const char* op = std::getenv("OMPI_MCA_op"))
    std::fprintf(f,
                 "# warning: OMPI_MCA_op=%s is set: Open MPI's reductions may run without "
                 "their vectorised (AVX) code, which slows passthrough\n",
                 op);
}

/// The run's description for `-J`, filled in as the run learns it.
nccl_json_context& run_context() {
  static nccl_json_context c;
  return c;
}

std::string host_name() {
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  return host;
}

int finish(const perf_options& o, const std::vector<row>& rows) {
  print_report(stdout, rows);
  std::fflush(stdout);
  if (!o.json.empty() && !write_json(o.json, rows, o.iters, o.reps)) {
    std::fprintf(stderr, "allreduce_perf: cannot write --json file '%s'\n", o.json.c_str());
    return 1;
  }
  if (!o.nccl_json.empty() && !write_nccl_json(o.nccl_json, rows, run_context())) {
    std::fprintf(stderr, "allreduce_perf: cannot write -J file '%s'\n", o.nccl_json.c_str());
    return 1;
  }
  long long wrong = 0;
  for (const auto& r : rows)
    wrong += std::max(0LL, r.out_of_place.wrong) + std::max(0LL, r.in_place.wrong);
  return wrong == 0 ? 0 : 3;
}

bool under_mpi_launcher() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"})
    if (std::getenv(v)) return true;
  return false;
}

int run_threads(perf_options o) {
  auto& algos = o.algorithms;
  if (std::find(algos.begin(), algos.end(), "passthrough") != algos.end()) {
    algos.erase(std::remove(algos.begin(), algos.end(), "passthrough"), algos.end());
    std::printf("# passthrough skipped: the threads transport has no vendor allreduce; "
                "bench/run_allreduce_suite.sh puts threads next to MPI_Allreduce\n");
    if (algos.empty()) throw invalid_argument("allreduce_perf: nothing to run on threads");
  }
  print_header(stdout, o, "threads", o.nranks);
  std::printf("#  Rank  0..%d Pid %6d on %s (threads of one process)\n", o.nranks - 1,
              static_cast<int>(getpid()), [] {
                static char host[256] = "?";
                gethostname(host, sizeof host - 1);
                return host;
              }());
  std::fflush(stdout);
  run_context().transport = "threads";
  for (int r = 0; r < o.nranks; ++r)
    run_context().ranks.push_back({r, static_cast<int>(getpid()), host_name()});
  std::vector<row> rows;
  thread_options team_options{.timeout = std::chrono::seconds(o.timeout_s)};
  if (o.eager_bytes >= 0) team_options.eager_bytes = static_cast<std::size_t>(o.eager_bytes);
  thread_team team(o.nranks, team_options);
  team.run([&](thread_transport& t) { run_all_threads(t, o, rows); });
  return finish(o, rows);
}

#ifdef TCOLL_HAVE_MPI
/// `transport` shm: the processes of MPI_COMM_WORLD through one shared segment
/// (`shm_transport`), with MPI_Allreduce on the same processes as passthrough; node: the
/// two-level machines and the MPI transport (bench/perf_node.cpp); mpi: the MPI transport.
int run_mpi(const perf_options& o, int& argc, char**& argv, const std::string& transport) {
  const bool shm = transport == "shm";
  MPI_Init(&argc, &argv);
  int status = 0;
  {
    // passthrough is the baseline: MPI_Allreduce itself, not tcoll's polled MPI_Iallreduce
    // (TCOLL_BENCH_NATIVE=polled measures the latter, the default of mpi_transport).
    const char* native = std::getenv("TCOLL_BENCH_NATIVE");
    const bool polled = native && std::string_view(native) == "polled";
    const mpi_options options{.timeout = std::chrono::seconds(o.timeout_s),
                              .blocking_native_allreduce = !polled};
    mpi_transport t(MPI_COMM_WORLD, options);
    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    std::vector<char> hosts(static_cast<std::size_t>(t.size()) * 256);
    std::vector<int> pids(static_cast<std::size_t>(t.size()));
    const int pid = static_cast<int>(getpid());
    MPI_Gather(host, 256, MPI_CHAR, hosts.data(), 256, MPI_CHAR, 0, MPI_COMM_WORLD);
    MPI_Gather(&pid, 1, MPI_INT, pids.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
    run_context().transport = shm ? (o.registered ? "shm-registered" : "shm") : transport;
    for (int r = 0; r < t.size(); ++r)
      run_context().ranks.push_back(
          {r, pids[static_cast<std::size_t>(r)], &hosts[static_cast<std::size_t>(r) * 256]});
    if (t.rank() == 0) {
      print_header(stdout, o, transport, t.size());
      for (int r = 0; r < t.size(); ++r)
        std::printf("#  Rank %2d Pid %6d on %s\n", r, pids[r],
                    &hosts[static_cast<std::size_t>(r) * 256]);
      std::fflush(stdout);
    }
    std::vector<row> rows;
    try {
      if (shm) {
        shm_transport s(MPI_COMM_WORLD, shm_options{.timeout = std::chrono::seconds(o.timeout_s)});
        run_all_shm(s, t, o, rows);
      } else if (transport == "node") {
        run_all_node(t, options, o, rows);
      } else {
        run_all_mpi(t, o, rows);
      }
    } catch (const std::exception& e) {
      // The other ranks are stuck in a collective this rank left; end the job.
      std::fprintf(stderr, "allreduce_perf [rank %d]: %s\n", t.rank(), e.what());
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (t.rank() == 0) status = finish(o, rows);
    MPI_Bcast(&status, 1, MPI_INT, 0, MPI_COMM_WORLD);
  }
  MPI_Finalize();
  return status;
}
#endif

} // namespace

int main(int argc, char** argv) {
  perf_options o;
  try {
    o = parse_options(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  if (o.help) {
    std::printf("%s", usage().c_str());
    return 0;
  }
  {
    auto& c = run_context();
    c.args.assign(argv, argv + argc);
    // the settings that change what was measured (nccl-tests records the whole environment)
    for (char** e = environ; e && *e; ++e) {
      const std::string_view entry(*e);
      for (std::string_view prefix : {"TCOLL_", "OMPI_MCA_", "NCCL_", "OMP_"})
        if (entry.substr(0, prefix.size()) == prefix) c.env.emplace_back(entry);
    }
    c.min_bytes = o.min_bytes;
    c.max_bytes = o.max_bytes;
    c.step_factor = o.step_factor;
    c.warmup = o.warmup;
    c.iters = o.iters;
    c.reps = o.reps;
    c.check = o.check;
    c.start_time = now_string();
  }
  std::string transport = o.transport;
  if (transport == "auto") transport = under_mpi_launcher() ? "mpi" : "threads";
  try {
    if (transport == "mpi" || transport == "shm" || transport == "node") {
#ifdef TCOLL_HAVE_MPI
      return run_mpi(o, argc, argv, transport);
#else
      std::fprintf(stderr,
                   "allreduce_perf: -t %s: this build has no MPI (reconfigure with "
                   "-Dmpi=enabled and an MPI installation)\n",
                   transport.c_str());
      return 2;
#endif
    }
    return run_threads(o);
  } catch (const tcoll::invalid_argument& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "allreduce_perf: %s\n", e.what());
    return 1;
  }
}
