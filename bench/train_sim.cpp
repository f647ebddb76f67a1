// train_sim: trace-driven training iterations on the overlap scheduler, measured against the
// simulator's prediction for the same plan.
//
// Every rank is a thread. It "computes" forward and backward by sleeping each tensor's time
// from the profile's workload (scaled by --time-scale; sleeping until absolute deadlines, so
// lateness does not accumulate and 8-16 ranks fit on 2 cores), writes a value into its tensor
// of the gradient pool and calls mark_ready. Communication is real: ring allreduces of the
// pool's buckets on the scheduler's engine over the threads transport wrapped in shaped<>,
// which charges the network's alpha and beta per message. The simulator is fed the same
// (scaled) workload and a ring cost model with the same alpha and beta, so both describe the
// same iteration. Every planner runs in the same job, interleaved per iteration; the extra row
// "autotune" starts from optimal's plan and lets the scheduler's autotune re-plan it (with the
// optimal planner) on the allreduce costs it measured in the warm-up iterations.
//
//   train_sim [--profile resnet50,vgg16] [--ranks 4] [--network 10gbe,25gbe,100gib]
//             [--planners layerwise,...] [--iterations 10] [--warmup 2]
//             [--compute-ms 50 | --time-scale X] [--size-scale Y] [--gamma us/B]
//             [--json FILE] [--trace FILE [--trace-planner optimal]] [--profiles DIR]
//
// --trace writes the measured Chrome trace of the last iteration of the trace planner (every
// rank) for the first setting, and FILE.predicted.json with the simulator's timeline of it.
// Byte caps of threshold and ddp scale with --size-scale, threshold's timeout with the time.
//
// Exit status: 0, 2 for bad arguments, 3 if any reduced value was wrong.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <sys/resource.h>
#include <sys/utsname.h>
#if defined(__linux__)
#include <sys/prctl.h>
#endif

#include <tcoll/plan.hpp>
#include <tcoll/schedule.hpp>
#include <tcoll/transport/shaped.hpp>
#include <tcoll/transport/threads.hpp>

#include "plan/fusion_grid.hpp" // the network table and compute setting of fusion_sim

#ifndef TCOLL_PROFILE_DIR
#define TCOLL_PROFILE_DIR "data/profiles"
#endif

