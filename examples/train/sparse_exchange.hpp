#pragma once
/// \file
/// Sparse gradient exchange for the training app (`--scheme csc`, `topk`, `dgc`; the schemes
/// and their knobs are the registry's, compress/registry.hpp):
///
///  - `csc_exchange`: GradientFlow's coarse-grained sparse communication
///    (`tcoll::sparse::csc_allreduce`). Backward writes into a `tcoll::gradient_pool`; each
///    step only the important chunks of the pool are averaged across ranks (lazy buffers
///    through `iallreduce`, overlapping the rest of backward), the others stay on the rank
///    as a residual. The scheme owns the update: `csc_momentum_step` (Algorithm 1 lines
///    12-17) moves only the weights of the communicated chunks and freezes the momentum of
///    the others, so the optimiser's dense step is not used.
///  - `topk_exchange`: the fine-grained baseline and DGC (`tcoll::sparse::topk_pool_allreduce`,
///    the library's adaptor that tcoll_torch's DDP runs too): every rank adds its residual,
///    keeps its own k largest-magnitude elements, the ranks allgather (index, value) pairs
///    and every rank sums them into a dense gradient, which the optimiser's ordinary dense
///    momentum step applies. `--scheme dgc` is DGC's momentum correction with masking
///    (velocity and accumulation per rank, the accumulation's top k sent and cleared with
///    its velocity) and plain SGD steps; its dense warm-up step sends velocity +
///    accumulation unmasked (masking everything would stop all momentum), which is
///    momentum SGD exactly.
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
#include <tcoll/compress/adaptor_options.hpp>
#include <tcoll/schedule.hpp>
#include <tcoll/sparse.hpp>
#include <tcoll/tcoll.hpp>
#include <vector>

#include "exchange.hpp"
#include "mlp.hpp"

namespace train {

/// The sparse schemes' knobs (`--density`, `--chunk`, `--warmup`, `--residual`) are the
/// registry's (`tcoll::compression_options`, compress/registry.hpp) at the app's defaults
/// (`app_sparse_defaults`; reasons in docs/train.md, "Sparse gradient exchange"); the
/// momentum of `momentum_scaled` residuals and of DGC is the optimiser's (`--momentum`).
inline tcoll::compression_options app_sparse_defaults() {
  tcoll::compression_options o;
  o.density = 0.15;
  // The MLP's pool is 535,818 floats, so GradientFlow's 32,000 would give 17 chunks; 1,000
  // gives 536, the order of GradientFlow's 797-1,903.
  o.chunk_elements = 1000;
  o.warmup_iterations = 30;
  o.residual = tcoll::sparse::residual_rule::momentum_scaled; // Algorithm 1
  return o;
}

/// `x` as the shortest decimal that reads back the same (0.15, not 0.150000).
inline std::string shortest_decimal(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%.15g", x);
  return text;
}

/// GradientFlow CSC over the model's gradient pool (see the file comment).
template <class Comm, class Algo>
class csc_exchange final : public gradient_exchange {
public:
  /// Collective: every rank constructs it at the same time (the adaptor checks that the
  /// pools and options agree across ranks).
  csc_exchange(Comm& comm, mlp& model, const Algo& algo, const tcoll::compression_options& o,
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
           " chunks) after a " + std::to_string(options_.warmup_iterations) +
           "-step warm-up, residual " + tcoll::sparse::to_string(options_.residual) +
           "; last step: " + std::to_string(last.important_chunks) + " chunks in " +
           std::to_string(last.buffers) + " buffers, " + std::to_string(last.bytes_sent()) +
           " bytes sent (dense: " + std::to_string(last.dense_bytes_sent) + ")";
  }

private:
  static tcoll::sparse::csc_options adaptor_options(tcoll::compression_options o,
                                                    const sgd_config& sgd) {
    o.momentum = sgd.momentum;
    return tcoll::to_csc_options(o);
  }

  tcoll::gradient_pool<float> pool_;
  tcoll::sparse::csc_allreduce<Comm, float, tcoll::avg_op, Algo> csc_;
  std::vector<float> history_; ///< hu of Algorithm 1, laid out like the pool
  tcoll::sparse::csc_sgd_options step_options_;
  tcoll::compression_options options_;
};

/// Element-wise top-k with a residual, or DGC (`sparse::topk_pool_allreduce`, see the file
/// comment): the gradient pool is the model's gradient storage; the selection starts once
/// backward has marked every tensor. Warm-up steps at density 1 are one dense averaging
/// allreduce with `Algo`, the others a ring allgather of (index, value) pairs.
template <class Comm, class Algo>
class topk_exchange final : public gradient_exchange {
public:
  /// `scheme` is topk or dgc. Collective: every rank constructs it at the same time.
  topk_exchange(Comm& comm, mlp& model, const Algo& algo, tcoll::compression_scheme scheme,
                const tcoll::compression_options& o, const sgd_config& sgd)
      : pool_(model.gradient_tensor_sizes()),
        topk_(pool_, comm, adaptor_options(scheme, o, sgd), algo), scheme_(scheme),
        learning_rate_(sgd.learning_rate) {
    model.bind_gradients(pool_.all());
  }
  void gradient_ready(std::size_t i) override { topk_.mark_ready(i); }
  void finish_step() override { topk_.finish(); }
  /// DGC's steps are plain SGD (the momentum is in the exchanged values).
  void apply_update(mlp& model, sgd_momentum& optimiser) override {
    if (!tcoll::describe(scheme_).momentum_in_result)
      return optimiser.step(model.parameters(), model.gradients());
    const std::span<float> w = model.parameters();
    const std::span<const float> g = model.gradients();
    for (std::size_t i = 0; i < w.size(); ++i) w[i] -= learning_rate_ * g[i];
  }
  std::string describe() const override {
    const tcoll::sparse::topk_pool_options& o = topk_.options();
    return std::string(tcoll::to_string(scheme_)) + ": " + std::to_string(topk_.k()) + " of " +
           std::to_string(pool_.size()) + " elements per rank (density " +
           shortest_decimal(o.density) + ") after a " + std::to_string(o.warmup_iterations) +
           "-step warm-up" +
           (scheme_ == tcoll::compression_scheme::topk
                ? std::string(", residual ") + tcoll::sparse::to_string(o.residual)
                : std::string(", momentum correction and masking"));
  }

private:
  static tcoll::sparse::topk_pool_options adaptor_options(tcoll::compression_scheme scheme,
                                                          tcoll::compression_options o,
                                                          const sgd_config& sgd) {
    o.momentum = sgd.momentum;
    return tcoll::to_topk_pool_options(scheme, o);
  }

  tcoll::gradient_pool<float> pool_;
  tcoll::sparse::topk_pool_allreduce<Comm, float, tcoll::avg_op, std::uint32_t, Algo> topk_;
  tcoll::compression_scheme scheme_;
  float learning_rate_;
};

} // namespace train
