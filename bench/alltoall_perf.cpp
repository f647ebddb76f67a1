// alltoall_perf: nccl-tests style all-to-all benchmark, the flags and `--json` records of
// allreduce_perf. tcoll's `alltoall` (each algorithm of the table's alltoall line, and
// `automatic`, the library's choice by size) on the threads transport in process,
// on MPI or on shared memory under mpirun, where `passthrough` is `MPI_Alltoall` over the
// same processes, measured in the same run, interleaved per size.
//
//   ./alltoall_perf -g 4 -b 64 -e 16M                         # threads, 4 ranks
//   mpirun -np 2 ./alltoall_perf -t shm -b 64 -e 16M -R 5 --json out.json
//
// Sizes are one rank's whole send buffer (nccl-tests' alltoall convention): `bytes / 4 / P`
// floats go to each peer (at least one). busbw = algbw (P - 1) / P. Timing as
// allreduce_perf: `-w` warm-up calls, a barrier, `-n` timed calls; the time is the maximum
// over ranks, `-R` repetitions give the median. The check runs one more call on fresh
// inputs and compares every received element bit for bit with the value its sender wrote.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include <tcoll/collectives.hpp>
#include <tcoll/transport/threads.hpp>

#ifdef TCOLL_HAVE_MPI
#include <mpi.h>

#include <tcoll/transport/mpi.hpp>
#include <tcoll/transport/shm.hpp>
#endif

#include "common/perf_options.hpp"
#include "common/perf_report.hpp"

