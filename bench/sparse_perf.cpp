// sparse_perf: the sparse-chunk adaptor (GradientFlow CSC, include/tcoll/sparse/) against a
// dense ring allreduce of the whole gradient pool and against the fine-grained top-k
// allgather baseline, side by side in one job, on the threads transport wrapped in
// shaped<> (an emulated 1 GbE or 10 GbE network, one node per rank) and counting<> (bytes on
// the wire per rank). Issue 9, section 3.
//
//   ./sparse_perf                                     # the full sweep (takes long; see below)
//   ./sparse_perf --pool alexnet -g 8 --network 10gbe --density 0.1 -n 5
//   ./sparse_perf --pool resnet50 --scale 0.004 --chunk 1000 -g 2,3 -n 2 --json out.json
//
// For every pool (tensor sizes from data/profiles/<pool>.csv, in backward order), rank count,
// network and density it times, per iteration and as the maximum over ranks:
//  - dense: tcoll::allreduce (ring, sum, in place) of the whole pool;
//  - csc:   one CSC iteration: mark_all_ready (Algorithm 1 residual, gather of the important
//           chunks, lazy allreduces started on the engine thread) + finish (wait, scatter,
//           chunk norms, norm allreduce, selection of the next important chunks);
//  - topk:  topk_allreduce at the same density (local top-k, ring allgather of
//           (uint32 index, float value) pairs, local accumulation), in place.
// Bytes per rank are what the counting transport saw posted (maximum over ranks); "wire" is
// that divided by the line rate: the link time alone, the ideal a cluster would approach.
//
// The local part of CSC (chunk norms, selection, gather, scatter; the residual pass of
// Algorithm 1 reported next to it) is measured for one rank alone in the main thread before
// the ranks start, and compared with the dense allreduce time of each setting ("loc/dense").
// On a 2-core machine P ranks' local work is serialized; on a cluster it runs in parallel.
//
// Setup of a CSC measurement (untimed, network shaping off): iteration 0 is dense (CSC has
// no norms yet) on chunk-structured values whose norms are distinct; iteration 1 runs sparse
// on integer-valued inputs and is checked exactly (-c 1): the important set is the top chunks
// of iteration 0's norms, important chunks hold the sum over ranks, the others the rank's own
// values, and the counted bytes equal the adaptor's closed-form report. Then the timed
// iterations run with shaping on, on whatever the pool holds (no refill). The dense
// allreduce is checked after its first iteration (every element = the closed-form sum), top-k
// after its first (bitwise identical output on all ranks, sum of the output = sum of every
// rank's independently computed top-k values, bytes = (P-1) k 8). Exit code 3 on any wrong
// value.
//
// Memory: each rank holds its pool (4n bytes); CSC adds a residual (4n) and the touched part
// of its send buffer (4n x density; dense iterations are reduced in place, see
// in_place_min_bytes); top-k adds 4n of indices and 8k (P+1) of pairs. A measurement whose
// estimate over all ranks exceeds --mem-gib is skipped and printed as such.
#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <string_view>
#include <unistd.h>
#include <variant>
#include <vector>

#include <tcoll/collectives.hpp>
#include <tcoll/compress/adaptor_options.hpp>
#include <tcoll/core/error.hpp>
#include <tcoll/plan/profile.hpp>
#include <tcoll/schedule/gradient_pool.hpp>
#include <tcoll/sparse.hpp>
#include <tcoll/transport/counting.hpp>
#include <tcoll/transport/shaped.hpp>
#include <tcoll/transport/threads.hpp>

#include "common/perf_report.hpp"

#ifndef TCOLL_PROFILE_DIR
#define TCOLL_PROFILE_DIR "data/profiles"
#endif

