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
///  - Autotune fits `plan::linear_cost` to the measured bucket times of the first K
///    iterations and the backward time of each tensor to the gaps between ready marks,
///    re-plans with the chosen planner, and every rank adopts rank 0's plan.
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
#include "../plan/any_planner.hpp"
#include "../plan/bucket_plan.hpp"
#include "../plan/calibrate.hpp"
#include "../reduce/convert.hpp"
#include "agreement.hpp"
#include "engine.hpp"
#include "gradient_pool.hpp"
#include "prepared.hpp"
#include "timing.hpp"

namespace tcoll {

/// Knobs of the overlap scheduler.
struct scheduler_options {
  /// Exchange a hash of the plan (and of the pool's shape) at construction and after every
  /// re-plan, throwing a clear error naming the first rank that differs from rank 0
  /// instead of deadlocking. One small allreduce; leave on.
  bool check_plan = true;
  /// Autotune: measure this many iterations, then re-plan with `autotune_planner` (0: off).
  std::size_t autotune_iterations = 0;
  plan::any_planner autotune_planner = plan::optimal_planner{};
  /// Mixed-precision wire only (`Wire` differs from the pool's type): gradients are
  /// multiplied by this before the cast to the wire type and divided by it after (a power
  /// of two is exact; raise it to keep small gradients out of half's subnormal range).
  float wire_scale = 1.0f;
};

namespace detail {

/// Autotune's backward measurement: per tensor, the time since the previous mark (the
/// iteration's `begin` for the first), appended to that tensor's samples.
inline void record_backward_intervals(std::vector<std::vector<double>>& backward,
                                      const std::vector<clock::time_point>& ready,
                                      clock::time_point begin) {
  backward.resize(ready.size());
  auto prev = begin;
  for (std::size_t i = 0; i < ready.size(); ++i) {
    backward[i].push_back(
        std::max(0.0, std::chrono::duration<double, std::micro>(ready[i] - prev).count()));
    prev = std::max(prev, ready[i]);
  }
}

/// The median of `v` (0 when empty).
inline double median_us(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

/// Autotune's cost line: a fit of the measured (bytes, us) samples, or with a single size
/// a line through the origin; both parts clamped to >= 0.
inline plan::linear_cost fit_autotune_cost(const std::vector<plan::sample>& samples) {
  plan::linear_cost cost{};
  try {
    cost = plan::fit_linear(samples);
  } catch (const std::invalid_argument&) { // one size only: a line through the origin
    double bytes = 0, us = 0;
    for (const auto& s : samples) bytes += s.bytes, us += s.time_us;
    cost = {0.0, bytes > 0 ? us / bytes : 0.0};
  }
  cost.startup_us = std::max(0.0, cost.startup_us);
  cost.per_byte_us = std::max(0.0, cost.per_byte_us);
  return cost;
}

/// Rank 0's `plan` of `tensors` tensors for every rank (one sum over ranks of [bucket
/// count, ends...], zeros elsewhere), so every rank adopts the same buckets.
template <class Comm, class R>
plan::bucket_plan rank0_plan(Comm& comm, R& red, const plan::bucket_plan& plan,
                             std::size_t tensors) {
  std::vector<std::uint64_t> v(tensors + 1, 0);
  if (comm.rank() == 0) {
    v[0] = plan.ends.size();
    for (std::size_t k = 0; k < plan.ends.size(); ++k) v[k + 1] = plan.ends[k];
  }
  sum_over_ranks(comm, red, v);
  plan::bucket_plan agreed;
  for (std::size_t k = 0; k < v[0]; ++k) agreed.ends.push_back(static_cast<std::size_t>(v[k + 1]));
  return agreed;
}

template <class Algo>
std::string algorithm_label(const Algo&) {
  if constexpr (requires { Algo::name; })
    return std::string(Algo::name);
  else
    return "hierarchical";
}

} // namespace detail

/// The overlap scheduler (see the file comment). `Comm` is a transport or a
/// `hierarchical<Intra, Inter>`; `Algo` an allreduce algorithm struct (`automatic`, `ring`,
/// `multi_ring`, `passthrough`, ...) or, for hierarchical, `hierarchical_options<...>`.
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
      : pool_(&pool), comm_(&comm), op_(op), algo_(algo), options_(std::move(options)) {
    detail::check_support<R, Op, Wire>();
    if (mixed && (!(options_.wire_scale > 0.0f) || !std::isfinite(options_.wire_scale)))
      throw invalid_argument("overlap_scheduler: options.wire_scale must be a positive finite "
                             "number, got " +
                                 std::to_string(options_.wire_scale),
                             comm.rank());
    engine_ = &detail::engine_of(comm);
    adopt(std::move(plan));
    timing_.begin = clock::now();
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
  std::size_t iterations() const noexcept { return iterations_; }
  /// The last finished iteration's timings (what `finish()` returned).
  const iteration_timing& last_timing() const noexcept { return last_; }

  /// Tensor `i` of the pool holds its final gradient: may start its bucket's allreduce.
  /// Throws `invalid_argument` for a tensor out of range or already marked this iteration;
  /// communication errors (a broken transport included) surface from `finish()`.
  void mark_ready(std::size_t i) {
    std::lock_guard lock(mutex_);
    const auto now = clock::now();
    if (i >= marked_.size())
      throw invalid_argument("overlap_scheduler::mark_ready: tensor " + std::to_string(i) +
                                 " is out of range (the pool holds " +
                                 std::to_string(marked_.size()) + " tensors)",
                             rank());
    if (marked_[i])
      throw invalid_argument("overlap_scheduler::mark_ready: tensor " + std::to_string(i) +
                                 " was already marked ready in this iteration",
                             rank());
    marked_[i] = 1;
    ++marked_count_;
    timing_.tensor_ready[i] = now;
    const std::size_t b = bucket_of_[i];
    auto& bt = timing_.buckets[b];
    if (bt.first_ready == clock::time_point{}) bt.first_ready = now;
    if (--remaining_[b] == 0) bt.ready = now;
    while (next_ < buckets_.size() && remaining_[next_] == 0) start(next_++);
  }

  /// Waits for every bucket (each bounded by the transport's timeout) and returns the
  /// iteration's timings; the pool then holds the reduced gradients. If a tensor was never
  /// marked, the started buckets are waited for, the transport is broken (so the peers
  /// fail at once instead of waiting out their timeout), the unsent buckets are left
  /// untouched, and `invalid_argument` names the first unmarked tensor. A failed bucket
  /// rethrows its cause.
  const iteration_timing& finish() {
    std::exception_ptr first_error;
    std::size_t unmarked = marked_.size();
    {
      std::lock_guard lock(mutex_);
      for (std::size_t i = 0; i < marked_.size(); ++i)
        if (!marked_[i]) {
          unmarked = i;
          break;
        }
    }
    for (auto& b : buckets_) {
      if (!b.submitted) continue;
      b.task->wait();
      b.submitted = false;
      if (auto e = b.task->error(); e && !first_error) first_error = e;
    }
    timing_.end = clock::now();
    for (std::size_t k = 0; k < buckets_.size(); ++k) {
      const auto ts = buckets_[k].task->timestamps();
      timing_.buckets[k].queued = ts.queued;
      timing_.buckets[k].started = ts.started;
      timing_.buckets[k].finished = ts.finished;
    }
    if (unmarked < marked_.size() && !first_error) {
      const auto cause = std::make_exception_ptr(invalid_argument(
          "overlap_scheduler::finish: tensor " + std::to_string(unmarked) +
              " was never marked ready (" + std::to_string(marked_.size() - marked_count_) +
              " unmarked); the buckets not started are left as they are and the transport is "
              "broken so the other ranks stop",
          rank()));
      fail(cause);
      reset_marks();
      std::rethrow_exception(cause);
    }
    std::swap(last_, timing_); // both keep their capacity: no allocation per iteration
    timing_.algorithm = last_.algorithm;
    timing_.tensor_ready.resize(last_.tensor_ready.size());
    timing_.buckets.resize(last_.buckets.size());
    timing_.end = last_.end;
    reset_marks();
    if (first_error) std::rethrow_exception(first_error);
    ++iterations_;
    if (options_.autotune_iterations) autotune_step();
    return last_;
  }

  /// Switches to `plan` (collective: every rank calls it between iterations, with the same
  /// plan; checked like at construction).
  void replan(plan::bucket_plan plan) { adopt(std::move(plan)); }

private:
  struct bucket_task final : detail::task {
    void run() override { owner->run_bucket(index, tags); }
    overlap_scheduler* owner = nullptr;
    std::size_t index = 0;
    detail::collective_tags_t<Comm> tags{};
  };
  struct bucket {
    std::size_t first = 0, end = 0, offset = 0, count = 0;
    detail::allreduce_program<Comm, Wire, Op, Algo> program;
    std::shared_ptr<bucket_task> task;
    bool submitted = false;
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
      b.task = std::make_shared<bucket_task>();
      b.task->owner = this;
      b.task->index = k;
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
    remaining_.resize(buckets_.size());
    timing_.tensor_ready.assign(L, {});
    timing_.buckets.assign(buckets_.size(), {});
    timing_.algorithm = detail::algorithm_label(algo_);
    samples_.clear();
    backward_.assign(L, {});
    reset_marks();
  }

  void reset_marks() {
    marked_.assign(pool_->tensor_count(), 0);
    marked_count_ = 0;
    next_ = 0;
    for (std::size_t k = 0; k < buckets_.size(); ++k) {
      remaining_[k] = buckets_[k].end - buckets_[k].first;
      auto& bt = timing_.buckets[k];
      bt = bucket_timing{};
      bt.bucket = k;
      bt.first_tensor = buckets_[k].first;
      bt.end_tensor = buckets_[k].end;
      bt.bytes = buckets_[k].count * sizeof(Wire); // on the wire
    }
    const auto now = clock::now();
    if (timing_.end != clock::time_point{})
      timing_.begin = timing_.end;
    else
      timing_.begin = now;
    std::fill(timing_.tensor_ready.begin(), timing_.tensor_ready.end(), clock::time_point{});
  }

  /// Queues bucket `k`. If it cannot start (the transport broke, or is being destroyed),
  /// the bucket fails without communicating and `finish()` reports the cause: a peer's
  /// failure never escapes from `mark_ready` in the middle of backward, and an iteration
  /// with a bucket not reduced never finishes as a success.
  void start(std::size_t k) {
    auto& b = buckets_[k];
    b.task->reset();
    try {
      engine_->submit([&] {
        b.task->tags = detail::begin_on(*comm_);
        return std::static_pointer_cast<detail::task>(b.task);
      });
    } catch (...) {
      b.task->mark_finished(std::current_exception());
    }
    b.submitted = true;
  }

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
    detail::throw_if_broken(*comm_);
    detail::guarded_on(*comm_, [&] {
      b.program.run(*comm_, tags, data, data, op_, red, scratch_.data(), scratch_count_,
                    staging_.data(), staging_count_);
    });
    if constexpr (mixed) {
      detail::convert(red, pool_data, data, b.count, 1.0f / options_.wire_scale);
      red.synchronize();
    }
  }

