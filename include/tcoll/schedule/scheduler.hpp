#pragma once
/// \file
/// The overlap scheduler (MG-WFBP Algorithm 2, PyTorch DDP's reducer, Poseidon's wait-free
/// backpropagation): the backward pass writes each gradient into its tensor of a
/// `gradient_pool` and calls `mark_ready(i)`; a bucket of the plan starts its allreduce, in
/// place on its contiguous range of the pool, as soon as all of its tensors are ready and
/// every bucket before it has started (buckets start in plan order on every rank, so their
/// message spaces match), on the transport's communication engine while backward goes on.
/// `finish()` waits for the last bucket and returns the iteration's timings.
///
/// Choices where the papers leave room (see docs/schedule.md):
///  - Buckets run one at a time on the engine thread (MG-WFBP's single communication
///    thread, Horovod's background thread); a bucket waits in the engine's queue while the
///    previous one runs.
///  - A plan's `dispatch_delay_us` (OSF's fusion-buffer wait) is ignored in execution:
///    a bucket starts when ready. The simulator models it; here it would only add latency.
///  - Every bucket's steps are recorded once per plan and replayed with one workspace
///    shared by all buckets (they never run at the same time), so an iteration allocates
///    nothing after the first on transports (hierarchical buckets allocate their pipeline
///    bookkeeping per call).
///  - Autotune measures the bucket times of the first K iterations and the backward time of
///    each tensor (the gaps between ready marks), and hands them to a re-plan callback
///    (`plan::replan_with(planner)` fits a cost line and runs the planner); every rank
///    adopts rank 0's plan. The iteration itself (readiness, launch in plan order,
///    completion, failure, agreement, autotune) is the execution layer's one driver,
///    `iteration_driver` (iteration.hpp); a bucket's job is what this class adds.
///  - Mixed precision (`Wire` = half or bfloat16 on a float pool, GradientFlow Sec. 2.5):
///    a bucket is cast into a wire buffer (one, as large as the largest bucket, shared by
///    all buckets since they run one at a time), reduced there in place and cast back into
///    the pool, exactly like `allreduce_mixed` on that range.
#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "../collectives.hpp"
#include "../communicator.hpp"
#include "../plan/interface.hpp"
#include "../reduce/convert.hpp"
#include "agreement.hpp"
#include "engine.hpp"
#include "gradient_pool.hpp"
#include "iteration.hpp"
#include "prepared.hpp"
#include "timing.hpp"

namespace tcoll {

/// Knobs of the overlap scheduler.
struct scheduler_options {
  /// Exchange a hash of the plan (and of the pool's shape) at construction and after every
  /// re-plan, throwing a clear error naming the first rank that differs from rank 0
  /// instead of deadlocking. One small allreduce; leave on.
  bool check_plan = true;
  /// Autotune: measure this many iterations, then re-plan with `autotune_replan` (0: off).
  std::size_t autotune_iterations = 0;
  /// How autotune re-plans: `plan::replan_with(planner)` (tcoll/plan/replan.hpp); required
  /// when `autotune_iterations` is set.
  plan::replan_function autotune_replan{};
  /// Mixed-precision wire only (`Wire` differs from the pool's type): gradients are
  /// multiplied by this before the cast to the wire type and divided by it after (a power
  /// of two is exact; raise it to keep small gradients out of half's subnormal range).
  float wire_scale = 1.0f;
};

namespace detail {

template <class Algo>
std::string algorithm_label(const Algo&) {
  if constexpr (requires { Algo::name; })
    return std::string(Algo::name);
  else
    return "hierarchical";
}

/// Throws `invalid_argument` when autotune is asked for without a re-plan callback.
inline void check_autotune(std::size_t iterations, const plan::replan_function& replan,
                           const char* who, int rank) {
  if (iterations && !replan)
    throw invalid_argument(std::string(who) +
                               ": options.autotune_iterations is set but options.autotune_replan "
                               "is empty; pass plan::replan_with(planner) (tcoll/plan/replan.hpp)",
                           rank);
}

} // namespace detail

/// The overlap scheduler (see the file comment). `Comm` is any communicator (a transport or
/// a `hierarchical<Intra, Inter>`); `Algo` its allreduce algorithm (`automatic`, `ring`,
/// `multi_ring`, `passthrough`, ..., or `hierarchical_options<...>` on a hierarchy).
/// `mark_ready` may be called from several threads; `finish` from one. `Wire` is the type
/// on the wire: `T` (default), or half / bfloat16 for a float pool (mixed precision, see
/// the file comment and `mixed_precision_scheduler`).
template <class Comm, class T, class Op = sum_op, class Algo = detail::default_algorithm_t<Comm>,
          reducer R = cpu_reducer, class Wire = T>
class overlap_scheduler {
  static constexpr bool mixed = !std::is_same_v<Wire, T>;
  static_assert(!mixed || (std::is_same_v<T, float> && is_reduced_precision_v<Wire>),
                "tcoll: a mixed-precision wire is half or bfloat16 over a float pool");

public:
  overlap_scheduler(gradient_pool<T, R>& pool, Comm& comm, plan::bucket_plan plan,
                    const Op& op = {}, const Algo& algo = {}, scheduler_options options = {})
      : pool_(&pool), comm_(&comm), op_(op), algo_(algo), options_(std::move(options)),
        driver_(comm, "overlap_scheduler", [this](std::vector<std::uint64_t>& v) {
          detail::sum_over_ranks(*comm_, pool_->reducer(), v);
        }) {
    detail::check_support<R, Op, Wire>();
    if (mixed && (!(options_.wire_scale > 0.0f) || !std::isfinite(options_.wire_scale)))
      throw invalid_argument("overlap_scheduler: options.wire_scale must be a positive finite "
                             "number, got " +
                                 std::to_string(options_.wire_scale),
                             comm.rank());
    detail::check_autotune(options_.autotune_iterations, options_.autotune_replan,
                           "overlap_scheduler", comm.rank());
    engine_ = &detail::engine_of(comm);
    adopt(std::move(plan));
  }
  overlap_scheduler(const overlap_scheduler&) = delete;
  overlap_scheduler& operator=(const overlap_scheduler&) = delete;
  /// Waits for buckets still running (their buffers are the pool's).
  ~overlap_scheduler() {
    for (auto& b : buckets_)
      if (b.task && b.submitted) b.task->wait();
  }

