#pragma once
/// \file
/// `topk_pool_allreduce`: the fine-grained baselines of `topk.hpp` (top-k with error
/// feedback, and DGC) over a whole gradient pool, run by the execution layer's iteration
/// driver like the overlap scheduler and the sparse-chunk adaptor: tensors are marked ready
/// during backward, the one job launches once every tensor is ready (the selection needs
/// the whole gradient), its allgather of (index, value) pairs runs on the transport's
/// communication engine, and `finish()` waits for it and writes the sum (or the average)
/// of every rank's selection into the pool. Readiness checks, timings, the never-marked
/// error and the agreement on pool and options are the driver's.
///
/// Per iteration t on this rank, with `k = topk_count(warmup_density(density,
/// warmup_iterations, t), pool.size())`:
///  - `topk_scheme::topk`: the residual of the last iteration is added to the gradient
///    first; the k elements of largest magnitude go out and the rest becomes the new
///    residual (`topk_allreduce`): as it is (`error_feedback`), scaled by `momentum`
///    (`momentum_scaled`, GradientFlow Algorithm 1 line 11) or dropped (`none`).
///  - `topk_scheme::dgc`: DGC's momentum correction and masking (`dgc_allreduce`): the
///    velocity and accumulation are kept here; the momentum is inside the result, so the
///    optimizer must be plain SGD (no momentum of its own).
/// Warm-up iterations whose k is the whole pool (iteration 0 of a warm-up) are one dense
/// allreduce of the pool with `Algo` instead of an allgather of every element: top-k sends
/// gradient + residual and clears the residual; DGC sends velocity + accumulation (updated
/// as usual) and clears the accumulation, masking nothing (masking everything would stop
/// all momentum), which is momentum SGD exactly.
/// Elements no rank selected are zero in the pool afterwards. Every rank ends with bitwise
/// identical results (the pairs are summed rank by rank in rank order).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "../core/error.hpp"
#include "../core/types.hpp"
#include "../schedule/agreement.hpp"
#include "../schedule/gradient_pool.hpp"
#include "../schedule/iteration.hpp"
#include "../schedule/nonblocking.hpp"
#include "chunk_ops.hpp"
#include "topk.hpp"

namespace tcoll::sparse {

/// Which fine-grained baseline `topk_pool_allreduce` runs.
enum class topk_scheme : std::uint8_t {
  topk, ///< top-k, optionally with error feedback
  dgc,  ///< DGC: momentum correction and momentum factor masking around top-k
};

/// Tuning knobs of `topk_pool_allreduce`.
struct topk_pool_options {
  topk_scheme scheme = topk_scheme::topk;
  /// Fraction of the pool's elements each rank sends (`topk_count(density, pool.size())`).
  double density = 0.01;
  /// `topk`: what becomes of the elements not sent (added to the next gradient).
  residual_rule residual = residual_rule::error_feedback;
  /// `dgc`: the momentum factor, in [0, 1); `topk` with `momentum_scaled`: the residual's
  /// scale.
  double momentum = 0.9;
  /// Iterations of the linear warm-up from dense to `density` (`warmup_density`; 0: the
  /// target from the first iteration).
  std::size_t warmup_iterations = 0;
  /// Construction compares pool shapes and options across ranks (collective).
  bool check_pool = true;
};

/// Top-k or DGC over a gradient pool (see the file comment) on transport `t`; `Op` is
/// `sum_op` or `avg_op` (the sum divided by the rank count); `Algo` runs the dense warm-up
/// iterations. `mark_ready` may be called from several threads; `finish` from one.
template <transport Tr, class T, class Op = sum_op, class Index = std::uint32_t,
          class Algo = tcoll::detail::default_algorithm_t<Tr>>
class topk_pool_allreduce {
  static_assert(
      std::is_same_v<Op, sum_op> || std::is_same_v<Op, avg_op>,
      "tcoll: topk_pool_allreduce sums the selections (sum_op) or averages them (avg_op)");
  using entry = sparse_entry<T, Index>;

public:
  /// Binds to `pool` (which must outlive the adaptor) and `t`. Collective when
  /// `options.check_pool` (the default): every rank constructs it at the same time.
  topk_pool_allreduce(gradient_pool<T>& pool, Tr& t, topk_pool_options options = {},
                      const Algo& algo = {})
      : pool_(&pool), t_(&t), options_(options), algo_(algo),
        driver_(t, "topk_pool_allreduce", [this](std::vector<std::uint64_t>& v) {
          tcoll::detail::sum_over_ranks(*t_, pool_->reducer(), v);
        }) {
    const int r = t.rank();
    check_density(options_.density, "topk_pool_allreduce: options.density", r);
    const bool uses_momentum =
        options_.scheme == topk_scheme::dgc || options_.residual == residual_rule::momentum_scaled;
    if (uses_momentum && !(options_.momentum >= 0 && options_.momentum < 1))
      throw invalid_argument("topk_pool_allreduce: options.momentum " +
                                 std::to_string(options_.momentum) + " is outside [0, 1)",
                             r);
    const std::size_t n = pool.size();
    k_ = topk_count(options_.density, n);
    detail::check_topk_args<Index>(t, pool.data(), pool.data(), n, k_, "topk_pool_allreduce");
    if (options_.scheme == topk_scheme::dgc) {
      velocity_.assign(n, T{});
      accumulation_.assign(n, T{});
    } else if (options_.residual != residual_rule::none) {
      residual_.assign(n, T{});
    }
    if (options_.check_pool) check_same_pool();
    // one job: it needs every tensor (none for an empty pool, which never launches it)
    std::vector<job_shape> jobs;
    if (pool.tensor_count())
      jobs.push_back({0, pool.tensor_count(), bytes_sent(), pool.tensor_count(), false});
    driver_.arrange(pool.tensor_count(), std::move(jobs),
                    options_.scheme == topk_scheme::dgc ? "dgc" : "topk");
  }
  topk_pool_allreduce(const topk_pool_allreduce&) = delete;
  topk_pool_allreduce& operator=(const topk_pool_allreduce&) = delete;
  /// Waits for an allgather still running (its buffers are the adaptor's).
  ~topk_pool_allreduce() { request settle = std::move(gather_); }

