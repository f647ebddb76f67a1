#pragma once
/// \file
/// `--scheme hybrid`: Poseidon's hybrid communication (Sec. 3.2) with `tcoll::hybrid`.
/// At plan time (construction) every weight layer is given a scheme by
/// `tcoll::hybrid::best_scheme` (tcoll's alpha-beta comparison of a dense ring allreduce
/// of the M x N gradient against `sfb_allreduce`'s ring allgathers of the K x M and K x N
/// factors, K = samples per rank, plus the reconstruction's (P-1) K M N multiply-adds beyond
/// dense: backward skips the K M N of an SFB layer's dense gradient); biases always go dense.
/// The multiply-add cost is `hybrid_config::gemm_us_per_multiply_add`, or, when negative,
/// measured at plan time by `tcoll::hybrid::calibrate_gemm_us` on the largest weight layer's
/// reconstruction (P K x M x N, `eigen_gemm`), every rank at once, the slowest rank's figure
/// agreed by all. Every rank computes the same plan from the same shapes, link parameters and
/// agreed GEMM cost.
///
/// Two ways to run that plan (`hybrid_config::overlap`):
///  - overlapped (default, `--overlap layerwise`): Poseidon's Algorithm 2 with
///    `tcoll::hybrid::hybrid_scheduler`. Backward writes into a `tcoll::gradient_pool`; as
///    soon as a tensor's gradient exists its own sync job starts on tcoll's communication
///    thread: a dense tensor's `iallreduce(avg)` in place in the pool, an SFB layer's
///    `isfb_allreduce(avg)` of its factors (`mlp::current_factors`: inputs are the u's,
///    output errors the v's, copied by the scheduler and padded with zero rows to
///    K = ceil(global batch / ranks) on every rank, since `sfb_allreduce` needs equal K).
///    `finish_step` waits and reconstructs the SFB gradients with `eigen_gemm`.
///  - after backward (`--overlap none`): the same jobs one at a time, blocking, in backward
///    order once backward is done; bytes are then counted per job.
/// Either way each run of consecutive dense tensors is one allreduce (`fuse_dense`, default;
/// `--fuse-dense 0` for one per tensor), the same runs in both, so both give the same bits.
/// Overlapped, `--overlap PLANNER` (any of tcoll's fusion planners but `layerwise`) groups
/// the dense tensors by that planner's buckets instead (`hybrid_config::planner`), re-planned
/// from measurements after `--autotune N` steps.
/// Backward computes only the factors of an SFB layer, as Poseidon does: at plan time the
/// exchange marks each SFB layer with `mlp::set_weight_gradient_from_factors`, so backward
/// skips its dense M x N weight-gradient GEMM (the bias gradient and the error sent on to the
/// layer below are still computed) and leaves that tensor of the gradients (the pool's when
/// overlapped, else the mlp's own buffer) unwritten, holding the previous step's
/// reconstruction (zeros before the first step). Nothing reads it before the reconstruction
/// overwrites all M x N elements: the SFB job passes it to `(i)sfb_allreduce` only as the
/// output, whose GEMM (`eigen_gemm`, `G = U^T V`) assigns every element; no dense job's range
/// covers it (a fused run of dense tensors stops at an SFB tensor); the optimiser reads the
/// gradients only after `finish_step`, and nothing else in the app reads them (the statistics and
/// the replica hash read losses and parameters; the bytes come from the counting transport). Every
/// step checks that backward wrote exactly the dense-planned weight gradients
/// (`mlp::dense_weight_gradients_written`).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <tcoll/hybrid.hpp>
#include <tcoll/hybrid/calibrate_gemm.hpp>
#include <tcoll/hybrid/eigen_gemm.hpp>
#include <tcoll/tcoll.hpp>
#include <vector>

#include "exchange.hpp"
#include "mlp.hpp"