namespace {

using namespace tcoll;
using namespace tcoll::sparse;
using seconds_d = std::chrono::duration<double>;

// ---------------------------------------------------------------------------------------------
// Networks. 10 GbE: alpha of MG-WFBP's measurement (bench/plan/fusion_grid.hpp); 1 GbE: a
// typical TCP latency of 50 us. One node per rank (group_size 1): every message is charged.

struct network_spec {
  std::string name;
  double gbit = 0;
  double alpha_us = 0;
};

network_spec network_of(const std::string& name) {
  if (name == "1gbe") return {name, 1.0, 50.0};
  if (name == "10gbe") return {name, 10.0, 45.26};
  if (name == "none") return {name, 0.0, 0.0};
  throw invalid_argument("sparse_perf: --network '" + name + "' is not one of 1gbe, 10gbe, none");
}

// ---------------------------------------------------------------------------------------------
// Options

/// The compression registry's schemes this benchmark measures (-m).
constexpr tcoll::compression_scheme measured_schemes[] = {tcoll::compression_scheme::dense,
                                                          tcoll::compression_scheme::csc,
                                                          tcoll::compression_scheme::topk};

struct options {
  std::vector<std::string> pools{"alexnet", "resnet50", "vgg16"}; ///< --pool
  std::vector<int> ranks{2, 4, 8, 16};                            ///< -g
  std::vector<std::string> networks{"1gbe", "10gbe"};             ///< --network
  std::vector<double> densities{0.01, 0.1, 0.15, 1.0};            ///< --density
  std::vector<std::string> methods{"dense", "csc", "topk"};       ///< -m
  int iters = 5;             ///< -n timed iterations per measurement (median reported)
  int warmup = 0;            ///< -w untimed shaped iterations before them (dense, topk, csc)
  double budget_s = 0;       ///< --budget-s: stop a measurement once its timed total exceeds this
  double mem_gib = 10;       ///< --mem-gib: skip measurements estimated above this (all ranks)
  bool check = true;         ///< -c
  bool local = true;         ///< --local: measure the one-rank local part
  double scale = 1.0;        ///< --scale: multiply every tensor size (smoke tests)
  std::size_t chunk = 32000; ///< --chunk elements per chunk
  std::size_t threshold = std::size_t{4} << 20; ///< --threshold lazy-allreduce bytes
  std::string json;                             ///< --json FILE
  std::string profile_dir = TCOLL_PROFILE_DIR;  ///< --profiles DIR
  int timeout_s = 900;                          ///< -T transport timeout
  bool help = false;
};

/// CSC's options at density `d` from the registry's knobs (--chunk, --threshold), every
/// iteration at `d` (no warm-up).
csc_options csc_options_at(const options& o, double d) {
  tcoll::compression_options k = tcoll::default_compression_options(tcoll::compression_scheme::csc);
  k.chunk_elements = o.chunk;
  k.threshold_bytes = o.threshold;
  k.density = d;
  k.warmup_iterations = 0;
  return tcoll::to_csc_options(k);
}

std::string usage() {
  return "usage: sparse_perf [options]\n"
         "  --pool LIST      profiles (data/profiles/<name>.csv) whose tensors form the pool\n"
         "                   (default alexnet,resnet50,vgg16)\n"
         "  -g LIST          rank counts (default 2,4,8,16)\n"
         "  --network LIST   1gbe|10gbe|none (default 1gbe,10gbe)\n"
         "  --density LIST   fractions of chunks (CSC) / elements (top-k) kept\n"
         "                   (default 0.01,0.1,0.15,1; top-k skips 1)\n"
         "  -m LIST          dense,csc,topk: schemes of the compression registry (default all)\n"
         "  -n iters         timed iterations per measurement, median reported (default 5)\n"
         "  -w iters         untimed shaped iterations first (default 0)\n"
         "  --budget-s S     stop timing a measurement once its iterations took more than S\n"
         "                   seconds in all (at least one iteration; default 0: off)\n"
         "  --mem-gib G      skip measurements whose memory estimate (all ranks) exceeds G\n"
         "                   GiB (default 10)\n"
         "  -c 0|1           check results (default 1)\n"
         "  --local 0|1      measure CSC's local part for one rank alone (default 1)\n"
         "  --scale F        multiply every tensor size by F (at least 1 element; default 1)\n"
         "  --chunk N        CSC chunk elements (default 32000)\n"
         "  --threshold B    CSC lazy-allreduce threshold bytes (default 4M)\n"
         "  --profiles DIR   profile directory (default the source tree's data/profiles)\n"
         "  -T seconds       transport timeout (default 900)\n"
         "  --json FILE      one record per measurement (JSON array)\n";
}

std::vector<std::string> split(std::string_view s) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos <= s.size()) {
    const std::size_t end = std::min(s.find(',', pos), s.size());
    if (end > pos) out.emplace_back(s.substr(pos, end - pos));
    pos = end + 1;
  }
  return out;
}

double parse_double(std::string_view flag, const std::string& s, double lo, double hi) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || !(v >= lo && v <= hi))
    throw invalid_argument("sparse_perf: " + std::string(flag) + " '" + s +
                           "' must be a number in [" + std::to_string(lo) + ", " +
                           std::to_string(hi) + "]");
  return v;
}

long parse_long(std::string_view flag, const std::string& s, long lo, long hi) {
  char* end = nullptr;
  const long v = std::strtol(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || v < lo || v > hi)
    throw invalid_argument("sparse_perf: " + std::string(flag) + " '" + s +
                           "' must be an integer in [" + std::to_string(lo) + ", " +
                           std::to_string(hi) + "]");
  return v;
}

options parse_options(int argc, const char* const* argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view f = argv[i];
    if (f == "-h" || f == "--help") {
      o.help = true;
      continue;
    }
    if (i + 1 >= argc)
      throw invalid_argument("sparse_perf: " + std::string(f) + " needs a value\n" + usage());
    const std::string v = argv[++i];
    auto nonempty = [&](std::vector<std::string> l) {
      if (l.empty()) throw invalid_argument("sparse_perf: " + std::string(f) + " is empty");
      return l;
    };
    if (f == "--pool")
      o.pools = nonempty(split(v));
    else if (f == "-g") {
      o.ranks.clear();
      for (const auto& s : nonempty(split(v)))
        o.ranks.push_back(static_cast<int>(parse_long(f, s, 1, 256)));
    } else if (f == "--network") {
      o.networks = nonempty(split(v));
      for (const auto& n : o.networks) network_of(n);
    } else if (f == "--density") {
      o.densities.clear();
      for (const auto& s : nonempty(split(v))) o.densities.push_back(parse_double(f, s, 0, 1));
    } else if (f == "-m") {
      o.methods = nonempty(split(v));
      for (const auto& m : o.methods) { // the registry's names (compress/registry.hpp)
        const tcoll::compression_scheme s = tcoll::parse_compression(m);
        if (std::find(std::begin(measured_schemes), std::end(measured_schemes), s) ==
            std::end(measured_schemes))
          throw invalid_argument("sparse_perf: -m " + m +
                                 ": this benchmark measures the registry's dense, csc and topk");
      }
    } else if (f == "-n")
      o.iters = static_cast<int>(parse_long(f, v, 1, 1000));
    else if (f == "-w")
      o.warmup = static_cast<int>(parse_long(f, v, 0, 1000));
    else if (f == "--budget-s")
      o.budget_s = parse_double(f, v, 0, 1e6);
    else if (f == "--mem-gib")
      o.mem_gib = parse_double(f, v, 0, 1e6);
    else if (f == "-c")
      o.check = parse_long(f, v, 0, 1) == 1;
    else if (f == "--local")
      o.local = parse_long(f, v, 0, 1) == 1;
    else if (f == "--scale")
      o.scale = parse_double(f, v, 1e-9, 1);
    else if (f == "--chunk")
      o.chunk = static_cast<std::size_t>(parse_long(f, v, 1, 1L << 40));
    else if (f == "--threshold")
      o.threshold = tcoll::parse_bytes(v);
    else if (f == "--profiles")
      o.profile_dir = v;
    else if (f == "-T")
      o.timeout_s = static_cast<int>(parse_long(f, v, 1, 86400));
    else if (f == "--json")
      o.json = v;
    else
      throw invalid_argument("sparse_perf: unknown flag '" + std::string(f) + "'\n" + usage());
  }
  return o;
}