  int rank() const noexcept { return t_->rank(); }
  int size() const noexcept { return t_->size(); }
  const topk_pool_options& options() const noexcept { return options_; }
  /// Elements this rank sends per iteration after the warm-up.
  std::size_t k() const noexcept { return k_; }
  /// Elements this rank sent in the last started iteration (the whole pool in a dense
  /// warm-up iteration).
  std::size_t last_k() const noexcept { return last_k_; }
  /// Bytes this rank sends per iteration after the warm-up (ring allgather of its pairs).
  std::size_t bytes_sent() const noexcept {
    return static_cast<std::size_t>(size() - 1) * k_ * sizeof(entry);
  }
  /// Iterations finished.
  std::size_t iterations() const noexcept { return driver_.iterations(); }
  /// `topk` with a residual: what was not sent, laid out like the pool (empty otherwise).
  /// Writable between iterations (a caller that re-lays its pool carries it over).
  std::span<T> residual() noexcept { return residual_; }
  std::span<const T> residual() const noexcept { return residual_; }
  /// `dgc`: the velocity u and accumulation v, laid out like the pool (empty otherwise);
  /// writable between iterations.
  std::span<T> velocity() noexcept { return velocity_; }
  std::span<const T> velocity() const noexcept { return velocity_; }
  std::span<T> accumulation() noexcept { return accumulation_; }
  std::span<const T> accumulation() const noexcept { return accumulation_; }
  /// The last finished iteration's timings (per tensor: ready; the job: ready, queued,
  /// started, finished).
  const iteration_timing& last_timing() const noexcept { return driver_.last_timing(); }

  /// Tensor `i` of the pool holds its gradient; the last one launches the selection and its
  /// allgather. Throws `invalid_argument` for a tensor out of range or already marked in
  /// this iteration; communication errors surface from `finish()`.
  void mark_ready(std::size_t i) {
    driver_.mark_ready(
        i, "mark_ready", [&](std::size_t) { driver_.satisfy(0); }, [&](std::size_t) { start(); });
  }

  /// Marks every tensor ready (the whole pool was written at once).
  void mark_all_ready() {
    for (std::size_t i = 0; i < pool_->tensor_count(); ++i) mark_ready(i);
  }