  int rank() const noexcept { return comm_->rank(); }
  const plan::bucket_plan& plan() const noexcept { return plan_; }
  std::size_t iterations() const noexcept { return driver_.iterations(); }
  /// The last finished iteration's timings (what `finish()` returned).
  const iteration_timing& last_timing() const noexcept { return driver_.last_timing(); }

  /// Tensor `i` of the pool holds its final gradient: may start its bucket's allreduce.
  /// Throws `invalid_argument` for a tensor out of range or already marked this iteration;
  /// communication errors (a broken transport included) surface from `finish()`.
  void mark_ready(std::size_t i) {
    driver_.mark_ready(
        i, "mark_ready", [&](std::size_t t) { driver_.satisfy(bucket_of_[t]); },
        [&](std::size_t k) { start(k); });
  }

  /// Waits for every bucket (each bounded by the transport's timeout) and returns the
  /// iteration's timings; the pool then holds the reduced gradients. If a tensor was never
  /// marked, the started buckets are waited for, the transport is broken (so the peers
  /// fail at once instead of waiting out their timeout), the unsent buckets are left
  /// untouched, and `invalid_argument` names the first unmarked tensor. A failed bucket
  /// rethrows its cause.
  const iteration_timing& finish() {
    const iteration_timing& t = driver_.finish([&](std::size_t k) {
      auto& task = *buckets_[k].task;
      task.wait();
      if (auto e = task.error()) std::rethrow_exception(e);
      return task.timestamps();
    });
    if (auto next =
            driver_.autotune(options_.autotune_iterations, options_.autotune_replan, wire_bytes_)) {
      adopt(std::move(*next));
      autotuned_ = true;
    }
    return t;
  }

  /// Switches to `plan` (collective: every rank calls it between iterations, with the same
  /// plan; checked like at construction).
  void replan(plan::bucket_plan plan) { adopt(std::move(plan)); }

  /// After autotune: the cost line its re-plan was made with (nullopt before).
  std::optional<plan::linear_cost> fitted_cost() const { return driver_.fitted_cost(); }
  bool autotuned() const noexcept { return autotuned_; }

private:
  /// One bucket's allreduce, queued again every iteration.
  struct bucket_call {
    overlap_scheduler* owner = nullptr;
    std::size_t index = 0;
    void operator()(const detail::collective_tags_t<Comm>& tags) const {
      owner->run_bucket(index, tags);
    }
  };
  using bucket_task = detail::collective_task<Comm, bucket_call>;
  struct bucket {
    std::size_t first = 0, end = 0, offset = 0, count = 0;
    detail::program_for_t<Comm, Wire, Op, Algo> program;
    std::shared_ptr<bucket_task> task;
    bool submitted = false; ///< its task is (or was) on the engine: the destructor waits
  };

