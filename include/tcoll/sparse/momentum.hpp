#pragma once
/// \file
/// The SGD update step of GradientFlow Algorithm 1 ("Momentum SGD Correction", lines
/// 12-17) over a gradient pool and a parameter buffer of the same layout:
///
///   important chunk:  u_t = hu_t = momentum * hu_{t-1} + lr * g_t;  w_t = w_{t-1} - u_t
///   other chunks:     hu_t = hu_{t-1} (frozen), w unchanged
///
/// Sign: the paper prints `w_t = w_t + u_t`; a descent step needs a minus somewhere and the
/// paper does not say where. We subtract (`descent = true`, the default); `descent =
/// false` applies the printed `+` (for gradients that are already negated).
#include <cmath>
#include <cstddef>
#include <span>
#include <string>

#include "../core/error.hpp"
#include "../detail/memory_kind.hpp"
#include "chunk_ops.hpp"
#include "chunks.hpp"

namespace tcoll::sparse {

/// Knobs of the momentum-SGD step.
struct csc_sgd_options {
  double learning_rate = 0.01;
  /// The momentum coefficient; use the same value as `csc_options::momentum`.
  double momentum = 0.9;
  /// w -= u (true) or the paper's printed w += u (false).
  bool descent = true;
};

/// Applies the step to every important chunk (mask `important`, one entry per chunk of
/// `chunks`) of `weights` and `history` (hu), reading the reduced gradient from `grad`.
/// All three spans have `chunks.elements` elements. `rank` only labels errors.
template <class T, class Ops = host_chunk_ops>
void csc_momentum_step(std::span<const T> grad, std::span<T> weights, std::span<T> history,
                       const chunk_layout& chunks, std::span<const unsigned char> important,
                       const csc_sgd_options& options, const Ops& ops = {}, int rank = -1) {
  auto check_size = [&](std::size_t n, const char* what) {
    if (n != chunks.elements)
      throw invalid_argument(std::string("csc_momentum_step: ") + what + " has " +
                                 std::to_string(n) + " elements but the pool has " +
                                 std::to_string(chunks.elements),
                             rank);
  };
  check_size(grad.size(), "grad");
  check_size(weights.size(), "weights");
  check_size(history.size(), "history");
  if (important.size() != chunks.count())
    throw invalid_argument("csc_momentum_step: important has " + std::to_string(important.size()) +
                               " entries but the pool has " + std::to_string(chunks.count()) +
                               " chunks",
                           rank);
  if (!std::isfinite(options.learning_rate) || !std::isfinite(options.momentum))
    throw invalid_argument("csc_momentum_step: learning_rate and momentum must be finite", rank);
  // the memory must suit the policy, as csc_allreduce checks its pool (memory_kind.hpp)
  if constexpr (requires { Ops::host_memory; })
    if (chunks.elements) {
      tcoll::detail::require_memory(grad.data(), Ops::host_memory, "csc_momentum_step", "grad",
                                    rank);
      tcoll::detail::require_memory(weights.data(), Ops::host_memory, "csc_momentum_step",
                                    "weights", rank);
      tcoll::detail::require_memory(history.data(), Ops::host_memory, "csc_momentum_step",
                                    "history", rank);
    }
  // contiguous runs of important chunks are one call each
  const std::size_t C = chunks.count();
  for (std::size_t c = 0; c < C;) {
    if (!important[c]) {
      ++c;
      continue;
    }
    std::size_t e = c;
    while (e < C && important[e]) ++e;
    const std::size_t b = chunks.begin(c), n = chunks.begin(e - 1) + chunks.size(e - 1) - b;
    ops.momentum_update(weights.data() + b, history.data() + b, grad.data() + b, n,
                        options.learning_rate, options.momentum, options.descent);
    c = e;
  }
  ops.synchronize();
}

/// The step after `adaptor.finish()`: the adaptor's pool holds the reduced important
/// chunks of the last finished iteration, which are the ones updated.
template <class Adaptor, class T>
void csc_momentum_step(const Adaptor& adaptor, std::span<T> weights, std::span<T> history,
                       const csc_sgd_options& options) {
  const auto& pool = adaptor.pool();
  csc_momentum_step<T>(std::span<const T>(pool.data(), pool.size()), weights, history,
                       adaptor.chunks(), adaptor.last_important(), options, adaptor.ops(),
                       adaptor.rank());
}

} // namespace tcoll::sparse
