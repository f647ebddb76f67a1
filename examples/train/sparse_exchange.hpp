#pragma once
/// \file
/// Sparse gradient exchange for the training app (`--scheme csc`, `--scheme topk`):
///
///  - `csc_exchange`: GradientFlow's coarse-grained sparse communication
///    (`tcoll::sparse::csc_allreduce`). Backward writes into a `tcoll::gradient_pool`; each
///    step only the important chunks of the pool are averaged across ranks (lazy buffers
///    through `iallreduce`, overlapping the rest of backward), the others stay on the rank
///    as a residual. The scheme owns the update: `csc_momentum_step` (Algorithm 1 lines
///    12-17) moves only the weights of the communicated chunks and freezes the momentum of
///    the others, so the optimiser's dense step is not used.
///  - `topk_exchange`: the fine-grained baseline (`tcoll::sparse::topk_allreduce`): every
///    rank adds its residual, keeps its own k largest-magnitude elements, the ranks
///    allgather (index, value) pairs and every rank sums them into a dense gradient, which
///    the optimiser's ordinary dense momentum step applies. With `--residual dgc` it is
///    DGC's momentum correction with masking (`tcoll::sparse::dgc_allreduce`: velocity and
///    accumulation per rank, the accumulation's top k sent and cleared with its velocity)
///    and plain SGD steps; its dense warm-up steps send velocity + accumulation unmasked
///    (masking everything would stop all momentum), which is momentum SGD exactly.
///
/// Both follow the same linear warm-up (`tcoll::sparse::warmup_density`: dense at step 0,
/// the target density from step `warmup` on) and the same residual rules. Every byte they
/// send goes through the transport they are given (the app passes `tcoll::counting<>`).
#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <span>
#include <stdexcept>
#include <string>
#include <tcoll/schedule.hpp>
#include <tcoll/sparse.hpp>
#include <tcoll/tcoll.hpp>
#include <vector>

#include "exchange.hpp"
#include "mlp.hpp"

namespace train {

/// Knobs shared by the sparse schemes (`--density`, `--chunk`, `--warmup`, `--residual`).
/// Defaults and their reasons: docs/train.md, "Sparse gradient exchange".
struct sparse_options {
  /// Fraction communicated after warm-up: of the chunks (csc) or of the elements (topk).
  double density = 0.15;
  /// Elements per chunk (csc only). The MLP's pool is 535,818 floats, so GradientFlow's
  /// 32,000 would give 17 chunks; 1,000 gives 536, the order of GradientFlow's 797-1,903.
  std::size_t chunk_elements = 1000;
  /// Steps of the linear ramp from dense to `density` (0: the target from the first step;
  /// csc's first step is dense regardless).
  std::size_t warmup_steps = 30;
  /// Residual of what was not sent: `momentum_scaled` (Algorithm 1: momentum * g) or
  /// `error_feedback` (g).
  tcoll::sparse::residual_rule residual = tcoll::sparse::residual_rule::momentum_scaled;
  /// topk only (`--residual dgc`): DGC's momentum correction and masking
  /// (`tcoll::sparse::dgc_allreduce`) instead of a residual rule; the optimiser then takes
  /// plain SGD steps (the momentum is inside what is sent).
  bool dgc = false;
};

/// `x` as the shortest decimal that reads back the same (0.15, not 0.150000).
inline std::string shortest_decimal(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%.15g", x);
  return text;
}

/// The command-line name of a residual rule.
inline const char* residual_name(tcoll::sparse::residual_rule r) {
  return r == tcoll::sparse::residual_rule::momentum_scaled ? "momentum" : "error_feedback";
}

/// The command-line name of the options' residual handling (`dgc` or the rule's).
inline const char* residual_label(const sparse_options& o) {
  return o.dgc ? "dgc" : residual_name(o.residual);
}

/// Parses `momentum` or `error_feedback`; throws `std::invalid_argument` naming both.
inline tcoll::sparse::residual_rule parse_residual(const std::string& name) {
  if (name == "momentum") return tcoll::sparse::residual_rule::momentum_scaled;
  if (name == "error_feedback") return tcoll::sparse::residual_rule::error_feedback;
  throw std::invalid_argument(
      "unknown residual rule '" + name +
      "' (momentum: Algorithm 1's momentum * g; error_feedback: g; dgc: topk only, DGC's "
      "momentum correction)");
}

/// GradientFlow CSC over the model's gradient pool (see the file comment).
template <class Comm, class Algo>
class csc_exchange final : public gradient_exchange {
public:
  /// Collective: every rank constructs it at the same time (the adaptor checks that the
  /// pools and options agree across ranks).
  csc_exchange(Comm& comm, mlp& model, const Algo& algo, const sparse_options& o,
               const sgd_config& sgd)
      : pool_(model.gradient_tensor_sizes()),
        csc_(pool_, comm, adaptor_options(o, sgd), tcoll::avg_op{}, algo),
        history_(pool_.size(), 0.0f), step_options_{sgd.learning_rate, sgd.momentum, true},
        options_(o) {
    model.bind_gradients(pool_.all());
  }
  void gradient_ready(std::size_t i) override { csc_.mark_ready(i); }
  void finish_step() override { csc_.finish(); }
  /// Algorithm 1 lines 12-17 on the chunks communicated in this step; the optimiser's own
  /// velocity is not used (its equivalent is `history_`: u = lr * v for a constant lr).
  void apply_update(mlp& model, sgd_momentum&) override {
    tcoll::sparse::csc_momentum_step(csc_, model.parameters(), std::span<float>(history_),
                                     step_options_);
  }
  std::string describe() const override {
    const auto& layout = csc_.chunks();
    const auto& last = csc_.last();
    return "csc: " + std::to_string(layout.count()) + " chunks of " + std::to_string(layout.chunk) +
           " elements, density " + shortest_decimal(options_.density) + " (" +
           std::to_string(tcoll::sparse::chunks_kept(options_.density, layout.count())) +
           " chunks) after a " + std::to_string(options_.warmup_steps) +
           "-step warm-up, residual " + residual_name(options_.residual) +
           "; last step: " + std::to_string(last.important_chunks) + " chunks in " +
           std::to_string(last.buffers) + " buffers, " + std::to_string(last.bytes_sent()) +
           " bytes sent (dense: " + std::to_string(last.dense_bytes_sent) + ")";
  }

private:
  static tcoll::sparse::csc_options adaptor_options(const sparse_options& o,
                                                    const sgd_config& sgd) {
    tcoll::sparse::csc_options c;
    c.chunk_elements = o.chunk_elements;
    c.density = o.density;
    c.warmup_iterations = o.warmup_steps;
    c.residual = o.residual;
    c.momentum = sgd.momentum;
    return c;
  }