namespace train {

/// Link parameters the plan is made for.
struct hybrid_config {
  std::size_t global_batch = 64;
  double link_gbit = 10.0;   ///< bandwidth of the modelled link
  double link_alpha_us = 20; ///< latency of one message on it
  /// Start each tensor's job during backward (Poseidon Algorithm 2) instead of after it.
  bool overlap = true;
  /// Cost of one reconstruction multiply-add in the plan (us); negative: measure it at plan
  /// time (`calibrate_gemm_us`); 0: ignore it, as Poseidon's "often negligible".
  double gemm_us_per_multiply_add = -1;
  /// One allreduce per run of consecutive dense tensors (`hybrid_scheduler_options::
  /// fuse_dense`, and the same runs after backward) instead of one per tensor: a plan that
  /// is all dense then makes the dense scheme's single call.
  bool fuse_dense = true;
  /// With `overlap`: a fusion planner (`tcoll::plan::planner_by_name`) whose buckets group
  /// the dense tensors (`hybrid_scheduler_options::dense_buckets`; SFB tensors split them)
  /// instead of `fuse_dense`'s runs; empty: none.
  std::string planner;
  /// With `planner`: steps measured before the scheduler re-plans the buckets with it from
  /// the measured backward times and dense jobs (`hybrid_scheduler_options::
  /// autotune_iterations`; 0: keep the first plan).
  std::size_t autotune_steps = 0;
};

/// Per-layer SFB or dense exchange, chosen at plan time (see the file comment).
template <class Comm, class Algo>
class hybrid_exchange final : public gradient_exchange {
public:
  hybrid_exchange(Comm& comm, mlp& model, const Algo& algo, const hybrid_config& c)
      : comm_(&comm), model_(&model), algo_(algo), overlap_(c.overlap),
        fuse_dense_(c.fuse_dense && c.planner.empty()), planner_(c.planner) {
    if (!planner_.empty() && !overlap_)
      throw std::invalid_argument("hybrid: a planner's buckets need the overlapped jobs");
    const int P = comm.size();
    k_pad_ = (c.global_batch + static_cast<std::size_t>(P) - 1) / static_cast<std::size_t>(P);
    tcoll::hybrid::sfb_costs costs;
    costs.machine.inter.alpha_us = c.link_alpha_us;
    costs.machine.inter.beta_us_per_byte = c.link_gbit > 0 ? 8.0 / (c.link_gbit * 1e3) : 0.0;
    costs.factor_only_backward = true; // mlp::set_weight_gradient_from_factors below
    const auto& tensors = model.tensors();
    gemm_calibrated_ = c.gemm_us_per_multiply_add < 0 && P > 1;
    if (gemm_calibrated_) { // on the largest weight layer's reconstruction
      tcoll::hybrid::gemm_calibration g;
      g.rows = static_cast<std::size_t>(P) * k_pad_;
      std::size_t largest = 0;
      for (std::size_t layer = 0; layer < model.layer_count(); ++layer) {
        const auto& t = tensors[model.weight_tensor(layer)];
        if (t.columns * t.rows > largest) {
          largest = t.columns * t.rows;
          g.M = t.columns;
          g.N = t.rows;
        }
      }
      costs.gemm_us_per_multiply_add =
          tcoll::hybrid::calibrate_gemm_us(comm, tcoll::hybrid::eigen_gemm{}, g);
    } else {
      costs.gemm_us_per_multiply_add = std::max(0.0, c.gemm_us_per_multiply_add);
    }
    gemm_us_ = costs.gemm_us_per_multiply_add;
    entries_.resize(tensors.size());
    for (std::size_t layer = 0; layer < model.layer_count(); ++layer) {
      const std::size_t w = model.weight_tensor(layer);
      const auto& t = tensors[w];
      entry& e = entries_[w];
      e.layer = layer;
      e.M = t.columns; // u = the layer's input
      e.N = t.rows;    // v = the error of its output
      const auto fc = tcoll::hybrid::layer::fc(e.M, e.N);
      e.sfb = tcoll::hybrid::best_scheme(fc, P, static_cast<int>(k_pad_), costs) ==
              tcoll::hybrid::scheme::sfb;
      e.dense_us = tcoll::hybrid::dense_cost_us(fc, P, costs);
      e.sfb_us = tcoll::hybrid::sfb_cost_us(fc, P, static_cast<int>(k_pad_), costs);
      if (e.sfb && !overlap_) {
        e.u.assign(k_pad_ * e.M, 0.0f);
        e.v.assign(k_pad_ * e.N, 0.0f);
      }
      model.set_weight_gradient_from_factors(layer, e.sfb);
      dense_weight_layers_ += !e.sfb;
    }
    dense_weight_gradients_seen_ = model.dense_weight_gradients_written();
    if (overlap_) {
      tcoll::hybrid::hybrid_plan plan;
      plan.batch = k_pad_;
      for (std::size_t i = 0; i < tensors.size(); ++i) {
        const entry& e = entries_[i];
        plan.tensors.push_back({e.sfb ? tcoll::hybrid::scheme::sfb : tcoll::hybrid::scheme::dense,
                                e.sfb ? e.M : 0, e.sfb ? e.N : 0});
      }
      pool_.emplace(model.gradient_tensor_sizes());
      model.bind_gradients(pool_->all());
      tcoll::hybrid::hybrid_scheduler_options options;
      options.fuse_dense = fuse_dense_;
      if (!planner_.empty()) {
        options.dense_buckets = planned_buckets();
        options.autotune_iterations = c.autotune_steps;
        options.autotune_replan = tcoll::plan::replan_with(*tcoll::plan::planner_by_name(planner_));
      }
      scheduler_.emplace(*pool_, comm, std::move(plan), tcoll::avg_op{}, algo,
                         tcoll::hybrid::eigen_gemm{}, options);
      bytes_mark_ = bytes_now(); // the plan check's allreduce is not a step's traffic
    }
  }