  void fail(std::exception_ptr cause) { detail::fail_communicator(*comm_, cause); }

  void check_same_plan(const plan::bucket_plan& plan) {
    detail::fingerprint f;
    f.add(sizeof(T)).add(mixed ? sizeof(Wire) * 256 + (std::is_same_v<Wire, half> ? 1 : 2) : 0);
    if (mixed) f.add_bits(options_.wire_scale);
    f.add(pool_->tensor_count());
    for (std::size_t i = 0; i < pool_->tensor_count(); ++i) f.add(pool_->tensor_size(i));
    f.add(plan.ends.size());
    for (auto e : plan.ends) f.add(e);
    f.add(options_.autotune_iterations);
    detail::check_same_everywhere(
        *comm_, f.value(),
        [&](std::vector<std::uint64_t>& v) { detail::sum_over_ranks(*comm_, pool_->reducer(), v); },
        "overlap_scheduler", "runs a different plan or pool", "run the same plan");
  }

  void autotune_step() {
    if (autotuned_) return; // measured once; no growth after the re-plan
    // measurements of this iteration
    for (const auto& bt : last_.buckets)
      samples_.push_back(
          {static_cast<double>(bt.bytes),
           std::chrono::duration<double, std::micro>(bt.finished - bt.started).count()});
    detail::record_backward_intervals(backward_, last_.tensor_ready, last_.begin);
    if (iterations_ != options_.autotune_iterations) return;
    // (the measurements above read last_, the iteration just finished)
    plan::workload w;
    for (std::size_t i = 0; i < backward_.size(); ++i) {
      w.bytes.push_back(pool_->tensor_size(i) * sizeof(Wire));
      w.backward_us.push_back(detail::median_us(backward_[i]));
    }
    const plan::linear_cost cost = detail::fit_autotune_cost(samples_);
    fitted_ = cost;
    plan::bucket_plan agreed =
        detail::rank0_plan(*comm_, pool_->reducer(),
                           plan::make_plan(options_.autotune_planner, w, cost), backward_.size());
    adopt(std::move(agreed));
    timing_.end = last_.end;
    timing_.begin = last_.end;
    autotuned_ = true;
  }

public:
  /// After autotune: the cost model it fitted (nullopt before).
  std::optional<plan::linear_cost> fitted_cost() const { return fitted_; }
  bool autotuned() const noexcept { return autotuned_; }

private:
  gradient_pool<T, R>* pool_;
  Comm* comm_;
  Op op_;
  Algo algo_;
  scheduler_options options_;
  detail::engine* engine_ = nullptr;
  plan::bucket_plan plan_;
  std::vector<bucket> buckets_;
  std::vector<std::size_t> bucket_of_, remaining_;
  std::vector<unsigned char> marked_;
  std::size_t marked_count_ = 0, next_ = 0, iterations_ = 0;
  typename R::template buffer<Wire> scratch_{}, staging_{};
  std::size_t scratch_count_ = 0, staging_count_ = 0;
  typename R::template buffer<Wire> wire_{}; ///< mixed precision: the bucket on the wire
  std::size_t wire_count_ = 0;
  std::mutex mutex_;
  iteration_timing timing_; // the iteration in progress
  iteration_timing last_;   // the last finished one
  std::vector<plan::sample> samples_;
  std::vector<std::vector<double>> backward_;
  std::optional<plan::linear_cost> fitted_;
  bool autotuned_ = false;
};

/// The overlap scheduler with a mixed-precision wire: a float pool whose buckets travel as
/// `Wire` (half or bfloat16), e.g. `mixed_precision_scheduler<half, thread_transport>`.
template <class Wire, class Comm, class Op = sum_op, class Algo = detail::default_algorithm_t<Comm>,
          reducer R = cpu_reducer>
using mixed_precision_scheduler = overlap_scheduler<Comm, float, Op, Algo, R, Wire>;

} // namespace tcoll