namespace {

using namespace tcoll;
using us_d = std::chrono::duration<double, std::micro>;

double us_between(clock::time_point a, clock::time_point b) {
  return us_d(b - a).count();
}

// ---------------------------------------------------------------------------------------------
// Networks: one table. alpha and beta are fusion_sim's (bench/plan/fusion_grid.hpp, sources in
// docs/planner.md); shaped<> gets the same alpha and the line rate 8 / beta.

struct network {
  const char* name;      // our flag value
  const char* grid_name; // fusion_grid's name
};
constexpr network networks[] = {{"10gbe", "10GbE"}, {"25gbe", "25GbE"}, {"100gib", "100GbIB"}};

plan::link_params link_of(const std::string& name) {
  for (const auto& n : networks)
    if (name == n.name)
      for (const auto& g : plan::grid::networks)
        if (g.name == n.grid_name) return g.link;
  throw std::invalid_argument("unknown network '" + name + "' (10gbe, 25gbe, 100gib)");
}

// ---------------------------------------------------------------------------------------------
// Options

struct options {
  std::vector<std::string> profiles{"resnet50"};
  std::vector<std::string> networks{"10gbe"};
  std::vector<std::string> planners{"layerwise", "single",    "threshold", "ddp",
                                    "mgwfbp",    "adafusion", "optimal",   "autotune"};
  std::string profile_dir = TCOLL_PROFILE_DIR;
  int ranks = 4;
  int iterations = 10, warmup = 2;
  double compute_ms = 50; // target t_f + t_b when --time-scale is not given
  double time_scale = -1; // < 0: from compute_ms
  double size_scale = -1; // < 0: equal to the time scale
  double gamma = -1;      // us per byte of reduction; < 0: measured
  std::string json, trace, trace_planner = "optimal";
  int timeout_s = 120;
  std::string command;
};

const char* usage_text =
    "usage: train_sim [--profile LIST] [--ranks P] [--network 10gbe,25gbe,100gib]\n"
    "  [--planners layerwise,single,threshold,ddp,mgwfbp,adafusion,optimal,autotune]\n"
    "  [--iterations N] [--warmup W] [--compute-ms MS | --time-scale X] [--size-scale Y]\n"
    "  [--gamma US_PER_BYTE] [--json FILE] [--trace FILE] [--trace-planner NAME]\n"
    "  [--profiles DIR] [-T timeout_s]\n"
    "  lists are comma-separated; defaults: resnet50, 4 ranks, 10gbe, all planners, 10 + 2\n"
    "  iterations, compute 50 ms, size scale = time scale, gamma measured\n";

std::vector<std::string> split_list(const std::string& v) {
  std::vector<std::string> out;
  std::size_t pos = 0;
  while (pos <= v.size()) {
    const auto end = std::min(v.find(',', pos), v.size());
    if (end > pos) out.push_back(v.substr(pos, end - pos));
    pos = end + 1;
  }
  return out;
}

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr, "train_sim: %s\n%s", why.c_str(), usage_text);
  std::exit(2);
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 0; i < argc; ++i) o.command += (i ? " " : "") + std::string(argv[i]);
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    if (f == "-h" || f == "--help") {
      std::printf("%s", usage_text);
      std::exit(0);
    }
    if (i + 1 >= argc) usage(f + " needs a value");
    const std::string v = argv[++i];
    try {
      if (f == "--profile")
        o.profiles = split_list(v);
      else if (f == "--network")
        o.networks = split_list(v);
      else if (f == "--planners")
        o.planners = split_list(v);
      else if (f == "--profiles")
        o.profile_dir = v;
      else if (f == "--ranks")
        o.ranks = std::stoi(v);
      else if (f == "--iterations")
        o.iterations = std::stoi(v);
      else if (f == "--warmup")
        o.warmup = std::stoi(v);
      else if (f == "--compute-ms")
        o.compute_ms = std::stod(v);
      else if (f == "--time-scale")
        o.time_scale = std::stod(v);
      else if (f == "--size-scale")
        o.size_scale = std::stod(v);
      else if (f == "--gamma")
        o.gamma = std::stod(v);
      else if (f == "--json")
        o.json = v;
      else if (f == "--trace")
        o.trace = v;
      else if (f == "--trace-planner")
        o.trace_planner = v;
      else if (f == "-T")
        o.timeout_s = std::stoi(v);
      else
        usage("unknown flag " + f);
    } catch (const std::logic_error&) {
      usage("bad value '" + v + "' for " + f);
    }
  }
  if (o.ranks < 2) usage("--ranks must be >= 2");
  if (o.iterations < 1 || o.warmup < 0) usage("--iterations must be >= 1, --warmup >= 0");
  if (o.profiles.empty() || o.networks.empty() || o.planners.empty()) usage("empty list");
  if (!(o.compute_ms > 0)) usage("--compute-ms must be > 0");
  if (o.time_scale == 0 || o.size_scale == 0) usage("scales must be > 0");
  for (const auto& n : o.networks) try {
      link_of(n);
    } catch (const std::exception& e) {
      usage(e.what());
    }
  for (const auto& p : o.planners)
    if (p != "autotune" && !plan::planner_by_name(p)) usage("unknown planner '" + p + "'");
  for (const auto& p : o.planners)
    if (p == "autotune" && o.warmup < 1) usage("autotune needs --warmup >= 1 (it re-plans there)");
  return o;
}

// ---------------------------------------------------------------------------------------------
// Small statistics

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  const double at = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(at));
  const auto hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (at - static_cast<double>(lo)) * (v[hi] - v[lo]);
}
double median(const std::vector<double>& v) {
  return quantile(v, 0.5);
}

// ---------------------------------------------------------------------------------------------
// Host reduction cost: dst += src on one thread over the ring's segment size (256 KiB), the
// unit in which the threads transport reduces straight from the peer's memory.

double measure_gamma_us_per_byte() {
  const std::size_t n = (std::size_t{256} << 10) / sizeof(float);
  const std::size_t buffers = 64; // 16 MiB each side: larger than L2, like a bucket's chunks
  std::vector<float> a(n * buffers, 1.0f), b(n * buffers, 2.0f);
  cpu_reducer red;
  std::vector<double> per_byte;
  for (int rep = 0; rep < 7; ++rep) {
    const auto t0 = clock::now();
    for (std::size_t k = 0; k < buffers; ++k)
      red.reduce(sum_op{}, a.data() + k * n, a.data() + k * n, b.data() + k * n, n);
    per_byte.push_back(us_between(t0, clock::now()) / static_cast<double>(n * buffers * 4));
  }
  return median(per_byte);
}

// ---------------------------------------------------------------------------------------------
// The floor under the scheduler's dispatch latency: one condition-variable wake-up of a thread
// that has slept for a while (as the engine thread does during backward), measured from the
// notifying thread's clock read to the woken thread's. Median and p90 of 200.

void set_timer_slack();

struct wakeup_baseline {
  double median_us = 0, p90_us = 0;
};