  /// Backward computes every dense weight gradient again (the model outlives the plan).
  ~hybrid_exchange() override {
    for (std::size_t layer = 0; layer < model_->layer_count(); ++layer)
      model_->set_weight_gradient_from_factors(layer, false);
  }
  hybrid_exchange(const hybrid_exchange&) = delete;
  hybrid_exchange& operator=(const hybrid_exchange&) = delete;

  void gradient_ready(std::size_t i) override {
    entry& e = entries_[i];
    if (scheduler_) {
      if (!e.sfb) return scheduler_->mark_ready(i);
      const auto& f = model_->current_factors();
      return scheduler_->mark_factors_ready(i, f.input, f.delta, f.samples);
    }
    if (!e.sfb) return;
    const auto& f = model_->current_factors();
    if (f.samples > k_pad_)
      throw tcoll::invalid_argument("hybrid: shard of " + std::to_string(f.samples) +
                                        " samples exceeds the planned K " + std::to_string(k_pad_),
                                    comm_->rank());
    std::memcpy(e.u.data(), f.input, f.samples * e.M * sizeof(float));
    std::memcpy(e.v.data(), f.delta, f.samples * e.N * sizeof(float));
    std::fill(e.u.begin() + static_cast<std::ptrdiff_t>(f.samples * e.M), e.u.end(), 0.0f);
    std::fill(e.v.begin() + static_cast<std::ptrdiff_t>(f.samples * e.N), e.v.end(), 0.0f);
  }

  void finish_step() override {
    if (scheduler_) {
      scheduler_->finish();
      // since the last step ended: the jobs post their sends during backward, before finish()
      const std::uint64_t now = bytes_now();
      total_bytes_ += now - bytes_mark_;
      bytes_mark_ = now;
      ++steps_;
      check_backward_skipped_sfb_layers();
      return;
    }
    const auto& tensors = model_->tensors();
    auto grads = model_->gradients();
    for (std::size_t i = 0, end = 0; i < tensors.size(); i = end) {
      entry& e = entries_[i];
      end = i + 1; // the runs of hybrid_scheduler's fuse_dense: the same calls, the same bits
      if (!e.sfb && fuse_dense_)
        while (end < tensors.size() && !entries_[end].sfb) {
          if (tensors[end].offset != tensors[end - 1].offset + tensors[end - 1].size())
            throw std::logic_error("hybrid: tensors " + tensors[end - 1].name + " and " +
                                   tensors[end].name + " are not adjacent in the gradients");
          ++end;
        }
      const auto before = bytes_now();
      float* g = grads.data() + tensors[i].offset;
      if (e.sfb) {
        tcoll::hybrid::sfb_allreduce(*comm_, e.u.data(), e.v.data(), k_pad_, e.M, e.N, g,
                                     tcoll::avg_op{}, tcoll::hybrid::eigen_gemm{});
      } else {
        const std::size_t count =
            tensors[end - 1].offset + tensors[end - 1].size() - tensors[i].offset;
        tcoll::allreduce(*comm_, std::span<float>(g, count), tcoll::avg_op{}, algo_);
      }
      e.bytes += bytes_now() - before;
      for (std::size_t k = i + 1; k < end; ++k) entries_[k].fused_into = i;
    }
    ++steps_;
    check_backward_skipped_sfb_layers();
  }

  /// One line per tensor: the scheme, the modelled costs and the bytes per step posted.
  std::string describe() const override {
    char gemm[96];
    std::snprintf(gemm, sizeof gemm, "GEMM %.3g us per multiply-add%s", gemm_us_,
                  gemm_calibrated_ ? " (calibrated)" : "");
    std::string out = "hybrid plan (K = " + std::to_string(k_pad_) + " per rank, " +
                      std::to_string(comm_->size()) + " ranks, " +
                      (overlap_ ? "jobs during backward" : "after backward") +
                      (!planner_.empty() ? ", dense buckets of planner " + planner_ + " (" +
                                               std::to_string(scheduler_->job_count()) + " jobs" +
                                               (scheduler_->autotuned() ? ", autotuned" : "") + ")"
                       : fuse_dense_ ? ", dense runs fused"
                                     : ", a job per tensor") +
                      ", " + gemm + "):";
    const auto& tensors = model_->tensors();
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      const entry& e = entries_[i];
      char line[256];
      const bool weight = e.M > 0;
      std::snprintf(
          line, sizeof line, "\n  %-14s %-5s %s", tensors[i].name.c_str(), e.sfb ? "sfb" : "dense",
          weight
              ? ("(model: dense " + fmt(e.dense_us) + " us, sfb " + fmt(e.sfb_us) + " us)").c_str()
              : "(bias: always dense)");
      out += line;
      if (!overlap_ && e.fused_into != no_run) // jobs overlap: bytes per step only (below)
        out += "  (fused into " + tensors[e.fused_into].name + "'s allreduce)";
      else if (!overlap_)
        out += "  bytes/step/rank " +
               fmt(steps_ ? static_cast<double>(e.bytes) / static_cast<double>(steps_) : 0.0);
    }
    if (overlap_)
      out += "\n  all tensors    bytes/step/rank " +
             fmt(steps_ ? static_cast<double>(total_bytes_) / static_cast<double>(steps_) : 0.0);
    return out;
  }