namespace {

using namespace tcoll;
using namespace tcoll::bench;

/// `automatic`, the table's flat alltoall algorithms, then passthrough.
std::vector<std::string> alltoall_algorithm_names() {
  std::vector<std::string> names{"automatic"};
  for (algorithm_id a : algorithms_of(collective::alltoall))
    if (a != algorithm_id::hierarchical) names.emplace_back(to_string(a));
  names.emplace_back("passthrough");
  return names;
}

struct alltoall_options {
  std::size_t min_bytes = 64, max_bytes = std::size_t{16} << 20;
  double step_factor = 2;
  int iters = 20, warmup = 5, reps = 1, nranks = 2, timeout_s = 120;
  bool check = true;
  std::size_t all_posted = pairwise_exchange{}.all_posted_max_bytes; ///< --all-posted
  /// --area-single-copy-from
  std::size_t area_single_copy_from = in_segment{}.alltoall_single_copy_from_bytes;
  std::vector<std::string> algorithms = alltoall_algorithm_names();
  std::string transport = "auto", json;
};

const char* usage_text =
    "usage: alltoall_perf [options]\n"
    "  -b minbytes   smallest send buffer per rank (K/M/G suffixes; default 64)\n"
    "  -e maxbytes   largest send buffer per rank (default 16M)\n"
    "  -f factor     size multiplier between steps (default 2)\n"
    "  -n iters      timed iterations per measurement (default 20)\n"
    "  -w iters      warm-up iterations (default 5)\n"
    "  -c 0|1        bit-exact check of the results (default 1)\n"
    "  -a algo       automatic|pairwise_exchange|bruck|in_segment|passthrough, comma list or all\n"
    "                (default all; automatic is alltoall's default, alltoall_by_size;\n"
    "                passthrough is MPI_Alltoall, under mpirun only)\n"
    "  -t transport  threads|mpi|shm|auto (auto: mpi under mpirun, else threads)\n"
    "  -g nranks     ranks of the threads transport (default 2)\n"
    "  -R reps       repeat each measurement, report the median (default 1)\n"
    "  -T seconds    transport timeout (default 120)\n"
    "  --json FILE   write one record per measurement (allreduce_perf's fields)\n"
    "  --all-posted bytes  pairwise_exchange::all_posted_max_bytes (0: always step by step;\n"
    "                default 16384)\n"
    "  --area-single-copy-from bytes  in_segment::alltoall_single_copy_from_bytes: blocks\n"
    "                read straight from their senders from this size (default 4K; 1G: never)\n";

alltoall_options parse(int argc, char** argv) {
  alltoall_options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (flag == "-h" || flag == "--help") {
      std::printf("%s", usage_text);
      std::exit(0);
    }
    if (i + 1 >= argc)
      throw invalid_argument("alltoall_perf: " + std::string(flag) + " needs a value");
    const std::string value = argv[++i];
    if (flag == "-b")
      o.min_bytes = tcoll::parse_bytes(value);
    else if (flag == "-e")
      o.max_bytes = tcoll::parse_bytes(value);
    else if (flag == "-f")
      o.step_factor = std::stod(value);
    else if (flag == "-n")
      o.iters = std::stoi(value);
    else if (flag == "-w")
      o.warmup = std::stoi(value);
    else if (flag == "-c")
      o.check = value != "0";
    else if (flag == "-R")
      o.reps = std::stoi(value);
    else if (flag == "-g")
      o.nranks = std::stoi(value);
    else if (flag == "-T")
      o.timeout_s = std::stoi(value);
    else if (flag == "-t")
      o.transport = value;
    else if (flag == "--json")
      o.json = value;
    else if (flag == "--all-posted")
      o.all_posted = tcoll::parse_bytes(value);
    else if (flag == "--area-single-copy-from")
      o.area_single_copy_from = tcoll::parse_bytes(value);
    else if (flag == "-a") {
      o.algorithms.clear();
      std::size_t start = 0;
      for (;;) {
        const std::size_t comma = value.find(',', start);
        const std::string name = value.substr(start, comma - start);
        const std::vector<std::string> known = alltoall_algorithm_names();
        if (name == "all")
          o.algorithms = known;
        else if (std::find(known.begin(), known.end(), name) != known.end())
          o.algorithms.push_back(name);
        else
          throw invalid_argument("alltoall_perf: -a: unknown algorithm " + name);
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
    } else
      throw invalid_argument("alltoall_perf: unknown flag " + std::string(flag));
  }
  if (o.step_factor <= 1 || o.iters < 1 || o.reps < 1 || o.nranks < 1 || o.warmup < 0 ||
      o.min_bytes > o.max_bytes)
    throw invalid_argument("alltoall_perf: -f must exceed 1, -n, -R and -g be positive, -w "
                           "not negative, -b at most -e");
  return o;
}

/// The float rank `from` sends rank `to` at element k of their block (exact, distinct).
float sent_value(int from, int to, std::size_t k) {
  return 0.5f + static_cast<float>(from) + 0.25f * static_cast<float>(to) +
         static_cast<float>(k % 4096) / 8192.0f;
}

/// One all-to-all implementation: `call(send, recv, count, in_place)`.
template <class Ctl, class Call>
measurement measure(Ctl& ctl, const alltoall_options& o, Call call, std::size_t count,
                    bool in_place, std::vector<float>& send, std::vector<float>& recv) {
  const int P = ctl.size(), r = ctl.rank();
  const std::size_t total = count * static_cast<std::size_t>(P);
  auto fill = [&] {
    for (int q = 0; q < P; ++q)
      for (std::size_t k = 0; k < count; ++k) send[q * count + k] = sent_value(r, q, k);
    if (in_place) std::copy(send.begin(), send.begin() + total, recv.begin());
  };
  auto once = [&] { call(in_place ? recv.data() : send.data(), recv.data(), count); };
  fill();
  for (int i = 0; i < o.warmup; ++i) once();
  std::vector<double> times;
  for (int rep = 0; rep < o.reps; ++rep) {
    if (in_place) fill(); // each call permutes the buffer: start every repetition alike
    double v = 0;
    allreduce(ctl, &v, &v, 1, max_op{}, recursive_doubling{}); // barrier
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < o.iters; ++i) once();
    v = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
            .count() /
        o.iters;
    allreduce(ctl, &v, &v, 1, max_op{}, recursive_doubling{});
    times.push_back(v);
  }
  std::sort(times.begin(), times.end());
  const std::size_t m = times.size();
  measurement out;
  out.time_us = m % 2 ? times[m / 2] : (times[m / 2 - 1] + times[m / 2]) / 2;
  const double bytes = static_cast<double>(total * sizeof(float));
  out.algbw_gbs = out.time_us > 0 ? bytes / (out.time_us * 1e-6) / 1e9 : 0;
  out.busbw_gbs = P > 1 ? out.algbw_gbs * (P - 1) / P : 0;
  if (o.check) {
    fill();
    if (!in_place) std::fill(recv.begin(), recv.begin() + total, -1.0f);
    once();
    long long wrong = 0;
    for (int q = 0; q < P; ++q)
      for (std::size_t k = 0; k < count; ++k) {
        const float want = sent_value(q, r, k), got = recv[q * count + k];
        wrong += std::memcmp(&want, &got, sizeof got) != 0;
      }
    allreduce(ctl, &wrong, &wrong, 1, sum_op{}, recursive_doubling{});
    out.wrong = wrong;
  }
  return out;
}