wakeup_baseline measure_wakeup() {
  std::mutex m;
  std::condition_variable cv, ack;
  std::uint64_t sent = 0, seen = 0;
  clock::time_point at{};
  std::vector<double> lat;
  std::thread waiter([&] {
    set_timer_slack();
    std::unique_lock lock(m);
    for (;;) {
      cv.wait(lock, [&] { return sent != seen; });
      if (sent == ~std::uint64_t{0}) return;
      lat.push_back(us_between(at, clock::now()));
      seen = sent;
      ack.notify_one();
    }
  });
  for (int i = 0; i < 200; ++i) {
    std::this_thread::sleep_for(std::chrono::microseconds(500));
    {
      std::lock_guard lock(m);
      at = clock::now();
      ++sent;
    }
    cv.notify_one();
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    std::unique_lock lock(m);
    ack.wait(lock, [&] { return seen == sent; });
  }
  {
    std::lock_guard lock(m);
    sent = ~std::uint64_t{0};
  }
  cv.notify_one();
  waiter.join();
  return {median(lat), quantile(lat, 0.9)};
}

// ---------------------------------------------------------------------------------------------
// One setting: profile x network at P ranks.

struct planner_run {
  std::string name;
  plan::bucket_plan plan;  // as executed (dispatch delays dropped: the scheduler ignores them)
  bool had_delays = false; // the planner asked for dispatch delays
  bool autotune = false;   // starts with optimal's plan, re-planned by the scheduler's autotune
  plan::timeline sim;
};

/// What one rank saw in one iteration of one planner.
struct rank_record {
  clock::time_point forward_end{}, backward_end{};
  iteration_timing timing; // what finish() returned
};

struct iteration_record {
  clock::time_point t0{};
  std::vector<rank_record> ranks;
};

struct planner_result {
  std::string name;
  std::size_t buckets = 0;
  bool had_delays = false;
  std::vector<double> iteration_us, nonoverlap_us, compute_us;
  double measured_us = 0, noise_pct = 0, sim_us = 0, error_pct = 0;
  double nonoverlap_measured_us = 0, nonoverlap_sim_us = 0, compute_measured_us = 0;
  double sim_compute_us = 0, sim_fit_us = 0, sim_fit_error_pct = 0;
  double overhead_median_us = 0;
  std::size_t overhead_samples = 0;
  double speedup_vs_layerwise = std::nan(""), speedup_vs_single = std::nan("");
  double sim_speedup_vs_layerwise = std::nan(""), sim_speedup_vs_single = std::nan("");
};

struct setting_result {
  std::string profile, network;
  int ranks = 0;
  std::size_t tensors = 0;
  std::uint64_t model_bytes = 0, pool_bytes_per_rank = 0;
  plan::link_params link{};
  double gbit = 0, time_scale = 0, size_scale = 0, compute_us = 0, unscaled_compute_us = 0;
  int batch = 0;
  std::vector<planner_result> planners;
  std::vector<double> overhead_all_us, submit_all_us, wake_all_us;
  double overhead_median_us = 0, overhead_p90_us = 0, submit_median_us = 0, wake_median_us = 0;
  plan::linear_cost fitted{};
  std::size_t fit_samples = 0;
  std::optional<plan::linear_cost> autotune_cost;
  long long wrong = 0;
  long peak_rss_kib = 0;
  double wall_s = 0;
  double backward_late_us = 0; // median over planners: measured end of backward - simulated
};

int batch_of(const std::string& model) {
  for (const auto& m : plan::grid::models)
    if (m.name == model) return m.batch_size;
  return 32;
}

/// Planner `name` for the scaled workload: byte caps scaled by size_scale and time constants by
/// time_scale, so a planner treats the miniature model as it would treat the real one.
plan::any_planner scaled_planner(const std::string& name, double tscale, double sscale) {
  auto p = *plan::planner_by_name(name);
  if (auto* t = std::get_if<plan::threshold_planner>(&p)) {
    t->options.threshold_bytes =
        static_cast<std::uint64_t>(static_cast<double>(t->options.threshold_bytes) * sscale);
    t->options.timeout_us *= tscale;
  } else if (auto* d = std::get_if<plan::ddp_planner>(&p)) {
    d->options.first_bucket_bytes =
        static_cast<std::uint64_t>(static_cast<double>(d->options.first_bucket_bytes) * sscale);
    d->options.bucket_bytes =
        static_cast<std::uint64_t>(static_cast<double>(d->options.bucket_bytes) * sscale);
  }
  return p;
}

void set_timer_slack() {
#if defined(__linux__)
  prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL); // 1 us: sleeps end on time
#endif
}