  void adopt(plan::bucket_plan plan) {
    const std::size_t L = pool_->tensor_count();
    if (L == 0) {
      if (!plan.ends.empty())
        throw invalid_argument("overlap_scheduler: the pool holds no tensors but the plan has " +
                                   std::to_string(plan.ends.size()) + " buckets",
                               rank());
    } else if (!plan::is_valid(plan, L)) {
      throw invalid_argument("overlap_scheduler: the plan does not partition the pool's " +
                                 std::to_string(L) +
                                 " tensors into non-empty contiguous buckets in order",
                             rank());
    }
    if (options_.check_plan) check_same_plan(plan);
    plan_ = std::move(plan);
    buckets_.clear();
    bucket_of_.assign(L, 0);
    wire_bytes_.assign(L, 0);
    for (std::size_t i = 0; i < L; ++i) wire_bytes_[i] = pool_->tensor_size(i) * sizeof(Wire);
    std::vector<job_shape> jobs;
    std::size_t scratch = 0, staging = 0, largest = 0;
    for (std::size_t k = 0; k < plan_.bucket_count(); ++k) {
      bucket b;
      b.first = plan_.begin(k);
      b.end = plan_.end(k);
      b.offset = pool_->range_offset(b.first, b.end);
      b.count = pool_->range_size(b.first, b.end);
      largest = std::max(largest, b.count);
      for (std::size_t i = b.first; i < b.end; ++i) bucket_of_[i] = k;
      b.program = {*comm_, b.count, true, algo_};
      scratch = std::max(scratch, b.program.scratch_count());
      staging = std::max(staging, b.program.staging_count());
      b.task = std::make_shared<bucket_task>(*comm_, bucket_call{this, k});
      jobs.push_back({b.first, b.end, b.count * sizeof(Wire), b.end - b.first, true});
      buckets_.push_back(std::move(b));
    }
    if constexpr (mixed)
      if (largest > wire_count_) {
        wire_ = pool_->reducer().template allocate<Wire>(largest);
        wire_count_ = largest;
      }
    if (scratch > scratch_count_) {
      scratch_ = pool_->reducer().template allocate<Wire>(scratch);
      scratch_count_ = scratch;
    }
    if (staging > staging_count_) {
      staging_ = pool_->reducer().template allocate<Wire>(staging);
      staging_count_ = staging;
    }
    driver_.arrange(L, std::move(jobs), detail::algorithm_label(algo_));
  }

  /// Queues bucket `k` on the engine. If it cannot (the transport broke, or is being
  /// destroyed), the driver reports the cause from `finish()`.
  void start(std::size_t k) {
    auto& b = buckets_[k];
    b.submitted = false;
    detail::submit_task(*engine_, b.task);
    b.submitted = true;
  }

  /// Bucket `k`'s allreduce in `tags` (on the engine thread, under the task's
  /// `guarded_on`: a failed conversion breaks the communicator too, as the peers wait).
  void run_bucket(std::size_t k, const detail::collective_tags_t<Comm>& tags) {
    auto& b = buckets_[k];
    T* const pool_data = pool_->data() + b.offset;
    R& red = pool_->reducer();
    Wire* data = nullptr;
    if constexpr (mixed) {
      data = wire_.data();
      detail::convert(red, data, pool_data, b.count, options_.wire_scale);
    } else {
      data = pool_data;
    }
    b.program.run(*comm_, tags, data, data, op_, red, scratch_.data(), scratch_count_,
                  staging_.data(), staging_count_);
    if constexpr (mixed) {
      detail::convert(red, pool_data, data, b.count, 1.0f / options_.wire_scale);
      red.synchronize();
    }
  }

  void check_same_plan(const plan::bucket_plan& plan) {
    detail::fingerprint f;
    f.add(sizeof(T)).add(mixed ? sizeof(Wire) * 256 + (std::is_same_v<Wire, half> ? 1 : 2) : 0);
    if (mixed) f.add_bits(options_.wire_scale);
    f.add(pool_->tensor_count());
    for (std::size_t i = 0; i < pool_->tensor_count(); ++i) f.add(pool_->tensor_size(i));
    f.add(plan.ends.size());
    for (auto e : plan.ends) f.add(e);
    f.add(options_.autotune_iterations);
    driver_.agree(f.value(), "runs a different plan or pool", "run the same plan");
  }

  gradient_pool<T, R>* pool_;
  Comm* comm_;
  Op op_;
  Algo algo_;
  scheduler_options options_;
  iteration_driver<Comm> driver_;
  detail::engine* engine_ = nullptr;
  plan::bucket_plan plan_;
  std::vector<bucket> buckets_;
  std::vector<std::size_t> bucket_of_;
  std::vector<std::uint64_t> wire_bytes_; ///< per tensor, for autotune's workload
  typename R::template buffer<Wire> scratch_{}, staging_{};
  std::size_t scratch_count_ = 0, staging_count_ = 0;
  typename R::template buffer<Wire> wire_{}; ///< mixed precision: the bucket on the wire
  std::size_t wire_count_ = 0;
  bool autotuned_ = false;
};

/// The overlap scheduler with a mixed-precision wire: a float pool whose buckets travel as
/// `Wire` (half or bfloat16), e.g. `mixed_precision_scheduler<half, thread_transport>`.
template <class Wire, class Comm, class Op = sum_op, class Algo = detail::default_algorithm_t<Comm>,
          reducer R = cpu_reducer>
using mixed_precision_scheduler = overlap_scheduler<Comm, float, Op, Algo, R, Wire>;

} // namespace tcoll
