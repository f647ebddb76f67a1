#pragma once
/// \file
/// Output of bench/allreduce_perf: nccl-tests style tables (one per algorithm, out-of-place
/// then in-place columns), a side-by-side busbw summary when several algorithms ran, and
/// the `--json` records (flat objects, read by tcoll::plan::read_bench_records), and the
/// same results in nccl-tests' own JSON layout (`-J`), so scripts written for nccl-tests
/// read tcoll's.
#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <ctime>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace tcoll::bench {

/// One measurement: an algorithm at one size, one placement.
struct measurement {
  double time_us = 0; ///< median over reps of the per-iteration time (max over ranks)
  double algbw_gbs = 0;
  double busbw_gbs = 0;
  long long wrong =
      -1; ///< elements differing from the expectation, summed over ranks; -1: not checked
};

/// One table row: out-of-place and in-place at one size.
struct row {
  std::string algorithm, transport, dtype, op;
  int ranks = 0;
  std::size_t bytes = 0, count = 0;
  measurement out_of_place, in_place;
};

/// busbw factor of allreduce: each rank sends and receives 2(n-1)/n of the data.
inline double bus_factor(int nranks) {
  return nranks > 1 ? 2.0 * (nranks - 1) / nranks : 0.0;
}

inline measurement make_measurement(double time_us, std::size_t bytes, int nranks,
                                    long long wrong) {
  measurement m;
  m.time_us = time_us;
  m.algbw_gbs = time_us > 0 ? static_cast<double>(bytes) / (time_us * 1e-6) / 1e9 : 0.0;
  m.busbw_gbs = m.algbw_gbs * bus_factor(nranks);
  m.wrong = wrong;
  return m;
}

inline void print_table_header(std::FILE* f) {
  std::fprintf(f, "#%79s%33s\n", "out-of-place", "in-place");
  std::fprintf(f, "#%11s %12s %8s %6s %6s %9s %7s %7s %6s %9s %7s %7s %6s\n", "size", "count",
               "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw",
               "busbw", "#wrong");
  std::fprintf(f, "#%11s %12s %8s %6s %6s %9s %7s %7s %6s %9s %7s %7s %6s\n", "(B)", "(elements)",
               "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
}

inline std::string wrong_text(long long w) {
  return w < 0 ? "N/A" : std::to_string(w);
}

inline void print_row(std::FILE* f, const row& r) {
  auto part = [&](const measurement& m) {
    std::fprintf(f, " %9.2f %7.2f %7.2f %6s", m.time_us, m.algbw_gbs, m.busbw_gbs,
                 wrong_text(m.wrong).c_str());
  };
  std::fprintf(f, " %11zu %12zu %8s %6s %6d", r.bytes, r.count, r.dtype.c_str(), r.op.c_str(), -1);
  part(r.out_of_place);
  part(r.in_place);
  std::fprintf(f, "\n");
}

/// The names of `rows` in the text report: the algorithm, followed by the transport in
/// parentheses where the run has that algorithm on several transports (-t node:
/// `hierarchical/ring (shm+mpi)` and `hierarchical/ring (mpi+mpi)`).
inline std::vector<std::string> row_labels(const std::vector<row>& rows) {
  std::map<std::string, std::string> transport_of; // algorithm -> its transport, "" if several
  for (const auto& r : rows) {
    const auto [it, fresh] = transport_of.emplace(r.algorithm, r.transport);
    if (!fresh && it->second != r.transport) it->second.clear();
  }
  std::vector<std::string> labels;
  for (const auto& r : rows)
    labels.push_back(transport_of[r.algorithm].empty() ? r.algorithm + " (" + r.transport + ")"
                                                       : r.algorithm);
  return labels;
}

/// Prints every algorithm's table in first-seen order, then the summary lines nccl-tests
/// prints (out-of-bounds values, average bus bandwidth) and, for several algorithms, a
/// busbw comparison per size (out-of-place) with the best tcoll algorithm against
/// passthrough (`baseline`: MPI_Allreduce in allreduce_perf) where it ran.
inline void print_report(std::FILE* f, const std::vector<row>& rows,
                         const std::string& baseline = "MPI_Allreduce") {
  const std::vector<std::string> labels = row_labels(rows);
  std::vector<std::string> algos;
  for (const auto& l : labels)
    if (std::find(algos.begin(), algos.end(), l) == algos.end()) algos.push_back(l);
  long long wrong_total = 0;
  for (const auto& a : algos) {
    std::fprintf(f, "#\n# algorithm: %s\n", a.c_str());
    print_table_header(f);
    double bw_sum = 0;
    int bw_n = 0;
    for (std::size_t i = 0; i < rows.size(); ++i)
      if (labels[i] == a) {
        const row& r = rows[i];
        print_row(f, r);
        for (const auto* m : {&r.out_of_place, &r.in_place}) {
          wrong_total += std::max(0LL, m->wrong);
          bw_sum += m->busbw_gbs;
          ++bw_n;
        }
      }
    std::fprintf(f, "# Avg bus bandwidth    : %g  (%s)\n", bw_n ? bw_sum / bw_n : 0.0, a.c_str());
  }
  std::fprintf(f, "#\n# Out of bounds values : %lld %s\n", wrong_total,
               wrong_total == 0 ? "OK" : "FAILED");
  if (algos.size() < 2) return;
  // busbw side by side, keyed by (dtype, op, bytes); a column is as wide as its name
  auto width = [](const std::string& a) { return std::max(12, static_cast<int>(a.size())); };
  std::fprintf(f, "#\n# busbw (GB/s, out-of-place) side by side%s\n",
               std::find(algos.begin(), algos.end(), "passthrough") != algos.end()
                   ? ("; best/MPI = best tcoll algorithm / passthrough (" + baseline + ")").c_str()
                   : "");
  std::fprintf(f, "#%11s %8s %6s", "size", "type", "redop");
  for (const auto& a : algos) std::fprintf(f, " %*s", width(a), a.c_str());
  const bool have_pt = std::find(algos.begin(), algos.end(), "passthrough") != algos.end();
  if (have_pt) std::fprintf(f, " %8s", "best/MPI");
  std::fprintf(f, "\n");
  std::map<std::tuple<std::string, std::string, std::size_t>, std::map<std::string, double>> table;
  std::vector<std::tuple<std::string, std::string, std::size_t>> order;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const row& r = rows[i];
    auto key = std::make_tuple(r.dtype, r.op, r.bytes);
    if (!table.count(key)) order.push_back(key);
    table[key][labels[i]] = r.out_of_place.busbw_gbs;
  }
  for (const auto& key : order) {
    const auto& m = table[key];
    std::fprintf(f, " %11zu %8s %6s", std::get<2>(key), std::get<0>(key).c_str(),
                 std::get<1>(key).c_str());
    double best = 0;
    for (const auto& a : algos) {
      const auto it = m.find(a);
      if (it == m.end())
        std::fprintf(f, " %*s", width(a), "-");
      else
        std::fprintf(f, " %*.2f", width(a), it->second);
      if (it != m.end() && a != "passthrough") best = std::max(best, it->second);
    }
    if (have_pt) {
      const auto pt = m.find("passthrough");
      if (pt != m.end() && pt->second > 0)
        std::fprintf(f, " %8.2f", best / pt->second);
      else
        std::fprintf(f, " %8s", "-");
    }
    std::fprintf(f, "\n");
  }
}

