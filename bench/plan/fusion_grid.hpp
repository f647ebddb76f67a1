#pragma once
/// \file
/// The experiment grid of bench/plan/fusion_sim, shared with tests/plan (which checks
/// that `optimal` is never slower than another planner in any cell): the network table,
/// the compute setting per model, and the planners with the options they run with.
/// Every number here is documented in docs/planner.md.

#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "tcoll/plan.hpp"

namespace tcoll::plan::grid {

/// A network of the grid.
struct network {
  std::string_view name;
  link_params link;
};

/// Reduction cost on the accelerator: 1 / (100 GB/s) per byte.
inline constexpr double gamma_us_per_byte = 1.0e-5;

/// alpha: per-message latency seen by the allreduce; beta: 1 / line rate.
/// 10 GbE alpha is MG-WFBP's measurement (Sec. V-A: ring startup 2(N-1)alpha = 90.52,
/// 271.56, 633.64 us at N = 2, 4, 8, i.e. alpha = 45.26 us). 25 GbE alpha is half the
/// round trip implied by OSF's bandwidth-delay product (45 KB at 25 Gb/s, Sec. 4.2).
/// The InfiniBand latencies are typical MPI/NCCL small-message latencies (assumed).
inline constexpr std::array<network, 4> networks{{
    {"10GbE", {45.26, 8.0 / 10e3, gamma_us_per_byte}},
    {"25GbE", {7.2, 8.0 / 25e3, gamma_us_per_byte}},
    {"56GbIB", {2.5, 8.0 / 56e3, gamma_us_per_byte}},
    {"100GbIB", {1.5, 8.0 / 100e3, gamma_us_per_byte}},
}};

inline constexpr std::array<int, 8> rank_counts{8, 16, 32, 64, 128, 256, 512, 1024};

/// Models of the grid and the per-worker batch they run with.
struct model_setting {
  std::string_view name;
  int batch_size;
};

inline constexpr std::array<model_setting, 9> models{{
    {"resnet50", 32},
    {"resnet101", 32},
    {"resnet152", 32},
    {"vgg16", 32},
    {"vgg19", 32},
    {"alexnet", 128},
    {"googlenet", 64},
    {"bert_base", 32}, // sequence length 128
    {"gpt2_small", 8}, // sequence length 1024
}};

/// One V100-class GPU (15.7 TFLOP/s FP32) reaching half its peak.
constexpr compute_model compute_for(int batch_size) {
  return compute_model{15.7e12, 0.5, batch_size, 4};
}

/// The planners compared, by the names the table and JSON use.
inline constexpr std::array<std::string_view, 8> planner_names{
    "layerwise", "single", "threshold", "fusion_100mb", "ddp", "mgwfbp", "adafusion", "optimal"};

/// The piecewise model (OSF Eq. 18) adaFusion plans with: fitted by least squares to
/// the true cost at 1 B .. 1 GiB, threshold at the link's bandwidth-delay product.
inline piecewise_cost piecewise_fit_of(const allreduce_cost& truth) {
  std::vector<sample> samples;
  for (int e = 0; e <= 30; ++e) {
    const double bytes = static_cast<double>(1ull << e);
    samples.push_back({bytes, truth(bytes)});
  }
  return fit_piecewise(samples, bandwidth_delay_product_bytes(truth.machine.inter));
}

/// Plan `workload` with the named grid planner. All planners see the true cost model
/// except adaFusion, which sees its piecewise fit, as in OSF.
inline bucket_plan plan_with(std::string_view planner, const workload& w,
                             const allreduce_cost& truth) {
  if (planner == "layerwise") return layerwise_planner{}.plan(w, truth);
  if (planner == "single") return single_planner{}.plan(w, truth);
  if (planner == "threshold") return threshold_planner{}.plan(w, truth); // Horovod 0.20 defaults
  if (planner == "fusion_100mb") {
    threshold_options o;
    o.threshold_bytes = 100'000'000; // OSF Fig. 11 constant buffer, Horovod 5 ms cycle
    return threshold_planner{o}.plan(w, truth);
  }
  if (planner == "ddp") return ddp_planner{}.plan(w, truth);
  if (planner == "mgwfbp") return mgwfbp_planner{}.plan(w, truth);
  if (planner == "adafusion") return adafusion_planner{}.plan(w, piecewise_fit_of(truth));
  return optimal_planner{}.plan(w, truth);
}

/// The ring allreduce over `ranks` ranks of `net`: the simulator's ground truth.
constexpr allreduce_cost truth_for(const network& net, int ranks) {
  return flat_allreduce(tcoll::algorithm_id::ring, ranks, net.link);
}

} // namespace tcoll::plan::grid