setting_result run_setting(const options& o, const std::string& model, const std::string& net_name,
                           double gamma, bool want_trace) {
  setting_result res;
  const auto wall0 = clock::now();
  res.profile = model;
  res.network = net_name;
  res.ranks = o.ranks;
  const int P = o.ranks;
  const plan::profile prof = plan::load_profile(o.profile_dir + "/" + model + ".csv");
  res.batch = batch_of(model);
  const plan::workload w0 = plan::make_workload(prof, plan::grid::compute_for(res.batch));
  res.unscaled_compute_us = w0.compute_us();
  const double tscale = o.time_scale > 0 ? o.time_scale : o.compute_ms * 1e3 / w0.compute_us();
  const double sscale = o.size_scale > 0 ? o.size_scale : tscale;
  res.time_scale = tscale;
  res.size_scale = sscale;

  // The scaled workload: what the ranks sleep and allocate, and what the simulator sees.
  plan::workload w;
  w.forward_us = w0.forward_us * tscale;
  for (std::size_t i = 0; i < w0.size(); ++i) {
    const double elems = std::round(static_cast<double>(w0.bytes[i]) * sscale / sizeof(float));
    w.bytes.push_back(static_cast<std::uint64_t>(std::max(1.0, elems)) * sizeof(float));
    w.backward_us.push_back(w0.backward_us[i] * tscale);
  }
  const std::size_t L = w.size();
  res.tensors = L;
  for (auto b : w0.bytes) res.model_bytes += b;
  for (auto b : w.bytes) res.pool_bytes_per_rank += b;
  res.compute_us = w.compute_us();
  std::vector<std::string> names;
  for (const auto& t : prof.tensors) names.push_back(t.name);

  plan::link_params link = link_of(net_name);
  link.gamma_us_per_byte = gamma;
  res.link = link;
  res.gbit = 8.0 / (link.beta_us_per_byte * 1e3);
  const auto cost = plan::flat_allreduce(algorithm_id::ring, P, link);

  std::vector<planner_run> runs;
  for (const auto& name : o.planners) {
    planner_run r;
    r.name = name;
    r.autotune = name == "autotune";
    r.plan =
        plan::make_plan(scaled_planner(r.autotune ? "optimal" : name, tscale, sscale), w, cost);
    for (double d : r.plan.dispatch_delay_us) r.had_delays = r.had_delays || d > 0;
    r.plan.dispatch_delay_us.clear();
    r.sim = plan::simulate(w, cost, r.plan);
    runs.push_back(std::move(r));
  }
  const std::size_t J = runs.size();

  // Per tensor: its backward deadline from the start of the iteration.
  std::vector<double> deadline_us(L);
  {
    double at = w.forward_us;
    for (std::size_t i = 0; i < L; ++i) deadline_us[i] = (at += w.backward_us[i]);
  }
  auto at = [](clock::time_point t0, double us) {
    return t0 + std::chrono::duration_cast<clock::duration>(us_d(us));
  };

  const int total_iters = o.warmup + o.iterations;
  // records[j][it]: planner j, iteration it
  std::vector<std::vector<iteration_record>> records(
      J, std::vector<iteration_record>(static_cast<std::size_t>(total_iters)));
  for (auto& per : records)
    for (auto& rec : per) rec.ranks.resize(static_cast<std::size_t>(P));
  std::atomic<long long> wrong{0};
  std::atomic<clock::rep> shared_t0{0};

  shaped_network net(
      shaping{std::chrono::nanoseconds(std::llround(link.alpha_us * 1e3)), res.gbit, 1});
  thread_team(P, std::chrono::seconds(o.timeout_s)).run([&](thread_transport& t) {
    set_timer_slack();
    const int r = t.rank();
    shaped<thread_transport> comm(t, net);
    auto pool = gradient_pool<float>::from_workload(w);
    using sched_t = overlap_scheduler<shaped<thread_transport>, float, sum_op, ring>;
    std::vector<std::unique_ptr<sched_t>> scheds;
    for (const auto& run : runs) {
      scheduler_options so;
      if (run.autotune) {
        so.autotune_iterations = static_cast<std::size_t>(o.warmup);
        so.autotune_replan = plan::replan_with(plan::optimal_planner{});
      }
      scheds.push_back(std::make_unique<sched_t>(pool, comm, run.plan, sum_op{}, ring{}, so));
    }
    const float mine = static_cast<float>(r + 1);
    const float expect = static_cast<float>(P * (P + 1) / 2);

    for (int it = 0; it < total_iters; ++it)
      for (std::size_t j = 0; j < J; ++j) {
        auto& s = *scheds[j];
        auto& rec = records[j][static_cast<std::size_t>(it)].ranks[static_cast<std::size_t>(r)];
        t.barrier();
        if (r == 0)
          shared_t0.store((clock::now() + std::chrono::milliseconds(1)).time_since_epoch().count());
        t.barrier();
        const clock::time_point t0{clock::duration(shared_t0.load())};
        if (r == 0) records[j][static_cast<std::size_t>(it)].t0 = t0;
        std::this_thread::sleep_until(at(t0, w.forward_us));
        rec.forward_end = clock::now();
        for (std::size_t i = 0; i < L; ++i) {
          std::this_thread::sleep_until(at(t0, deadline_us[i]));
          pool.tensor(i)[0] = mine; // the "gradient"; the rest of the pool stays 0
          s.mark_ready(i);
        }
        rec.timing = s.finish();
        rec.backward_end = L ? rec.timing.tensor_ready.back() : rec.forward_end;
        long long bad = 0;
        for (std::size_t i = 0; i < L; ++i) bad += pool.tensor(i)[0] != expect;
        if (bad) wrong += bad;
      }
    t.barrier();
    if (r == 0)
      for (std::size_t j = 0; j < J; ++j)
        if (runs[j].autotune) {
          runs[j].plan = scheds[j]->plan(); // rank 0's re-plan, adopted by every rank
          if (const auto c = scheds[j]->fitted_cost()) res.autotune_cost = *c;
        }
  });
  res.wrong = wrong.load();
  for (auto& run : runs)
    if (run.autotune) run.sim = plan::simulate(w, cost, run.plan);

  // ---- evaluation
  const auto first = static_cast<std::size_t>(o.warmup);
  std::vector<plan::sample> fit;
  for (std::size_t j = 0; j < J; ++j) {
    planner_result pr;
    pr.name = runs[j].name;
    pr.buckets = runs[j].plan.bucket_count();
    pr.had_delays = runs[j].had_delays;
    std::vector<double> overhead;
    for (std::size_t it = first; it < records[j].size(); ++it) {
      const auto& ir = records[j][it];
      clock::time_point end{}, bw_end{};
      for (const auto& rr : ir.ranks) {
        end = std::max(end, rr.timing.end);
        bw_end = std::max(bw_end, rr.backward_end);
        const auto& bs = rr.timing.buckets;
        for (std::size_t k = 0; k < bs.size(); ++k) {
          const auto& b = bs[k];
          fit.push_back({static_cast<double>(b.bytes), us_between(b.started, b.finished)});
          // the engine was idle when the bucket became ready: its predecessor had finished
          const bool idle = k == 0 || bs[k - 1].finished <= b.ready;
          if (idle) {
            overhead.push_back(us_between(b.ready, b.started));
            res.submit_all_us.push_back(us_between(b.ready, b.queued));
            res.wake_all_us.push_back(us_between(b.queued, b.started));
          }
        }
      }
      pr.iteration_us.push_back(us_between(ir.t0, end));
      pr.nonoverlap_us.push_back(std::max(0.0, us_between(bw_end, end)));
      pr.compute_us.push_back(us_between(ir.t0, bw_end));
    }
    pr.measured_us = median(pr.iteration_us);
    pr.noise_pct = 100.0 * (quantile(pr.iteration_us, 0.75) - quantile(pr.iteration_us, 0.25)) /
                   pr.measured_us;
    pr.sim_us = runs[j].sim.iteration_us;
    pr.error_pct = 100.0 * (pr.measured_us - pr.sim_us) / pr.sim_us;
    pr.nonoverlap_measured_us = median(pr.nonoverlap_us);
    pr.nonoverlap_sim_us = runs[j].sim.non_overlapped_us;
    pr.compute_measured_us = median(pr.compute_us);
    pr.sim_compute_us = runs[j].sim.compute_us;
    pr.overhead_median_us = median(overhead);
    pr.overhead_samples = overhead.size();
    res.overhead_all_us.insert(res.overhead_all_us.end(), overhead.begin(), overhead.end());
    res.planners.push_back(std::move(pr));
  }
  // What the simulator predicts with a linear cost fitted to this run's measured allreduces:
  // separates the error of the nominal alpha-beta model from everything else.
  res.fit_samples = fit.size();
  try {
    res.fitted = plan::fit_linear(fit);
  } catch (const std::exception&) {
    res.fitted = {};
  }
  for (std::size_t j = 0; j < J; ++j) {
    auto& pr = res.planners[j];
    pr.sim_fit_us = plan::simulate(w, res.fitted, runs[j].plan).iteration_us;
    pr.sim_fit_error_pct = 100.0 * (pr.measured_us - pr.sim_fit_us) / pr.sim_fit_us;
  }
  auto find = [&](const char* n) -> const planner_result* {
    for (const auto& p : res.planners)
      if (p.name == n) return &p;
    return nullptr;
  };
  const auto* lw = find("layerwise");
  const auto* sg = find("single");
  for (auto& pr : res.planners) {
    if (lw) {
      pr.speedup_vs_layerwise = lw->measured_us / pr.measured_us;
      pr.sim_speedup_vs_layerwise = lw->sim_us / pr.sim_us;
    }
    if (sg) {
      pr.speedup_vs_single = sg->measured_us / pr.measured_us;
      pr.sim_speedup_vs_single = sg->sim_us / pr.sim_us;
    }
  }
  std::vector<double> late;
  for (const auto& pr : res.planners) late.push_back(pr.compute_measured_us - pr.sim_compute_us);
  res.backward_late_us = median(late);
  res.overhead_median_us = median(res.overhead_all_us);
  res.overhead_p90_us = quantile(res.overhead_all_us, 0.9);
  res.submit_median_us = median(res.submit_all_us);
  res.wake_median_us = median(res.wake_all_us);
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  res.peak_rss_kib = ru.ru_maxrss;
  res.wall_s = us_between(wall0, clock::now()) * 1e-6;

  // ---- traces: the last iteration of the trace planner, measured and predicted
  if (want_trace) {
    std::size_t j = J;
    for (std::size_t k = 0; k < J; ++k)
      if (runs[k].name == o.trace_planner) j = k;
    if (j == J) {
      std::fprintf(stderr, "train_sim: --trace-planner %s is not among --planners\n",
                   o.trace_planner.c_str());
    } else {
      const auto& ir = records[j].back();
      std::vector<rank_iteration> ranks;
      for (int r = 0; r < P; ++r) {
        const auto& rr = ir.ranks[static_cast<std::size_t>(r)];
        rank_iteration ri{r, rr.timing};
        // interleaved planners: the scheduler's begin is its previous iteration's end; the
        // first BACKWARD slice starts when this iteration's forward sleep ended
        ri.timing.begin = rr.forward_end;
        ranks.push_back(std::move(ri));
      }
      std::ofstream out(o.trace);
      write_chrome_trace(out, std::span<const rank_iteration>(ranks), ir.t0);
      std::ofstream pred(o.trace + ".predicted.json");
      plan::write_chrome_trace(pred, runs[j].sim, names);
      if (!out || !pred)
        std::fprintf(stderr, "train_sim: cannot write %s\n", o.trace.c_str());
      else
        std::printf("# trace: %s (measured, last iteration of %s), %s.predicted.json "
                    "(simulator)\n",
                    o.trace.c_str(), o.trace_planner.c_str(), o.trace.c_str());
    }
  }
  return res;
}