inline std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\')
      out += '\\', out += c;
    else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else
      out += c;
  }
  return out;
}

/// Writes the rows as a JSON array, one flat object per (row, placement); `wrong` is null
/// when the check was off. Returns false if the file cannot be written.
inline bool write_json(const std::string& path, const std::vector<row>& rows, int iters, int reps) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return false;
  std::fprintf(f, "[");
  bool first = true;
  for (const auto& r : rows)
    for (int inplace = 0; inplace < 2; ++inplace) {
      const measurement& m = inplace ? r.in_place : r.out_of_place;
      std::fprintf(f,
                   "%s\n {\"algorithm\": \"%s\", \"transport\": \"%s\", \"ranks\": %d, "
                   "\"dtype\": \"%s\", \"op\": \"%s\", \"bytes\": %zu, \"count\": %zu, "
                   "\"inplace\": %s, \"time_us\": %.4f, \"algbw_gbs\": %.6f, \"busbw_gbs\": %.6f, "
                   "\"wrong\": %s, \"iters\": %d, \"reps\": %d}",
                   first ? "" : ",", json_escape(r.algorithm).c_str(),
                   json_escape(r.transport).c_str(), r.ranks, json_escape(r.dtype).c_str(),
                   json_escape(r.op).c_str(), r.bytes, r.count, inplace ? "true" : "false",
                   m.time_us, m.algbw_gbs, m.busbw_gbs,
                   m.wrong < 0 ? "null" : std::to_string(m.wrong).c_str(), iters, reps);
      first = false;
    }
  std::fprintf(f, "\n]\n");
  return std::fclose(f) == 0;
}

/// One rank's line of the device report (nccl-tests' "devices" list).
struct rank_info {
  int rank = 0;
  int pid = 0;
  std::string hostname;
};

/// What the `-J` file says about the run besides the rows.
struct nccl_json_context {
  std::vector<std::string> args; ///< the command line
  std::vector<std::string> env;  ///< the environment entries worth recording
  std::string transport;         ///< threads | mpi | shm
  std::size_t min_bytes = 0, max_bytes = 0;
  double step_factor = 2;
  int warmup = 0, iters = 0, reps = 1;
  bool check = true;
  std::vector<rank_info> ranks;
  std::string start_time;
};

/// Local time as nccl-tests writes it ("%Y-%m-%d %H:%M:%S").
inline std::string now_string() {
  char text[64] = {};
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S", &local);
  return text;
}

