#pragma once
/// \file
/// Command line of bench/allreduce_perf: nccl-tests `all_reduce_perf` flags plus tcoll's
/// algorithm, transport, repetition and JSON options. Parsing errors throw
/// `tcoll::invalid_argument` naming the flag.
#include <cctype>
#include <cstddef>
#include <cstdlib>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include <tcoll/algorithm/select.hpp>
#include <tcoll/core/error.hpp>

namespace tcoll::bench {

/// Every algorithm name `-a` accepts on a single transport, in the order `-a all` runs
/// them: the table's allreduce algorithms (algorithm/table.hpp) but `hierarchical`,
/// then `automatic`.
inline const std::vector<std::string>& all_algorithms() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (algorithm_id a : algorithms_of(collective::allreduce))
      if (a != algorithm_id::hierarchical) n.emplace_back(to_string(a));
    n.emplace_back(automatic::name);
    return n;
  }();
  return names;
}
/// `-a` names that exist only with `-t node`: `hierarchical` (two-level, see
/// `perf_options::intra` and `perf_options::inter`).
inline const std::vector<std::string>& node_algorithms() {
  static const std::vector<std::string> names{std::string(to_string(algorithm_id::hierarchical))};
  return names;
}
/// What `--intra` accepts: the transport inside a node of `hierarchical` under `-t node`.
/// The algorithms `-t node` runs across nodes (`--inter`; see `with_inter_algorithm`).
inline const std::vector<std::string>& inter_algorithms() {
  static const std::vector<std::string> names{"ring", "recursive_doubling",
                                              "recursive_halving_doubling"};
  return names;
}
inline const std::vector<std::string>& all_intra_transports() {
  static const std::vector<std::string> names{"shm", "mpi"};
  return names;
}
inline const std::vector<std::string>& all_dtypes() {
  static const std::vector<std::string> names{"float", "double", "half",  "bfloat16",
                                              "int8",  "uint8",  "int32", "int64"};
  return names;
}
inline const std::vector<std::string>& all_ops() {
  static const std::vector<std::string> names{"sum", "prod", "min", "max", "avg"};
  return names;
}

/// What one run of allreduce_perf measures.
struct perf_options {
  std::size_t min_bytes = 8;                              ///< -b
  std::size_t max_bytes = std::size_t{32} << 20;          ///< -e
  double step_factor = 2;                                 ///< -f (multiply the size by this)
  int iters = 20;                                         ///< -n timed iterations per measurement
  int warmup = 5;                                         ///< -w untimed iterations first
  bool check = true;                                      ///< -c bit-exact result check
  std::vector<std::string> ops{"sum"};                    ///< -o (comma list or all)
  std::vector<std::string> dtypes{"float"};               ///< -d (comma list or all)
  std::vector<std::string> algorithms = all_algorithms(); ///< -a (comma list or all)
  std::string transport = "auto";                         ///< -t threads | mpi | shm | node | auto
  int nranks = 2;                                         ///< -g ranks of the threads transport
  int reps = 1;                  ///< -R repeat the measurement, report median
  std::string json;              ///< --json FILE
  std::string nccl_json;         ///< -J FILE (nccl-tests' JSON layout)
  std::size_t segment_bytes = 0; ///< -s ring max_segment_bytes (0: default)
  int timeout_s = 120;           ///< -T transport timeout in seconds
  bool registered = false;       ///< --registered: buffers from shm_transport::allocate
  long eager_bytes = -1;         ///< --eager: thread_options::eager_bytes (-1: its default)
  /// --ranks-per-node (-t node): `node_hierarchy_options::ranks_per_node` (0: the ranks that
  /// share memory form a node; n: blocks of n consecutive ranks play one node each)
  int ranks_per_node = 0;
  /// --intra (-t node): transports inside a node of `hierarchical`: shm is
  /// `hierarchical<shm_transport, mpi_transport>` (`mpi_node_hierarchy`), mpi is
  /// `hierarchical<mpi_transport, mpi_transport>`
  std::vector<std::string> intra{"shm"};
  /// --inter (-t node): algorithms across nodes of `hierarchical` (`hierarchical_options::inter`)
  std::vector<std::string> inter{"ring"};
  bool help = false;
};