  tcoll::gradient_pool<float> pool_;
  tcoll::sparse::csc_allreduce<Comm, float, tcoll::avg_op, Algo> csc_;
  std::vector<float> history_; ///< hu of Algorithm 1, laid out like the pool
  tcoll::sparse::csc_sgd_options step_options_;
  sparse_options options_;
};

/// Element-wise top-k with residuals (see the file comment). Steps whose warm-up density is
/// 1 are one dense averaging allreduce with `Algo`; the others a ring allgather of
/// (index, value) pairs, whatever `Algo` is.
template <class Comm, class Algo>
class topk_exchange final : public gradient_exchange {
public:
  topk_exchange(Comm& comm, mlp& model, const Algo& algo, const sparse_options& o,
                const sgd_config& sgd)
      : comm_(&comm), model_(&model), algo_(algo), options_(o), momentum_(sgd.momentum),
        learning_rate_(sgd.learning_rate), residual_(model.gradients().size(), 0.0f) {
    tcoll::sparse::check_density(o.density, "topk_exchange", comm.rank());
    if (o.dgc) velocity_.assign(residual_.size(), 0.0f); // residual_ is DGC's accumulation
  }
  void gradient_ready(std::size_t) override {}
  void finish_step() override {
    const std::span<float> g = model_->gradients();
    const std::size_t n = g.size();
    const double density =
        tcoll::sparse::warmup_density(options_.density, options_.warmup_steps, step_++);
    last_k_ = tcoll::sparse::topk_count(density, n);
    if (options_.dgc) return dgc_step(g);
    if (last_k_ == n) { // dense: nothing stays behind
      for (std::size_t i = 0; i < n; ++i) g[i] += residual_[i];
      std::fill(residual_.begin(), residual_.end(), 0.0f);
      tcoll::allreduce(*comm_, g, tcoll::avg_op{}, algo_);
      return;
    }
    for (std::size_t i = 0; i < n; ++i) g[i] += residual_[i];
    // residual = g off this rank's selection, 0 on it (error feedback) ...
    tcoll::sparse::topk_allreduce(*comm_, g.data(), g.data(), n, last_k_, residual_.data());
    // ... scaled like Algorithm 1 line 11 under the momentum rule
    if (options_.residual == tcoll::sparse::residual_rule::momentum_scaled)
      for (float& r : residual_) r *= momentum_;
    // the pairs of all ranks were summed in rank order, identically on every rank
    const auto ranks = static_cast<float>(comm_->size());
    for (float& x : g) x /= ranks;
  }
  /// DGC's steps are plain SGD (the momentum is in the exchanged values).
  void apply_update(mlp& model, sgd_momentum& optimiser) override {
    if (!options_.dgc) return optimiser.step(model.parameters(), model.gradients());
    const std::span<float> w = model.parameters();
    const std::span<const float> g = model.gradients();
    for (std::size_t i = 0; i < w.size(); ++i) w[i] -= learning_rate_ * g[i];
  }
  std::string describe() const override {
    return "topk: " +
           std::to_string(tcoll::sparse::topk_count(options_.density, residual_.size())) + " of " +
           std::to_string(residual_.size()) + " elements per rank (density " +
           shortest_decimal(options_.density) + ") after a " +
           std::to_string(options_.warmup_steps) + "-step warm-up, residual " +
           residual_label(options_);
  }

private:
  void dgc_step(std::span<float> g) {
    const std::size_t n = g.size();
    if (last_k_ == n) { // dense warm-up: velocity + accumulation, nothing masked
      for (std::size_t i = 0; i < n; ++i) {
        velocity_[i] = momentum_ * velocity_[i] + g[i];
        g[i] = residual_[i] + velocity_[i];
      }
      std::fill(residual_.begin(), residual_.end(), 0.0f);
      tcoll::allreduce(*comm_, g, tcoll::avg_op{}, algo_);
      return;
    }
    tcoll::sparse::dgc_allreduce(*comm_, g.data(), g.data(), n, last_k_, velocity_.data(),
                                 residual_.data(), momentum_);
    const auto ranks = static_cast<float>(comm_->size());
    for (float& x : g) x /= ranks;
  }

  Comm* comm_;
  mlp* model_;
  Algo algo_;
  sparse_options options_;
  float momentum_, learning_rate_;
  std::vector<float> residual_; ///< the residual, or with DGC the accumulation v
  std::vector<float> velocity_; ///< DGC's velocity u (empty without DGC)
  std::size_t step_ = 0, last_k_ = 0;
};

} // namespace train