bool has_method(const options& o, std::string_view m) {
  return std::find(o.methods.begin(), o.methods.end(), m) != o.methods.end();
}

// ---------------------------------------------------------------------------------------------
// A transport that routes to the shaped endpoint while switched on and to the plain one
// otherwise. Both decorate the same counting endpoint, so message spaces and counts are
// shared; the switch flips only between collectives (every rank after a barrier). It lets
// the untimed setup iterations (CSC's dense iteration 0 and the checked iteration) run at
// memory speed instead of costing a whole emulated dense exchange each.

template <transport Shaped, transport Plain>
class switchable {
public:
  static constexpr bool zero_copy =
      transport_is_zero_copy<Shaped>() && transport_is_zero_copy<Plain>();
  static constexpr std::string_view name = "switchable";

  /// A request of whichever endpoint posted it.
  struct request {
    std::variant<typename Shaped::request, typename Plain::request> r;
  };

  switchable(Shaped& s, Plain& p) : shaped_(&s), plain_(&p) {}

  /// Routes later calls to the shaped endpoint (`on`) or the plain one.
  void shaping(bool on) noexcept { on_ = on; }

  int rank() const { return plain_->rank(); }
  int size() const { return plain_->size(); }
  std::chrono::milliseconds timeout() const { return plain_->timeout(); }

  request isend(int peer, const void* data, std::size_t bytes, int tag) {
    if (on_) return {shaped_->isend(peer, data, bytes, tag)};
    return {plain_->isend(peer, data, bytes, tag)};
  }
  request irecv(int peer, void* dst, std::size_t bytes, int tag) {
    if (on_) return {shaped_->irecv(peer, dst, bytes, tag)};
    return {plain_->irecv(peer, dst, bytes, tag)};
  }
  request irecv_consume(int peer, std::size_t bytes, int tag, consumer use, void* staging) {
    if (on_) return {shaped_->irecv_consume(peer, bytes, tag, use, staging)};
    return {plain_->irecv_consume(peer, bytes, tag, use, staging)};
  }
  bool test(request& q) {
    if (q.r.index() == 0) return shaped_->test(std::get<0>(q.r));
    return plain_->test(std::get<1>(q.r));
  }
  void wait(request& q, deadline when) {
    if (q.r.index() == 0) return shaped_->wait(std::get<0>(q.r), when);
    plain_->wait(std::get<1>(q.r), when);
  }
  void abort() noexcept { plain_->abort(); }
  collective_context& collectives() noexcept { return plain_->collectives(); }
  void check_concurrent_use() const requires requires(const Plain& i) { i.check_concurrent_use(); }
  { plain_->check_concurrent_use(); }

private:
  Shaped* shaped_;
  Plain* plain_;
  bool on_ = false;
};

using counted_t = counting<thread_transport>;
using shaped_t = shaped<counted_t>;
using comm_t = switchable<shaped_t, counted_t>;

// ---------------------------------------------------------------------------------------------
// Inputs. Integer-valued floats so every sum is exact and order-independent.

/// v(i, q) = h(i) + q with h(i) in [-32768, 32767]: sums over 16 ranks stay far below 2^24.
inline float hval(std::size_t i) {
  const std::uint32_t x = static_cast<std::uint32_t>(i) * 2654435761u;
  return static_cast<float>(static_cast<int>((x >> 16) & 0xFFFFu) - 32768);
}
void fill_gradient(float* p, std::size_t n, int rank) {
  const float q = static_cast<float>(rank);
  for (std::size_t i = 0; i < n; ++i) p[i] = hval(i) + q;
}
/// The value of every element of chunk `c` in CSC's dense iteration 0 (same on every rank):
/// distinct positive integers per full chunk (a permutation modulo a prime), 0 for a short
/// last chunk, so the norms after iteration 0 are strictly ordered by this value.
inline float chunk_value(const chunk_layout& L, std::size_t c) {
  if (L.size(c) < L.chunk) return 0.0f;
  return static_cast<float>(1 + (c * 7919 + 13) % 1000003);
}

// ---------------------------------------------------------------------------------------------
// Results

/// One measurement of one method in one setting.
struct result {
  std::string pool, network, method;
  int ranks = 0;
  double density = 1.0;
  std::size_t count = 0;
  double gbit = 0;
  std::vector<double> times_s; ///< per timed iteration, maximum over ranks
  std::size_t bytes_per_rank = 0;
  long long wrong = -1; ///< -1: not checked
  std::string skipped;  ///< non-empty: why it did not run
  std::size_t chunks = 0, important_chunks = 0, buffers = 0, k = 0;