inline std::string usage() {
  return "usage: allreduce_perf [options]\n"
         "  -b minbytes   smallest message (K/M/G suffixes; default 8)\n"
         "  -e maxbytes   largest message (default 32M)\n"
         "  -f factor     size multiplier between steps (default 2)\n"
         "  -n iters      timed iterations per measurement (default 20)\n"
         "  -w iters      warm-up iterations (default 5)\n"
         "  -c 0|1        bit-exact check of the results (default 1)\n"
         "  -o op         sum|prod|min|max|avg, comma list or all (default sum)\n"
         "  -d dtype      float|double|half|bfloat16|int8|uint8|int32|int64, list or all\n"
         "  -a algo       ring|recursive_doubling|recursive_halving_doubling|binomial_tree|\n"
         "                multi_ring|automatic|passthrough, comma list or all (default all)\n"
         "                -t node also: hierarchical (two-level, see --intra, --inter; part\n"
         "                of all and the default there)\n"
         "  -t transport  threads|mpi|shm|node|auto (auto: mpi under mpirun, else threads;\n"
         "                shm: processes of one node through shared memory, under mpirun,\n"
         "                passthrough = MPI_Allreduce on the same processes; node: under\n"
         "                mpirun, hierarchical on the nodes of --ranks-per-node and the flat\n"
         "                algorithms on MPI, passthrough = MPI_Allreduce, in one job)\n"
         "  -g nranks     ranks of the threads transport (default 2)\n"
         "  -R reps       repeat each measurement, report the median (default 1)\n"
         "  -s bytes      ring (and multi_ring) segment size (default: ring{}'s)\n"
         "  -T seconds    transport timeout (default 120)\n"
         "  --json FILE   write one record per measurement (JSON array)\n"
         "  -J FILE       write the results in nccl-tests' JSON format (version 3)\n"
         "  --registered 0|1  shm only: send and receive buffers are registered (made by\n"
         "                shm_transport::allocate in the node's shared memory; default 0)\n"
         "  --eager bytes threads only: messages up to this size go through the eager lanes\n"
         "                (thread_options::eager_bytes; 0 sends all zero copy; default 1024)\n"
         "  --ranks-per-node n  node only: blocks of n consecutive ranks play one node each\n"
         "                (0: the ranks that share memory; default 0)\n"
         "  --intra list  node only: transport inside a node for hierarchical: shm (shared\n"
         "                memory, mpi_node_hierarchy) and/or mpi (default shm)\n"
         "  --inter list  node only: algorithms across nodes for hierarchical: ring,\n"
         "                recursive_doubling, recursive_halving_doubling (default ring)\n";
}

namespace detail {

/// "64", "8K", "256M", "1G" (binary multiples, as nccl-tests); the error names the flag.
inline std::size_t parse_bytes(std::string_view flag, std::string_view s) {
  try {
    return tcoll::parse_bytes(s);
  } catch (const invalid_argument& e) {
    throw invalid_argument("allreduce_perf: " + std::string(flag) + ": " + e.what());
  }
}

inline long parse_int(std::string_view flag, std::string_view s, long lo, long hi) {
  char* end = nullptr;
  const std::string str(s);
  const long v = std::strtol(str.c_str(), &end, 10);
  if (str.empty() || *end != '\0' || v < lo || v > hi)
    throw invalid_argument("allreduce_perf: " + std::string(flag) + " '" + str +
                           "' must be an integer in [" + std::to_string(lo) + ", " +
                           std::to_string(hi) + "]");
  return v;
}

/// Comma list checked against `known`; "all" expands to all of them.
inline std::vector<std::string> parse_list(std::string_view flag, std::string_view s,
                                           const std::vector<std::string>& known) {
  if (s == "all") return known;
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos <= s.size()) {
    const std::size_t end = std::min(s.find(',', pos), s.size());
    std::string item(s.substr(pos, end - pos));
    pos = end + 1;
    if (item.empty()) continue;
    // common aliases of the nccl-tests / PyTorch spellings
    if (item == "float32" || item == "fp32" || item == "f32") item = "float";
    if (item == "float64" || item == "fp64" || item == "f64") item = "double";
    if (item == "float16" || item == "fp16" || item == "f16") item = "half";
    if (item == "bf16") item = "bfloat16";
    bool found = false;
    for (const auto& k : known) found = found || k == item;
    if (!found) {
      std::string names;
      for (const auto& k : known) names += (names.empty() ? "" : ", ") + k;
      throw invalid_argument("allreduce_perf: " + std::string(flag) + " '" + item +
                             "' is not one of " + names + " (or all)");
    }
    out.push_back(item);
  }
  if (out.empty()) throw invalid_argument("allreduce_perf: " + std::string(flag) + " is empty");
  return out;
}

} // namespace detail