// ---------------------------------------------------------------------------------------------
// Output

double ms(double us) {
  return us * 1e-3;
}

void print_setting(const setting_result& s, const options& o) {
  std::printf("\n# %s (%zu tensors, %.1f MiB, batch %d), %d ranks, %s: alpha %.2f us, %.0f "
              "Gbit/s (beta %.3g us/B), gamma %.3g us/B (host reduction)\n",
              s.profile.c_str(), s.tensors, static_cast<double>(s.model_bytes) / 1048576.0, s.batch,
              s.ranks, s.network.c_str(), s.link.alpha_us, s.gbit, s.link.beta_us_per_byte,
              s.link.gamma_us_per_byte);
  std::printf("# time-scale %.4g (compute %.1f ms -> %.2f ms), size-scale %.4g (pool %.2f MiB "
              "per rank), %d iterations per planner after %d warm-up, interleaved\n",
              s.time_scale, ms(s.unscaled_compute_us), ms(s.compute_us), s.size_scale,
              static_cast<double>(s.pool_bytes_per_rank) / 1048576.0, o.iterations, o.warmup);
  std::printf("%-10s %7s %9s %9s %7s %6s %9s %9s %8s %8s %7s %7s %7s %7s\n", "planner", "buckets",
              "meas_ms", "sim_ms", "err%", "iqr%", "nonovl_m", "nonovl_s", "vs_lw", "vs_sgl",
              "sim_lw", "sim_sgl", "fit_ms", "fiterr%");
  for (const auto& p : s.planners)
    std::printf("%-10s %7zu %9.2f %9.2f %+7.1f %6.1f %9.2f %9.2f %8.2f %8.2f %7.2f %7.2f %7.2f "
                "%+7.1f%s\n",
                p.name.c_str(), p.buckets, ms(p.measured_us), ms(p.sim_us), p.error_pct,
                p.noise_pct, ms(p.nonoverlap_measured_us), ms(p.nonoverlap_sim_us),
                p.speedup_vs_layerwise, p.speedup_vs_single, p.sim_speedup_vs_layerwise,
                p.sim_speedup_vs_single, ms(p.sim_fit_us), p.sim_fit_error_pct,
                p.had_delays ? "  (dispatch delays not executed)" : "");
  std::printf("# scheduler overhead (ready -> started, engine idle): median %.1f us, p90 "
              "%.1f us over %zu buckets (ready -> queued %.1f us, queued -> started %.1f us)\n",
              s.overhead_median_us, s.overhead_p90_us, s.overhead_all_us.size(), s.submit_median_us,
              s.wake_median_us);
  if (s.autotune_cost)
    std::printf("# autotune fitted %.1f us + %.4g us/B\n", s.autotune_cost->startup_us,
                s.autotune_cost->per_byte_us);
  std::printf("# fitted cost of the measured allreduces: %.1f us + %.4g us/B (%zu samples); "
              "nominal ring: %.1f us + %.4g us/B\n",
              s.fitted.startup_us, s.fitted.per_byte_us, s.fit_samples,
              2.0 * (s.ranks - 1) * s.link.alpha_us,
              2.0 * (s.ranks - 1) / s.ranks * s.link.beta_us_per_byte +
                  (s.ranks - 1.0) / s.ranks * s.link.gamma_us_per_byte);
  std::printf("# end of backward (slowest rank) later than simulated by %.0f us (median over "
              "planners): sleep wake-up lateness\n",
              s.backward_late_us);
  std::printf("# peak RSS %.1f MiB (process so far), pools %.1f MiB (%d x %.2f MiB); wrong "
              "values %lld; %.1f s\n",
              static_cast<double>(s.peak_rss_kib) / 1024.0,
              static_cast<double>(s.pool_bytes_per_rank) * s.ranks / 1048576.0, s.ranks,
              static_cast<double>(s.pool_bytes_per_rank) / 1048576.0, s.wrong, s.wall_s);
}