  double median_s() const {
    if (times_s.empty()) return 0;
    auto t = times_s;
    std::sort(t.begin(), t.end());
    return t.size() % 2 ? t[t.size() / 2] : (t[t.size() / 2 - 1] + t[t.size() / 2]) / 2;
  }
  double min_s() const {
    return times_s.empty() ? 0 : *std::min_element(times_s.begin(), times_s.end());
  }
  double max_s() const {
    return times_s.empty() ? 0 : *std::max_element(times_s.begin(), times_s.end());
  }
  /// Link time of this rank's bytes alone (the beta term), seconds.
  double wire_s() const {
    return gbit > 0 ? static_cast<double>(bytes_per_rank) * 8 / (gbit * 1e9) : 0;
  }
};

/// CSC's local work for one rank alone, seconds (medians).
struct local_part {
  std::string pool;
  double density = 1;
  std::size_t count = 0, chunks = 0, important = 0;
  double residual = 0, norms = 0, select = 0, gather = 0, scatter = 0;
  double csc_iteration = 0; ///< a whole CSC iteration at one rank (mark + finish)
  double local() const { return norms + select + gather + scatter; }
};

template <class Tr>
double max_over(Tr& t, double v) {
  allreduce(t, &v, &v, 1, max_op{}, recursive_doubling{});
  return v;
}
template <class Tr>
long long sum_over(Tr& t, long long v) {
  allreduce(t, &v, &v, 1, sum_op{}, recursive_doubling{});
  return v;
}
template <class Tr>
unsigned long long max_over_u(Tr& t, unsigned long long v) {
  allreduce(t, &v, &v, 1, max_op{}, recursive_doubling{});
  return v;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty()      ? 0
         : v.size() % 2 ? v[v.size() / 2]
                        : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// ---------------------------------------------------------------------------------------------
// Memory estimates (bytes over all ranks)

double mem_dense(std::size_t n, int P) {
  return 4.0 * n * P;
}
double mem_csc(std::size_t n, int P, double d) {
  return (8.0 + (d < 1.0 ? 4.0 * d : 0.0)) * n * P; // density 1 runs in place: no send buffer
}
double mem_topk(std::size_t n, int P, double d) {
  const double k = static_cast<double>(topk_count(d, n));
  return (8.0 * n + 8.0 * k * (P + 1)) * P;
}

// ---------------------------------------------------------------------------------------------
// The local part: one rank alone, in the calling thread.

local_part measure_local(const std::string& pool_name, const std::vector<std::size_t>& sizes,
                         double d, const options& o) {
  local_part lp;
  lp.pool = pool_name;
  lp.density = d;
  gradient_pool<float> pool(sizes);
  const std::size_t n = pool.size();
  const chunk_layout L{n, o.chunk};
  const std::size_t C = L.count(), k = chunks_kept(d, C);
  lp.count = n;
  lp.chunks = C;
  lp.important = k;
  host_buffer<float> residual(n), send(n), norms(C);
  std::memset(residual.data(), 0, n * sizeof(float));
  fill_gradient(pool.data(), n, 0);
  host_chunk_ops ops;
  std::vector<unsigned char> mask(C, 1);
  ops.chunk_norms(pool.data(), L, mask.data(), 1.0, 1.0, norms.data());
  select_top_chunks(std::span<const float>(norms.data(), C), k, mask);
  std::vector<std::size_t> slot(C, 0);
  for (std::size_t c = 0, at = 0; c < C; ++c)
    if (mask[c]) slot[c] = at, at += L.size(c);
  std::vector<double> tr, tn, ts, tg, tsc;
  using clk = std::chrono::steady_clock;
  const int reps = std::max(3, std::min(o.iters, 5));
  for (int r = 0; r < reps; ++r) {
    auto t0 = clk::now();
    for (std::size_t c = 0; c < C; ++c)
      ops.accumulate_residual(pool.data() + L.begin(c), residual.data() + L.begin(c), L.size(c),
                              mask[c] != 0, 0.9);
    auto t1 = clk::now();
    if (k < C) { // a dense iteration gathers, scatters, norms and selects nothing
      for (std::size_t c = 0; c < C; ++c)
        if (mask[c]) ops.gather(send.data() + slot[c], pool.data() + L.begin(c), L.size(c), 1.0f);
    }
    auto t2 = clk::now();
    if (k < C)
      for (std::size_t c = 0; c < C; ++c)
        if (mask[c]) ops.scatter(pool.data() + L.begin(c), send.data() + slot[c], L.size(c), 1.0f);
    auto t3 = clk::now();
    if (k < C) ops.chunk_norms(pool.data(), L, mask.data(), 1.0, 1.0, norms.data());
    auto t4 = clk::now();
    if (k < C) select_top_chunks(std::span<const float>(norms.data(), C), k, mask);
    auto t5 = clk::now();
    tr.push_back(seconds_d(t1 - t0).count());
    tg.push_back(seconds_d(t2 - t1).count());
    tsc.push_back(seconds_d(t3 - t2).count());
    tn.push_back(seconds_d(t4 - t3).count());
    ts.push_back(seconds_d(t5 - t4).count());
    fill_gradient(pool.data(), n, 0); // keep the values bounded (untimed)
  }
  lp.residual = median(tr);
  lp.gather = median(tg);
  lp.scatter = median(tsc);
  lp.norms = median(tn);
  lp.select = median(ts);
  // A whole CSC iteration at one rank (the threads transport of one rank: no communication).
  thread_team(1).run([&](thread_transport& t) {
    csc_options co = csc_options_at(o, d);
    co.in_place_min_bytes = n * sizeof(float) / 2 + 1;
    csc_allreduce<thread_transport, float, sum_op, ring> csc(pool, t, co);
    std::vector<double> tt;
    for (int r = 0; r < reps + 1; ++r) {
      fill_gradient(pool.data(), n, 0);
      auto t0 = clk::now();
      csc.mark_all_ready();
      csc.finish();
      if (r > 0) tt.push_back(seconds_d(clk::now() - t0).count()); // iteration 0 is dense
    }
    lp.csc_iteration = median(tt);
  });
  return lp;
}

// ---------------------------------------------------------------------------------------------
// One (pool, P) team: every network, then dense, every density of csc and topk.

struct setting_key {
  std::string network;
  double density;
  std::string method;
};

/// Top-k sum of one rank's values, computed independently of topk_allreduce: the magnitudes
/// are integers, so a histogram gives the threshold; ties at it go to the lowest indices.
double expected_topk_sum(const float* v, std::size_t n, std::size_t k) {
  if (k == 0) return 0;
  std::vector<std::size_t> hist(65536 + 64, 0);
  for (std::size_t i = 0; i < n; ++i) ++hist[static_cast<std::size_t>(std::fabs(v[i]))];
  std::size_t above = 0, m = hist.size();
  while (m-- > 0) {
    if (above + hist[m] >= k) break;
    above += hist[m];
  }
  double s = 0;
  std::size_t ties = k - above;
  for (std::size_t i = 0; i < n; ++i) {
    const auto a = static_cast<std::size_t>(std::fabs(v[i]));
    if (a > m)
      s += v[i];
    else if (a == m && ties) {
      s += v[i];
      --ties;
    }
  }
  return s;
}

std::uint64_t hash_bytes(const float* p, std::size_t n) {
  std::uint64_t h = 1469598103934665603ull;
  const auto* b = reinterpret_cast<const std::uint32_t*>(p);
  for (std::size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

void run_team(const std::string& pool_name, const std::vector<std::size_t>& sizes, int P,
              const options& o, std::vector<result>& out) {
  std::size_t n = 0;
  for (auto s : sizes) n += s;
  const double budget = o.mem_gib * 1073741824.0;
  std::vector<std::unique_ptr<shaped_network>> nets;
  std::vector<network_spec> specs;
  for (const auto& name : o.networks) {
    specs.push_back(network_of(name));
    const auto& s = specs.back();
    nets.push_back(std::make_unique<shaped_network>(
        shaping{std::chrono::nanoseconds(std::llround(s.alpha_us * 1e3)), s.gbit, 1}));
  }
  // results of this team, filled by rank 0 in a fixed order
  std::vector<result> mine;
  auto base = [&](const network_spec& s, const std::string& method, double d) {
    result r;
    r.pool = pool_name;
    r.network = s.name;
    r.method = method;
    r.ranks = P;
    r.density = d;
    r.count = n;
    r.gbit = s.gbit;
    return r;
  };

  thread_team(P, std::chrono::seconds(o.timeout_s)).run([&](thread_transport& t) {
    const int rank = t.rank();
    gradient_pool<float> pool(sizes);
    counted_t counted(t);
    using clk = std::chrono::steady_clock;
    for (std::size_t ni = 0; ni < specs.size(); ++ni) {
      const auto& spec = specs[ni];
      shaped_t sh(counted, *nets[ni]);
      comm_t comm(sh, counted);
      auto emit = [&](result r) {
        if (rank == 0) mine.push_back(std::move(r));
      };
      // times one collective call: barrier, call, maximum over ranks; bytes per rank (max)
      auto timed = [&](result& r, auto&& body, bool record) {
        t.barrier();
        counted.reset();
        const auto t0 = clk::now();
        body();
        const double s = max_over(t, seconds_d(clk::now() - t0).count());
        const auto bytes = max_over_u(t, counted.counts().bytes_sent);
        if (record) {
          r.times_s.push_back(s);
          r.bytes_per_rank = static_cast<std::size_t>(bytes);
        }
        return s;
      };
      // The checked first call of dense and top-k (`checked`) is a shaped call like the
      // others: it counts as the first warm-up iteration, or without -w as the first timed one.
      auto run_iters = [&](result& r, auto&& prepare, auto&& body, bool checked) {
        comm.shaping(true);
        for (int w = checked ? 1 : 0; w < o.warmup; ++w) {
          prepare();
          timed(r, body, false);
        }
        double total = 0;
        for (double s : r.times_s) total += s;
        for (int it = static_cast<int>(r.times_s.size()); it < o.iters; ++it) {
          if (o.budget_s > 0 && total > o.budget_s) break; // same decision on every rank
          prepare();
          total += timed(r, body, true);
        }
        comm.shaping(false);
      };

      // ---- dense allreduce of the pool (ring, in place)
      if (has_method(o, "dense")) {
        result r = base(spec, "dense", 1.0);
        if (mem_dense(n, P) > budget) {
          r.skipped = "memory";
        } else {
          fill_gradient(pool.data(), n, rank);
          if (o.check) {
            // first call checked: every element is sum_q h(i) + q
            comm.shaping(true);
            timed(
                r, [&] { allreduce(comm, pool.data(), pool.data(), n, sum_op{}, ring{}); },
                o.warmup == 0);
            comm.shaping(false);
            const float off = static_cast<float>(P * (P - 1) / 2);
            long long bad = 0;
            for (std::size_t i = 0; i < n; ++i)
              bad += pool.data()[i] != static_cast<float>(P) * hval(i) + off;
            r.wrong = sum_over(t, bad);
          }
          int since_fill = 0;
          run_iters(
              r,
              [&] {
                // values grow by P per call; refill (untimed) before they could overflow
                if (++since_fill * std::log2(std::max(2, P)) > 60) {
                  fill_gradient(pool.data(), n, rank);
                  since_fill = 0;
                }
              },
              [&] { allreduce(comm, pool.data(), pool.data(), n, sum_op{}, ring{}); }, o.check);
        }
        emit(std::move(r));
      }

      // ---- CSC at every density
      if (has_method(o, "csc"))
        for (double d : o.densities) {
          result r = base(spec, "csc", d);
          if (mem_csc(n, P, d) > budget) {
            r.skipped = "memory";
            emit(std::move(r));
            continue;
          }
          csc_options co = csc_options_at(o, d);
          // dense iterations (iteration 0, density 1) are reduced in place: no 4n send buffer
          co.in_place_min_bytes = n * sizeof(float) / 2 + 1;
          comm.shaping(false);
          csc_allreduce<comm_t, float, sum_op, ring> csc(pool, comm, co);
          const chunk_layout& L = csc.chunks();
          const std::size_t C = L.count();
          // iteration 0: dense, chunk-structured values (untimed, unshaped)
          for (std::size_t c = 0; c < C; ++c)
            std::fill_n(pool.data() + L.begin(c), L.size(c), chunk_value(L, c));
          csc.mark_all_ready();
          csc.finish();
          // iteration 1: sparse, checked (untimed, unshaped)
          fill_gradient(pool.data(), n, rank);
          t.barrier();
          counted.reset();
          csc.mark_all_ready();
          const auto& it1 = csc.finish();
          if (o.check) {
            long long bad = 0;
            // the expected important set: top chunks by chunk_value x size, ties to the lower index
            const std::size_t k = chunks_kept(d, C);
            std::vector<std::size_t> order(C);
            std::iota(order.begin(), order.end(), std::size_t{0});
            std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
              return static_cast<double>(chunk_value(L, a)) * L.size(a) >
                     static_cast<double>(chunk_value(L, b)) * L.size(b);
            });
            std::vector<unsigned char> expect(C, 0);
            for (std::size_t j = 0; j < k; ++j) expect[order[j]] = 1;
            const auto got = csc.last_important();
            for (std::size_t c = 0; c < C; ++c) bad += (got[c] != 0) != (expect[c] != 0);
            const float off = static_cast<float>(P * (P - 1) / 2);
            for (std::size_t c = 0; c < C; ++c) {
              const float* p = pool.data() + L.begin(c);
              const std::size_t b = L.begin(c);
              if (expect[c]) {
                for (std::size_t i = 0; i < L.size(c); ++i)
                  bad += p[i] != static_cast<float>(P) * hval(b + i) + off;
              } else {
                for (std::size_t i = 0; i < L.size(c); ++i)
                  bad += p[i] != hval(b + i) + static_cast<float>(rank);
              }
            }
            // the counting transport saw exactly the bytes the adaptor reports
            bad += counted.counts().bytes_sent != it1.bytes_sent();
            r.wrong = sum_over(t, bad);
          }
          run_iters(
              r, [] {},
              [&] {
                csc.mark_all_ready();
                csc.finish();
              },
              false);
          r.chunks = C;
          r.important_chunks = csc.last().important_chunks;
          r.buffers = csc.last().buffers;
          emit(std::move(r));
        }

      // ---- top-k allgather at every density below 1
      if (has_method(o, "topk"))
        for (double d : o.densities) {
          result r = base(spec, "topk", d);
          r.k = topk_count(d, n);
          if (d >= 1.0) {
            r.skipped = "density 1"; // an allgather of the whole pool with indices: see dense
          } else if (mem_topk(n, P, d) > budget) {
            r.skipped = "memory";
          } else {
            if (o.check) {
              fill_gradient(pool.data(), n, rank);
              const double want_local = expected_topk_sum(pool.data(), n, r.k);
              comm.shaping(true);
              timed(
                  r, [&] { topk_allreduce_density(comm, pool.data(), pool.data(), n, d); },
                  o.warmup == 0);
              comm.shaping(false);
              long long bad = 0;
              const auto bytes = counted.counts().bytes_sent;
              bad += bytes != static_cast<std::size_t>(P - 1) * r.k * 8;
              double s = 0;
              for (std::size_t i = 0; i < n; ++i) s += pool.data()[i];
              // every rank: its output sums to the sum over ranks of their top-k values
              double want = want_local;
              allreduce(t, &want, &want, 1, sum_op{}, recursive_doubling{});
              bad += s != want;
              // bitwise identical outputs
              const auto h = hash_bytes(pool.data(), n);
              bad += max_over_u(t, h) != h;
              r.wrong = sum_over(t, bad);
            }
            run_iters(
                r, [&] { fill_gradient(pool.data(), n, rank); },
                [&] { topk_allreduce_density(comm, pool.data(), pool.data(), n, d); }, o.check);
          }
          emit(std::move(r));
        }
    }
  });
  for (auto& r : mine) out.push_back(std::move(r));
}

// ---------------------------------------------------------------------------------------------
// Report

const result* find(const std::vector<result>& rs, const std::string& pool, const std::string& net,
                   int P, const std::string& method, double d) {
  for (const auto& r : rs)
    if (r.pool == pool && r.network == net && r.ranks == P && r.method == method &&
        (method == "dense" || r.density == d))
      return &r;
  return nullptr;
}

bool ran(const result* r) {
  return r && r->skipped.empty() && !r->times_s.empty();
}

std::string fmt(const char* f, double v) {
  char b[48];
  std::snprintf(b, sizeof b, f, v);
  return b;
}
std::string time_ms(const result* r) {
  if (!r) return "-";
  if (!r->skipped.empty()) return r->skipped == "memory" ? "skip:mem" : "-";
  return ran(r) ? fmt("%.1f", r->median_s() * 1e3) : "-";
}
std::string wire_ms(const result* r) {
  return ran(r) ? fmt("%.1f", r->wire_s() * 1e3) : "-";
}
std::string mbytes(const result* r) {
  return ran(r) ? fmt("%.2f", static_cast<double>(r->bytes_per_rank) / 1e6) : "-";
}
std::string ratio(const result* num, const result* den) {
  return ran(num) && ran(den) && den->median_s() > 0
             ? fmt("%.2f", num->median_s() / den->median_s())
             : "-";
}

const local_part* find_local(const std::vector<local_part>& ls, const std::string& pool, double d) {
  for (const auto& l : ls)
    if (l.pool == pool && l.density == d) return &l;
  return nullptr;
}

/// The tables of one pool (every network), then its local part.
void print_pool(std::FILE* f, const options& o, const std::vector<result>& rs,
                const std::vector<local_part>& ls, const std::string& pool, std::size_t n,
                std::size_t tensors) {
  {
    const std::size_t C = (n + o.chunk - 1) / o.chunk;
    for (const auto& net : o.networks) {
      const network_spec spec = network_of(net);
      std::fprintf(f,
                   "#\n# pool %s: %zu floats (%.1f MiB), %zu tensors, %zu chunks of %zu | network "
                   "%s: %g Gbit/s, alpha %g us, one node per rank\n",
                   pool.c_str(), n, static_cast<double>(n) * 4 / 1048576.0, tensors, C, o.chunk,
                   net.c_str(), spec.gbit, spec.alpha_us);
      std::fprintf(f,
                   "#%5s %7s | %9s %8s %8s | %9s %8s %8s %6s %4s %7s | %9s %8s %8s %7s | %8s %8s "
                   "%9s %6s %5s\n",
                   "ranks", "density", "dense", "wire", "MB/rank", "csc", "wire", "MB/rank",
                   "chunks", "bufs", "x-dense", "topk", "wire", "MB/rank", "x-dense", "topk/csc",
                   "local", "loc/dense", "#wrong", "iters");
      std::fprintf(f,
                   "#%5s %7s | %9s %8s %8s | %9s %8s %8s %6s %4s %7s | %9s %8s %8s %7s | %8s %8s "
                   "%9s %6s %5s\n",
                   "", "", "(ms)", "(ms)", "", "(ms)", "(ms)", "", "sent", "", "", "(ms)", "(ms)",
                   "", "", "", "(ms)", "(%)", "", "d/c/t");
      for (int P : o.ranks)
        for (double d : o.densities) {
          const result* dn = find(rs, pool, net, P, "dense", d);
          const result* cs = find(rs, pool, net, P, "csc", d);
          const result* tk = find(rs, pool, net, P, "topk", d);
          const local_part* lp = find_local(ls, pool, d);
          long long wrong = 0;
          bool checked = false;
          for (const result* r : {dn, cs, tk})
            if (r && r->wrong >= 0) wrong += r->wrong, checked = true;
          auto iters = [](const result* r) { return r ? std::to_string(r->times_s.size()) : "-"; };
          std::fprintf(
              f,
              " %5d %7.4g | %9s %8s %8s | %9s %8s %8s %6s %4s %7s | %9s %8s %8s %7s | %8s %8s "
              "%9s %6s %5s\n",
              P, d, time_ms(dn).c_str(), wire_ms(dn).c_str(), mbytes(dn).c_str(),
              time_ms(cs).c_str(), wire_ms(cs).c_str(), mbytes(cs).c_str(),
              ran(cs) ? std::to_string(cs->important_chunks).c_str() : "-",
              ran(cs) ? std::to_string(cs->buffers).c_str() : "-", ratio(dn, cs).c_str(),
              time_ms(tk).c_str(), wire_ms(tk).c_str(), mbytes(tk).c_str(), ratio(dn, tk).c_str(),
              ratio(tk, cs).c_str(), lp ? fmt("%.1f", lp->local() * 1e3).c_str() : "-",
              lp && ran(dn) ? fmt("%.1f", 100 * lp->local() / dn->median_s()).c_str() : "-",
              checked ? std::to_string(wrong).c_str() : "N/A",
              (iters(dn) + "/" + iters(cs) + "/" + iters(tk)).c_str());
        }
    }
  }
  bool any_local = false;
  for (const auto& l : ls) any_local = any_local || l.pool == pool;
  if (any_local) {
    std::fprintf(f, "#\n# CSC's local part, one rank alone (medians; ms): local = norms + select + "
                    "gather + scatter; residual = Algorithm 1's g += hg pass; csc@1 = a whole CSC "
                    "iteration at one rank\n");
    std::fprintf(f, "#%9s %7s %7s %9s | %8s %8s %8s %8s %8s | %8s | %8s\n", "pool", "density",
                 "chunks", "important", "residual", "norms", "select", "gather", "scatter", "local",
                 "csc@1");
    for (const auto& l : ls)
      if (l.pool == pool)
        std::fprintf(f, " %9s %7.4g %7zu %9zu | %8.2f %8.2f %8.3f %8.2f %8.2f | %8.2f | %8.2f\n",
                     l.pool.c_str(), l.density, l.chunks, l.important, l.residual * 1e3,
                     l.norms * 1e3, l.select * 1e3, l.gather * 1e3, l.scatter * 1e3,
                     l.local() * 1e3, l.csc_iteration * 1e3);
  }
  std::fflush(f);
}

bool write_json(const std::string& path, const options& o, const std::vector<result>& rs,
                const std::vector<local_part>& ls) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return false;
  using tcoll::bench::json_escape;
  std::fprintf(f, "[");
  bool first = true;
  for (const auto& r : rs) {
    const result* dn = find(rs, r.pool, r.network, r.ranks, "dense", r.density);
    const local_part* lp = r.method == "csc" ? find_local(ls, r.pool, r.density) : nullptr;
    std::string times;
    for (double t : r.times_s) times += (times.empty() ? "" : ", ") + fmt("%.6f", t);
    std::fprintf(
        f,
        "%s\n {\"kind\": \"exchange\", \"pool\": \"%s\", \"network\": \"%s\", "
        "\"gbit\": %g, \"ranks\": %d, \"method\": \"%s\", \"density\": %g, "
        "\"count\": %zu, \"bytes\": %zu, \"chunk_elements\": %zu, \"skipped\": %s, "
        "\"iters\": %zu, \"times_s\": [%s], \"time_s_median\": %.6f, \"time_s_min\": "
        "%.6f, \"time_s_max\": %.6f, \"bytes_sent_per_rank\": %zu, \"wire_s\": %.6f, "
        "\"speedup_vs_dense\": %s, \"chunks\": %zu, \"important_chunks\": %zu, "
        "\"buffers\": %zu, \"k\": %zu, \"local_one_rank_s\": %s, \"wrong\": %s}",
        first ? "" : ",", json_escape(r.pool).c_str(), json_escape(r.network).c_str(), r.gbit,
        r.ranks, r.method.c_str(), r.density, r.count, r.count * sizeof(float), o.chunk,
        r.skipped.empty() ? "null" : ("\"" + r.skipped + "\"").c_str(), r.times_s.size(),
        times.c_str(), r.median_s(), r.min_s(), r.max_s(), r.bytes_per_rank, r.wire_s(),
        ran(&r) && ran(dn) ? fmt("%.4f", dn->median_s() / r.median_s()).c_str() : "null", r.chunks,
        r.important_chunks, r.buffers, r.k, lp ? fmt("%.6f", lp->local()).c_str() : "null",
        r.wrong < 0 ? "null" : std::to_string(r.wrong).c_str());
    first = false;
  }
  for (const auto& l : ls) {
    std::fprintf(f,
                 "%s\n {\"kind\": \"local\", \"pool\": \"%s\", \"density\": %g, \"count\": %zu, "
                 "\"chunks\": %zu, \"important_chunks\": %zu, \"residual_s\": %.6f, \"norms_s\": "
                 "%.6f, \"select_s\": %.6f, \"gather_s\": %.6f, \"scatter_s\": %.6f, "
                 "\"local_s\": %.6f, \"csc_iteration_one_rank_s\": %.6f}",
                 first ? "" : ",", json_escape(l.pool).c_str(), l.density, l.count, l.chunks,
                 l.important, l.residual, l.norms, l.select, l.gather, l.scatter, l.local(),
                 l.csc_iteration);
    first = false;
  }
  std::fprintf(f, "\n]\n");
  return std::fclose(f) == 0;
}