  /// Waits for the allgather and writes the sum (avg: the average) of every rank's selection
  /// into the pool, zero where no rank sent anything. If a tensor was never marked, the
  /// transport is broken (the peers fail at once) and `invalid_argument` names it; a failed
  /// allgather rethrows its cause.
  const iteration_timing& finish() {
    const iteration_timing& timing = driver_.finish([&](std::size_t) {
      gather_.wait();
      return gather_.timestamps();
    });
    if (pool_->tensor_count() && !dense_) { // a dense iteration's allreduce wrote the pool
      detail::sum_gathered(all_, pool_->data(), pool_->size());
      if constexpr (std::is_same_v<Op, avg_op>) {
        using A = accumulator_t<T>;
        const A P = static_cast<A>(size());
        T* g = pool_->data();
        for (std::size_t j = 0; j < pool_->size(); ++j)
          g[j] = static_cast<T>(static_cast<A>(g[j]) / P);
      }
    }
    return timing;
  }

private:
  /// Every tensor is ready: select this rank's pairs (updating the residual, or DGC's
  /// velocity and accumulation) and queue their allgather.
  void start() {
    using A = accumulator_t<T>;
    T* g = pool_->data();
    const std::size_t n = pool_->size();
    const double density =
        warmup_density(options_.density, options_.warmup_iterations, driver_.iterations());
    last_k_ = topk_count(density, n);
    dense_ = last_k_ == n && n > 0 && options_.warmup_iterations > 0;
    const bool dgc = options_.scheme == topk_scheme::dgc;
    T* residual = dgc || residual_.empty() ? nullptr : residual_.data();
    if (dense_) { // a warm-up iteration at density 1 (see the file comment)
      const A m = static_cast<A>(options_.momentum);
      for (std::size_t j = 0; j < n; ++j) {
        if (dgc) {
          velocity_[j] = static_cast<T>(m * static_cast<A>(velocity_[j]) + static_cast<A>(g[j]));
          g[j] = static_cast<T>(static_cast<A>(accumulation_[j]) + static_cast<A>(velocity_[j]));
          accumulation_[j] = T{};
        } else if (residual) {
          g[j] = static_cast<T>(static_cast<A>(g[j]) + static_cast<A>(residual[j]));
          residual[j] = T{};
        }
      }
      gather_ = tcoll::iallreduce(*t_, g, g, n, Op{}, algo_);
      return;
    }
    if (dgc) {
      detail::select_dgc(g, n, last_k_, velocity_.data(), accumulation_.data(), options_.momentum,
                         mine_);
    } else {
      if (residual)
        for (std::size_t j = 0; j < n; ++j)
          g[j] = static_cast<T>(static_cast<A>(g[j]) + static_cast<A>(residual[j]));
      detail::select_with_residual(g, n, last_k_, residual, mine_);
      if (residual && options_.residual == residual_rule::momentum_scaled) {
        const A m = static_cast<A>(options_.momentum);
        for (std::size_t j = 0; j < n; ++j)
          residual[j] = static_cast<T>(m * static_cast<A>(residual[j]));
      }
    }
    all_.resize(last_k_ * static_cast<std::size_t>(t_->size()));
    if (last_k_) gather_ = tcoll::iallgather(*t_, mine_.data(), all_.data(), last_k_);
  }

  /// Throws on every rank when some rank's pool shape or options differ from rank 0's.
  void check_same_pool() {
    tcoll::detail::fingerprint f;
    f.add(sizeof(T)).add(sizeof(Index)).add(pool_->tensor_count()).add(pool_->size());
    for (std::size_t i = 0; i < pool_->tensor_count(); ++i)
      f.add(pool_->tensor_size(i)).add(pool_->tensor_offset(i));
    f.add(static_cast<std::uint64_t>(options_.scheme)).add_bits(options_.density);
    f.add(static_cast<std::uint64_t>(options_.residual)).add_bits(options_.momentum);
    f.add(options_.warmup_iterations);
    driver_.agree(f.value(),
                  "has a different pool (tensor sizes, alignment) or different "
                  "topk_pool_options",
                  "use the same");
  }

  gradient_pool<T>* pool_;
  Tr* t_;
  topk_pool_options options_;
  Algo algo_;
  std::size_t k_ = 0, last_k_ = 0;
  bool dense_ = false; ///< the iteration in flight is a dense warm-up allreduce
  std::vector<T> residual_, velocity_, accumulation_;
  std::vector<entry> mine_, all_;
  request gather_;
  iteration_driver<Tr> driver_;
};

} // namespace tcoll::sparse