void json_num(std::FILE* f, const char* key, double v, bool comma = true) {
  if (std::isfinite(v))
    std::fprintf(f, "\"%s\": %.6g%s", key, v, comma ? ", " : "");
  else
    std::fprintf(f, "\"%s\": null%s", key, comma ? ", " : "");
}

void json_array(std::FILE* f, const char* key, const std::vector<double>& v) {
  std::fprintf(f, "\"%s\": [", key);
  for (std::size_t i = 0; i < v.size(); ++i) std::fprintf(f, "%s%.6g", i ? ", " : "", v[i]);
  std::fprintf(f, "], ");
}

std::string json_escape(const std::string& s) {
  std::string r;
  for (char c : s) {
    if (c == '"' || c == '\\') r += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) r += c;
  }
  return r;
}

bool write_json(const options& o, const std::vector<setting_result>& all,
                const wakeup_baseline& wake) {
  std::FILE* f = std::fopen(o.json.c_str(), "w");
  if (!f) return false;
  utsname u{};
  uname(&u);
  std::fprintf(f, "{\n\"tool\": \"train_sim\", \"command\": \"%s\",\n",
               json_escape(o.command).c_str());
  std::fprintf(f,
               "\"machine\": {\"sysname\": \"%s\", \"release\": \"%s\", \"machine\": \"%s\", "
               "\"hardware_concurrency\": %u, \"wakeup_median_us\": %.3f, \"wakeup_p90_us\": "
               "%.3f},\n",
               json_escape(u.sysname).c_str(), json_escape(u.release).c_str(),
               json_escape(u.machine).c_str(), std::thread::hardware_concurrency(), wake.median_us,
               wake.p90_us);
  std::fprintf(f,
               "\"options\": {\"ranks\": %d, \"iterations\": %d, \"warmup\": %d, "
               "\"compute_ms\": %g, \"time_scale\": %g, \"size_scale\": %g, \"gamma\": %g, "
               "\"algorithm\": \"ring\", \"interleaved\": true},\n",
               o.ranks, o.iterations, o.warmup, o.compute_ms, o.time_scale, o.size_scale, o.gamma);
  std::fprintf(f, "\"settings\": [");
  for (std::size_t si = 0; si < all.size(); ++si) {
    const auto& s = all[si];
    std::fprintf(f, "%s\n {\"profile\": \"%s\", \"network\": \"%s\", \"ranks\": %d, ",
                 si ? "," : "", s.profile.c_str(), s.network.c_str(), s.ranks);
    std::fprintf(f,
                 "\"tensors\": %zu, \"batch\": %d, \"model_bytes\": %llu, "
                 "\"pool_bytes_per_rank\": %llu, ",
                 s.tensors, s.batch, static_cast<unsigned long long>(s.model_bytes),
                 static_cast<unsigned long long>(s.pool_bytes_per_rank));
    json_num(f, "alpha_us", s.link.alpha_us);
    json_num(f, "beta_us_per_byte", s.link.beta_us_per_byte);
    json_num(f, "gamma_us_per_byte", s.link.gamma_us_per_byte);
    json_num(f, "gbit_per_s", s.gbit);
    json_num(f, "time_scale", s.time_scale);
    json_num(f, "size_scale", s.size_scale);
    json_num(f, "compute_us", s.compute_us);
    json_num(f, "unscaled_compute_us", s.unscaled_compute_us);
    json_num(f, "overhead_median_us", s.overhead_median_us);
    json_num(f, "overhead_p90_us", s.overhead_p90_us);
    std::fprintf(f, "\"overhead_samples\": %zu, ", s.overhead_all_us.size());
    json_num(f, "overhead_submit_median_us", s.submit_median_us);
    json_num(f, "overhead_wake_median_us", s.wake_median_us);
    json_num(f, "fitted_startup_us", s.fitted.startup_us);
    json_num(f, "fitted_per_byte_us", s.fitted.per_byte_us);
    json_num(f, "autotune_startup_us", s.autotune_cost ? s.autotune_cost->startup_us : NAN);
    json_num(f, "autotune_per_byte_us", s.autotune_cost ? s.autotune_cost->per_byte_us : NAN);
    std::fprintf(f, "\"peak_rss_bytes\": %lld, \"pool_bytes_all_ranks\": %llu, ",
                 static_cast<long long>(s.peak_rss_kib) * 1024,
                 static_cast<unsigned long long>(s.pool_bytes_per_rank) *
                     static_cast<unsigned>(s.ranks));
    std::fprintf(f, "\"wrong\": %lld, ", s.wrong);
    json_num(f, "wall_s", s.wall_s);
    json_num(f, "backward_late_us", s.backward_late_us);
    std::fprintf(f, "\"planners\": [");
    for (std::size_t j = 0; j < s.planners.size(); ++j) {
      const auto& p = s.planners[j];
      std::fprintf(f,
                   "%s\n  {\"name\": \"%s\", \"buckets\": %zu, \"dispatch_delays_dropped\": %s, ",
                   j ? "," : "", p.name.c_str(), p.buckets, p.had_delays ? "true" : "false");
      json_num(f, "measured_us", p.measured_us);
      json_num(f, "noise_iqr_pct", p.noise_pct);
      json_num(f, "sim_us", p.sim_us);
      json_num(f, "error_pct", p.error_pct);
      json_num(f, "nonoverlap_measured_us", p.nonoverlap_measured_us);
      json_num(f, "nonoverlap_sim_us", p.nonoverlap_sim_us);
      json_num(f, "compute_measured_us", p.compute_measured_us);
      json_num(f, "compute_sim_us", p.sim_compute_us);
      json_num(f, "sim_fit_us", p.sim_fit_us);
      json_num(f, "sim_fit_error_pct", p.sim_fit_error_pct);
      json_num(f, "speedup_vs_layerwise", p.speedup_vs_layerwise);
      json_num(f, "speedup_vs_single", p.speedup_vs_single);
      json_num(f, "sim_speedup_vs_layerwise", p.sim_speedup_vs_layerwise);
      json_num(f, "sim_speedup_vs_single", p.sim_speedup_vs_single);
      json_num(f, "overhead_median_us", p.overhead_median_us);
      std::fprintf(f, "\"overhead_samples\": %zu, ", p.overhead_samples);
      json_array(f, "iteration_us", p.iteration_us);
      json_array(f, "nonoverlap_us", p.nonoverlap_us);
      std::fprintf(f, "\"_\": 0}");
    }
    std::fprintf(f, "\n ]}");
  }
  std::fprintf(f, "\n]\n}\n");
  return std::fclose(f) == 0;
}

} // namespace