/// Writes the rows in nccl-tests' JSON output format, version 3 (`all_reduce_perf -J`):
/// one object with "version", "start_time", "args", "env", "config" (with "devices", one per
/// rank), "results" (one record per size: size, count, type, redop, root, out_of_place and
/// in_place with time (us), alg_bw and bus_bw (GB/s) and nwrong, actual_iterations,
/// experiment_name), "out_of_bounds", "average_bus_bandwidth", "errors" and "end_time".
/// Like nccl-tests it writes booleans as the strings "true"/"false" and the root as a
/// 6-wide string. tcoll's additions: the record's experiment_name is the algorithm (several
/// algorithms share one file; named as in the text report, `row_labels`), "nccl_version" is
/// 0 and "library" says tcoll. The "device" of a rank is -1 (host memory). Returns false if
/// the file cannot be written.
inline bool write_nccl_json(const std::string& path, const std::vector<row>& rows,
                            const nccl_json_context& c) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return false;
  auto str = [](const std::string& v) { return "\"" + json_escape(v) + "\""; };
  auto list = [&](const std::vector<std::string>& v) {
    std::string out = "[";
    for (std::size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + str(v[i]);
    return out + "]";
  };
  auto boolean = [](bool v) { return v ? "\"true\"" : "\"false\""; };
  std::fprintf(f, "{\n  \"version\": 3,\n  \"start_time\": %s,\n  \"args\": %s,\n  \"env\": %s,\n",
               str(c.start_time).c_str(), list(c.args).c_str(), list(c.env).c_str());
  std::fprintf(f, "  \"nccl_version\": 0,\n  \"library\": \"tcoll\",\n  \"transport\": %s,\n",
               str(c.transport).c_str());
  std::fprintf(
      f,
      "  \"config\": {\"nthreads\": 1, \"ngpus\": 1, \"minimum_bytes\": %zu, "
      "\"maximum_bytes\": %zu, \"step_factor\": %g, \"warmup_iters\": %d, "
      "\"iterations\": %d, \"aggregated_iterations\": 1, \"repetitions\": %d, "
      "\"validation\": %d, \"graph\": 0, \"blocking_collectives\": %s,\n    \"devices\": [",
      c.min_bytes, c.max_bytes, c.step_factor, c.warmup, c.iters, c.reps, c.check ? 1 : 0,
      boolean(false));
  for (std::size_t i = 0; i < c.ranks.size(); ++i)
    std::fprintf(f,
                 "%s\n      {\"rank\": %d, \"group\": 0, \"pid\": %d, \"hostname\": %s, "
                 "\"device\": -1, \"device_hex\": \"\", \"device_info\": %s}",
                 i ? "," : "", c.ranks[i].rank, c.ranks[i].pid, str(c.ranks[i].hostname).c_str(),
                 str("host memory, tcoll " + c.transport + " transport").c_str());
  std::fprintf(f, "]},\n  \"results\": [");
  long long wrong_total = 0;
  double busbw_sum = 0;
  std::size_t measured = 0;
  auto body = [&](const measurement& m) {
    char text[256];
    const std::string nwrong = m.wrong < 0 ? "null" : std::to_string(m.wrong);
    std::snprintf(text, sizeof text,
                  "{\"time\": %lf, \"alg_bw\": %lf, \"bus_bw\": %lf, \"nwrong\": %s}", m.time_us,
                  m.algbw_gbs, m.busbw_gbs, nwrong.c_str());
    wrong_total += std::max(0LL, m.wrong);
    busbw_sum += m.busbw_gbs;
    ++measured;
    return std::string(text);
  };
  const std::vector<std::string> labels = row_labels(rows);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const row& r = rows[i];
    std::fprintf(f,
                 "%s\n    {\"size\": %zu, \"count\": %zu, \"type\": %s, \"redop\": %s, "
                 "\"root\": \"%6d\", \"out_of_place\": %s, \"in_place\": %s, "
                 "\"actual_iterations\": %d, \"experiment_name\": %s}",
                 i ? "," : "", r.bytes, r.count, str(r.dtype).c_str(), str(r.op).c_str(), -1,
                 body(r.out_of_place).c_str(), body(r.in_place).c_str(), c.iters,
                 str(labels[i]).c_str());
  }
  std::fprintf(f,
               "\n  ],\n  \"out_of_bounds\": {\"count\": %lld, \"okay\": %s},\n"
               "  \"average_bus_bandwidth\": {\"bandwidth\": %lf, \"okay\": \"unchecked\"},\n"
               "  \"errors\": [],\n  \"end_time\": %s\n}\n",
               wrong_total, boolean(wrong_total == 0),
               measured ? busbw_sum / static_cast<double>(measured) : 0.0,
               str(now_string()).c_str());
  return std::fclose(f) == 0;
}

} // namespace tcoll::bench