  /// Is tensor `i` exchanged as sufficient factors?
  bool is_sfb(std::size_t i) const { return entries_[i].sfb; }

private:
  struct entry {
    std::size_t layer = 0, M = 0, N = 0;
    bool sfb = false;
    double dense_us = 0, sfb_us = 0;
    std::vector<float> u, v;
    std::uint64_t bytes = 0;
    std::size_t fused_into = no_run; ///< after backward: the tensor whose allreduce carries it
  };
  static constexpr std::size_t no_run = static_cast<std::size_t>(-1);

  /// The planner's buckets over the pool's tensors, made for the bytes each job would send
  /// (a dense tensor's M N values, an SFB layer's K (M + N) factor values, per rank) with
  /// equal backward times and the dense overlap's first-guess cost (exchange.hpp): the same
  /// inputs on every rank, so the same plan.
  tcoll::plan::bucket_plan planned_buckets() const {
    const auto planner = tcoll::plan::planner_by_name(planner_);
    if (!planner) throw std::invalid_argument("hybrid: unknown planner '" + planner_ + "'");
    tcoll::plan::workload w;
    const auto& tensors = model_->tensors();
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      const entry& e = entries_[i];
      const std::size_t values = e.sfb ? k_pad_ * (e.M + e.N) : tensors[i].size();
      w.bytes.push_back(values * sizeof(float));
      w.backward_us.push_back(100.0);
    }
    return tcoll::plan::make_plan(*planner, w, overlap_options{}.initial_cost);
  }
  static std::string fmt(double us) {
    char b[32];
    std::snprintf(b, sizeof b, "%.0f", us);
    return b;
  }
  /// Backward of this step wrote one dense weight gradient per dense-planned layer and none
  /// for an SFB layer (whose GEMM the reconstruction makes redundant). Checked after the
  /// exchange, when every rank has finished the step's jobs; every rank fails alike.
  void check_backward_skipped_sfb_layers() {
    const std::uint64_t now = model_->dense_weight_gradients_written();
    const std::uint64_t written = now - dense_weight_gradients_seen_;
    dense_weight_gradients_seen_ = now;
    if (written != dense_weight_layers_)
      throw std::logic_error("hybrid: backward wrote " + std::to_string(written) +
                             " dense weight gradients this step; the plan has " +
                             std::to_string(dense_weight_layers_) +
                             " dense weight layers (SFB layers must skip theirs)");
  }
  std::uint64_t bytes_now() const {
    if constexpr (requires { comm_->counts().bytes_sent; })
      return static_cast<std::uint64_t>(comm_->counts().bytes_sent);
    else
      return 0;
  }

  Comm* comm_;
  mlp* model_;
  Algo algo_;
  std::size_t k_pad_ = 1;
  double gemm_us_ = 0;           ///< the plan's cost of one reconstruction multiply-add
  bool gemm_calibrated_ = false; ///< measured at plan time (else given)
  std::vector<entry> entries_;
  std::uint64_t steps_ = 0, total_bytes_ = 0;
  std::uint64_t bytes_mark_ = 0; ///< overlapped: the counted bytes when the last step ended
  std::uint64_t dense_weight_layers_ = 0;         ///< weight tensors planned dense
  std::uint64_t dense_weight_gradients_seen_ = 0; ///< the model's count at the last check
  bool overlap_ = true;
  bool fuse_dense_ = true;
  std::string planner_; ///< buckets of this planner for the dense tensors (empty: none)
  std::optional<tcoll::gradient_pool<float>> pool_;
  std::optional<
      tcoll::hybrid::hybrid_scheduler<Comm, float, tcoll::avg_op, Algo, tcoll::hybrid::eigen_gemm>>
      scheduler_;
};

} // namespace train