int main(int argc, char** argv) {
  const options o = parse(argc, argv);
  const double gamma = o.gamma >= 0 ? o.gamma : measure_gamma_us_per_byte();
  const wakeup_baseline wake = measure_wakeup();
  std::printf("# train_sim: %d ranks (threads + shaped<>), ring allreduce on the overlap "
              "scheduler, planners %zu, host %u cores\n",
              o.ranks, o.planners.size(), std::thread::hardware_concurrency());
  std::printf("# host: condition-variable wake-up of a sleeping thread median %.1f us, p90 %.1f "
              "us (floor of the scheduler's dispatch); reduction %.3g us/B\n",
              wake.median_us, wake.p90_us, gamma);
  std::vector<setting_result> all;
  bool traced = false;
  try {
    for (const auto& p : o.profiles)
      for (const auto& n : o.networks) {
        const bool trace = !o.trace.empty() && !traced;
        traced = traced || trace;
        all.push_back(run_setting(o, p, n, gamma, trace));
        print_setting(all.back(), o);
        std::fflush(stdout);
      }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_sim: %s\n", e.what());
    return 1;
  }
  if (!o.json.empty() && !write_json(o, all, wake)) {
    std::fprintf(stderr, "train_sim: cannot write %s\n", o.json.c_str());
    return 1;
  }
  long long wrong = 0;
  for (const auto& s : all) wrong += s.wrong;
  return wrong ? 3 : 0;
}