double mem_available_gib() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb / 1048576.0;
  return -1;
}

} // namespace

int main(int argc, char** argv) {
  options o;
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
  try {
    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    double load[3] = {0, 0, 0};
    getloadavg(load, 3);
    std::printf("# tcoll sparse_perf: threads transport in shaped<> (counting<>), ring, sum, "
                "float; iters %d warmup %d budget %gs mem-gib %g validation %d chunk %zu "
                "threshold %zu\n",
                o.iters, o.warmup, o.budget_s, o.mem_gib, o.check ? 1 : 0, o.chunk, o.threshold);
    std::printf("# host %s, %ld cores online, load average %.2f %.2f %.2f, MemAvailable %.1f GiB\n",
                host, sysconf(_SC_NPROCESSORS_ONLN), load[0], load[1], load[2],
                mem_available_gib());
    std::fflush(stdout);
    std::vector<result> results;
    std::vector<local_part> locals;
    const auto wall0 = std::chrono::steady_clock::now();
    for (const auto& pool_name : o.pools) {
      const plan::profile prof = plan::load_profile(o.profile_dir + "/" + pool_name + ".csv");
      std::vector<std::size_t> sizes;
      for (const auto& t : prof.tensors)
        sizes.push_back(std::max<std::size_t>(
            1, static_cast<std::size_t>(std::llround(static_cast<double>(t.elements) * o.scale))));
      std::size_t n = 0;
      for (auto s : sizes) n += s;
      if (o.local && has_method(o, "csc"))
        for (double d : o.densities) locals.push_back(measure_local(pool_name, sizes, d, o));
      for (int P : o.ranks) {
        const auto t0 = std::chrono::steady_clock::now();
        run_team(pool_name, sizes, P, o, results);
        std::printf("# done: pool %s, %d ranks (%.1f s; %.1f s so far)\n", pool_name.c_str(), P,
                    seconds_d(std::chrono::steady_clock::now() - t0).count(),
                    seconds_d(std::chrono::steady_clock::now() - wall0).count());
        std::fflush(stdout);
      }
      print_pool(stdout, o, results, locals, pool_name, n, sizes.size());
    }
    long long wrong = 0;
    for (const auto& r : results) wrong += std::max(0LL, r.wrong);
    std::printf("#\n# Out of bounds values : %lld %s\n# total %.1f s\n", wrong,
                wrong == 0 ? "OK" : "FAILED",
                seconds_d(std::chrono::steady_clock::now() - wall0).count());
    std::fflush(stdout);
    if (!o.json.empty() && !write_json(o.json, o, results, locals)) {
      std::fprintf(stderr, "sparse_perf: cannot write --json file '%s'\n", o.json.c_str());
      return 1;
    }
    return wrong == 0 ? 0 : 3;
  } catch (const tcoll::invalid_argument& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sparse_perf: %s\n", e.what());
    return 1;
  }
}