/// Parses argv (argv[0] is the program). Throws `invalid_argument` naming the flag.
inline perf_options parse_options(int argc, const char* const* argv) {
  perf_options o;
  bool algorithms_given = false;
  std::string node_flag; // the last flag that only -t node takes
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (flag == "-h" || flag == "--help") {
      o.help = true;
      continue;
    }
    if (i + 1 >= argc)
      throw invalid_argument("allreduce_perf: " + std::string(flag) + " needs a value\n" + usage());
    const std::string_view v = argv[++i];
    if (flag == "-b")
      o.min_bytes = detail::parse_bytes(flag, v);
    else if (flag == "-e")
      o.max_bytes = detail::parse_bytes(flag, v);
    else if (flag == "-f") {
      char* end = nullptr;
      const std::string s(v);
      o.step_factor = std::strtod(s.c_str(), &end);
      if (s.empty() || *end != '\0' || !(o.step_factor > 1.0))
        throw invalid_argument("allreduce_perf: -f '" + s + "' must be a number > 1");
    } else if (flag == "-n")
      o.iters = static_cast<int>(detail::parse_int(flag, v, 1, 1000000));
    else if (flag == "-w")
      o.warmup = static_cast<int>(detail::parse_int(flag, v, 0, 1000000));
    else if (flag == "-c")
      o.check = detail::parse_int(flag, v, 0, 1) == 1;
    else if (flag == "-o")
      o.ops = detail::parse_list(flag, v, all_ops());
    else if (flag == "-d")
      o.dtypes = detail::parse_list(flag, v, all_dtypes());
    else if (flag == "-a") {
      auto known = all_algorithms();
      known.insert(known.end(), node_algorithms().begin(), node_algorithms().end());
      // `all` is every flat algorithm; with -t node, hierarchical joins them (below)
      o.algorithms = v == "all" ? all_algorithms() : detail::parse_list(flag, v, known);
      algorithms_given = v != "all";
    } else if (flag == "-t") {
      o.transport = std::string(v);
      if (o.transport != "threads" && o.transport != "mpi" && o.transport != "shm" &&
          o.transport != "node" && o.transport != "auto")
        throw invalid_argument("allreduce_perf: -t '" + o.transport +
                               "' is not one of threads, mpi, shm, node, auto");
    } else if (flag == "-g")
      o.nranks = static_cast<int>(detail::parse_int(flag, v, 1, 1024));
    else if (flag == "-R")
      o.reps = static_cast<int>(detail::parse_int(flag, v, 1, 1000));
    else if (flag == "-s")
      o.segment_bytes = detail::parse_bytes(flag, v);
    else if (flag == "-T")
      o.timeout_s = static_cast<int>(detail::parse_int(flag, v, 1, 86400));
    else if (flag == "--json")
      o.json = std::string(v);
    else if (flag == "-J")
      o.nccl_json = std::string(v);
    else if (flag == "--registered")
      o.registered = detail::parse_int(flag, v, 0, 1) == 1;
    else if (flag == "--eager")
      o.eager_bytes = static_cast<long>(detail::parse_bytes(flag, v));
    else if (flag == "--ranks-per-node") {
      o.ranks_per_node = static_cast<int>(detail::parse_int(flag, v, 0, 1 << 20));
      node_flag = std::string(flag);
    } else if (flag == "--intra") {
      o.intra = detail::parse_list(flag, v, all_intra_transports());
      node_flag = std::string(flag);
    } else if (flag == "--inter") {
      o.inter = detail::parse_list(flag, v, inter_algorithms());
      node_flag = std::string(flag);
    } else
      throw invalid_argument("allreduce_perf: unknown flag '" + std::string(flag) + "'\n" +
                             usage());
  }
  if (o.registered && o.transport != "shm")
    throw invalid_argument("allreduce_perf: --registered 1 needs -t shm (registered buffers "
                           "live in the shared-memory transport's segment)");
  if (o.eager_bytes >= 0 && o.transport != "threads" && o.transport != "auto")
    throw invalid_argument("allreduce_perf: --eager is a knob of the threads transport");
  const bool node = o.transport == "node";
  if (!node_flag.empty() && !node)
    throw invalid_argument("allreduce_perf: " + node_flag + " needs -t node");
  if (!node)
    for (const auto& a : o.algorithms)
      for (const auto& n : node_algorithms())
        if (a == n)
          throw invalid_argument("allreduce_perf: -a " + a +
                                 " needs -t node (two transports: inside and across nodes)");
  if (node && !algorithms_given)
    o.algorithms.insert(o.algorithms.end(), node_algorithms().begin(), node_algorithms().end());
  if (o.min_bytes > o.max_bytes)
    throw invalid_argument("allreduce_perf: -b " + std::to_string(o.min_bytes) +
                           " is larger than -e " + std::to_string(o.max_bytes));
  return o;
}

/// The message sizes of a run: min, min*f, ... up to max (each at least one element of
/// `elem_bytes`, rounded down to whole elements, duplicates dropped).
inline std::vector<std::size_t> sizes(const perf_options& o, std::size_t elem_bytes) {
  std::vector<std::size_t> out;
  for (double b = static_cast<double>(o.min_bytes);
       b <= static_cast<double>(o.max_bytes) * 1.0000001; b *= o.step_factor) {
    std::size_t bytes = static_cast<std::size_t>(b) / elem_bytes * elem_bytes;
    if (out.empty() || bytes != out.back()) out.push_back(bytes);
    if (o.min_bytes == 0 && b == 0) b = 1.0 / o.step_factor; // 0 -> 1 -> f ...
  }
  return out;
}

} // namespace tcoll::bench