/// Every size and algorithm on `t`, interleaved per size; rank 0 collects rows. `world`
/// (MPI_COMM_WORLD over the same processes) runs passthrough when given.
template <class Tr>
void run_all(Tr& t, const alltoall_options& o, const std::string& transport, std::vector<row>& rows,
             [[maybe_unused]] void* world) {
  const int P = t.size();
  std::vector<std::size_t> counts;
  for (double b = static_cast<double>(o.min_bytes); b <= o.max_bytes * 1.0000001;
       b *= o.step_factor) {
    const std::size_t c = std::max<std::size_t>(1, static_cast<std::size_t>(b) / sizeof(float) /
                                                       static_cast<std::size_t>(P));
    if (counts.empty() || c != counts.back()) counts.push_back(c);
  }
  const std::size_t largest = counts.empty() ? 0 : counts.back() * static_cast<std::size_t>(P);
  std::vector<float> send(largest), recv(largest);
  for (std::size_t count : counts)
    for (const auto& a : o.algorithms) {
      row rw{a, transport, "float", "none", P, count * P * sizeof(float), count * P, {}, {}};
      auto measure_with = [&](const auto& algo) {
        auto call = [&](const float* s, float* r, std::size_t c) { alltoall(t, s, r, c, algo); };
        rw.out_of_place = measure(t, o, call, count, false, send, recv);
        rw.in_place = measure(t, o, call, count, true, send, recv);
      };
      const pairwise_exchange exchange{.all_posted_max_bytes = o.all_posted};
      const in_segment area{.alltoall_single_copy_from_bytes = o.area_single_copy_from};
      if (a == "automatic") {
        alltoall_by_size automatic;
        automatic.exchange = exchange;
        automatic.in_segment_knobs = area;
        measure_with(automatic);
      } else if (a != "passthrough") { // the table's algorithms, by the library's one dispatch
        visit_algorithm<collective::alltoall>(parse_algorithm(a, collective::alltoall),
                                              measure_with, exchange, area);
      } else {
#ifdef TCOLL_HAVE_MPI
        if (!world) continue;
        rw.transport = "mpi";
        const MPI_Comm comm = *static_cast<MPI_Comm*>(world);
        auto call = [&](const float* s, float* r, std::size_t c) {
          const int n = static_cast<int>(c);
          if (s == r)
            MPI_Alltoall(MPI_IN_PLACE, n, MPI_FLOAT, r, n, MPI_FLOAT, comm);
          else
            MPI_Alltoall(s, n, MPI_FLOAT, r, n, MPI_FLOAT, comm);
        };
        rw.out_of_place = measure(t, o, call, count, false, send, recv);
        rw.in_place = measure(t, o, call, count, true, send, recv);
#else
        continue;
#endif
      }
      if (t.rank() == 0) rows.push_back(rw);
    }
}

int report(const alltoall_options& o, const std::vector<row>& rows) {
  print_report(stdout, rows, "MPI_Alltoall");
  std::printf("# sizes: one rank's whole send buffer\n");
  std::fflush(stdout);
  if (!o.json.empty() && !write_json(o.json, rows, o.iters, o.reps)) {
    std::fprintf(stderr, "alltoall_perf: cannot write --json file '%s'\n", o.json.c_str());
    return 1;
  }
  long long wrong = 0;
  for (const auto& r : rows)
    wrong += std::max(0LL, r.out_of_place.wrong) + std::max(0LL, r.in_place.wrong);
  return wrong == 0 ? 0 : 3;
}

void header(const alltoall_options& o, const std::string& transport, int P) {
  std::printf("# tcoll alltoall_perf: transport %s nranks %d minBytes %zu maxBytes %zu step: "
              "%g(factor) warmup iters: %d iters: %d reps: %d validation: %d\n",
              transport.c_str(), P, o.min_bytes, o.max_bytes, o.step_factor, o.warmup, o.iters,
              o.reps, o.check ? 1 : 0);
  std::fflush(stdout);
}

} // namespace

int main(int argc, char** argv) {
  alltoall_options o;
  try {
    o = parse(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  std::string transport = o.transport;
  if (transport == "auto") {
    transport = "threads";
    for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
      if (std::getenv(v)) transport = "mpi";
  }
  try {
    if (transport == "threads") {
      std::erase(o.algorithms, "passthrough");
      if (o.algorithms.empty()) throw invalid_argument("alltoall_perf: nothing to run on threads");
      header(o, transport, o.nranks);
      std::vector<row> rows;
      thread_team team(o.nranks, thread_options{.timeout = std::chrono::seconds(o.timeout_s)});
      team.run([&](thread_transport& t) { run_all(t, o, transport, rows, nullptr); });
      return report(o, rows);
    }
    if (transport != "mpi" && transport != "shm")
      throw invalid_argument("alltoall_perf: -t " + transport + ": threads, mpi or shm");
#ifdef TCOLL_HAVE_MPI
    MPI_Init(&argc, &argv);
    int status = 0;
    {
      MPI_Comm world = MPI_COMM_WORLD;
      mpi_transport t(world, mpi_options{.timeout = std::chrono::seconds(o.timeout_s)});
      if (t.rank() == 0) header(o, transport, t.size());
      std::vector<row> rows;
      try {
        if (transport == "shm") {
          shm_transport s(world, shm_options{.timeout = std::chrono::seconds(o.timeout_s)});
          run_all(s, o, transport, rows, &world);
        } else {
          run_all(t, o, transport, rows, &world);
        }
      } catch (const std::exception& e) {
        std::fprintf(stderr, "alltoall_perf [rank %d]: %s\n", t.rank(), e.what());
        MPI_Abort(world, 1);
      }
      if (t.rank() == 0) status = report(o, rows);
      MPI_Bcast(&status, 1, MPI_INT, 0, world);
    }
    MPI_Finalize();
    return status;
#else
    throw invalid_argument("alltoall_perf: -t " + transport + ": this build has no MPI");
#endif
  } catch (const tcoll::invalid_argument& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "alltoall_perf: %s\n", e.what());
    return 1;
  }
}
