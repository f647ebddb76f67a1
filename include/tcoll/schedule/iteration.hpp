#pragma once
/// \file
/// The one iteration driver of the execution layer. The overlap scheduler, the hybrid
/// scheduler and the sparse-chunk adaptor each reduce a gradient pool during backward; this
/// class owns what they share, and each of them adds only the job a bucket runs:
///
///  - **readiness**: `mark_ready(i, ...)` records tensor i (range and double-mark checks,
///    the time), runs the adaptor's per-tensor work under the driver's lock, and that work
///    `satisfy`s the jobs waiting for it (a bucket's tensors, a chunk buffer's chunks);
///  - **launch in plan order**: a job whose needs are all satisfied launches once every job
///    before it has launched, so jobs start in the same order on every rank (their message
///    spaces match) whatever order the marks arrive in;
///  - **completion and timings**: `finish(wait)` waits for every launched job in order and
///    fills an `iteration_timing` (per tensor: ready; per job: ready, queued, started,
///    finished, collected);
///  - **failure**: a job that cannot launch (the transport broke, or is being destroyed)
///    fails in `finish()`, never in `mark_ready`; a tensor never marked fails `finish()`
///    with `invalid_argument` after the launched jobs were waited for, and the communicator
///    is broken so the peers stop at once instead of waiting out their timeout;
///  - **agreement**: `agree(fingerprint)` names the first rank whose plan, pool or options
///    differ from rank 0's (one small sum over ranks);
///  - **autotune**: `autotune(...)` measures the first K iterations (per tensor the gap
///    between marks, per measured job its bytes and communication time), hands them to a
///    re-plan callback (`plan::replan_with(planner)`: the execution layer never sees a
///    planner), and returns rank 0's re-plan to every rank.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "../communicator.hpp"
#include "../core/error.hpp"
#include "../plan/interface.hpp"
#include "agreement.hpp"
#include "engine.hpp"
#include "timing.hpp"

namespace tcoll {

/// What the driver knows of one job of an iteration.
struct job_shape {
  std::size_t first_tensor = 0, end_tensor = 0; ///< the tensors it covers (timings)
  std::size_t bytes = 0;                        ///< on the wire (timings, autotune samples)
  std::size_t needs = 0; ///< `satisfy` calls before it may launch (0: at the first mark)
  bool measured = true;  ///< autotune samples its communication time
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

} // namespace detail

/// The iteration driver (see the file comment) on communicator `Comm`. `owner` names the
/// adaptor in every error ("overlap_scheduler::mark_ready: ..."); `sum` is the sum over
/// ranks in place that agreement uses (`detail::sum_over_ranks` through the pool's reducer,
/// or an adaptor's own copy policy around it). `mark_ready` may be called from several
/// threads; everything else from one, between iterations unless said otherwise.
template <communicator Comm>
class iteration_driver {
public:
  using sum_function = std::function<void(std::vector<std::uint64_t>&)>;

  iteration_driver(Comm& comm, std::string owner, sum_function sum)
      : comm_(&comm), owner_(std::move(owner)), sum_(std::move(sum)) {
    timing_.begin = clock::now();
  }
  iteration_driver(const iteration_driver&) = delete;
  iteration_driver& operator=(const iteration_driver&) = delete;

  int rank() const noexcept { return comm_->rank(); }
  Comm& comm() const noexcept { return *comm_; }
  /// Iterations finished successfully.
  std::size_t iterations() const noexcept { return iterations_; }
  std::size_t job_count() const noexcept { return jobs_.size(); }
  /// Jobs of the iteration in progress launched so far.
  std::size_t launched() const {
    std::lock_guard lock(mutex_);
    return next_;
  }
  /// The last finished iteration's timings (what `finish` returned).
  const iteration_timing& last_timing() const noexcept { return last_; }

  /// Sets the jobs of the next iterations (construction, re-plan): `tensors` tensors are
  /// marked per iteration, and `jobs` launch in this order once their needs are satisfied.
  /// `algorithm` labels the timings. Between iterations only.
  void arrange(std::size_t tensors, std::vector<job_shape> jobs, std::string algorithm = {}) {
    tensors_ = tensors;
    jobs_ = std::move(jobs);
    remaining_.resize(jobs_.size());
    launch_error_.assign(jobs_.size(), nullptr);
    launched_.assign(jobs_.size(), 0);
    timing_.tensor_ready.assign(tensors, {});
    timing_.buckets.assign(jobs_.size(), {});
    timing_.algorithm = std::move(algorithm);
    backward_.assign(tensors, {});
    samples_.clear();
    reset();
  }

  /// Collective: throws `invalid_argument` on every rank when some rank's `fingerprint`
  /// differs from rank 0's, naming the first such rank ("<owner>: rank q <differs> than
  /// rank 0 ...; every rank must <rule>").
  void agree(std::uint64_t fingerprint, const char* differs, const char* rule) {
    detail::check_same_everywhere(*comm_, fingerprint, sum_, owner_.c_str(), differs, rule);
  }

  /// Tensor `i` holds its final gradient. Under the driver's lock: checks `i` (out of range,
  /// already marked this iteration: `invalid_argument` from "<owner>::<call>"), records the
  /// time, calls `on_ready(i)` (the adaptor's work; it calls `satisfy` for the jobs that
  /// waited for `i`), then launches every job whose turn has come with `launch(k)`. A
  /// `launch` that throws is recorded for `finish()`; it never escapes from here.
  template <class OnReady, class Launch>
  void mark_ready(std::size_t i, const char* call, OnReady&& on_ready, Launch&& launch) {
    std::lock_guard lock(mutex_);
    const auto now = clock::now();
    if (i >= tensors_ || marked_[i])
      throw invalid_argument(owner_ + "::" + call + ": tensor " + std::to_string(i) +
                                 (i >= tensors_ ? " is out of range (the pool holds " +
                                                      std::to_string(tensors_) + " tensors)"
                                                : std::string(" was already marked ready in this "
                                                              "iteration")),
                             rank());
    on_ready(i);
    marked_[i] = 1;
    ++marked_count_;
    timing_.tensor_ready[i] = now;
    launch_due(launch);
  }

  /// One of job `k`'s needs is met (call from inside `mark_ready`'s `on_ready`).
  void satisfy(std::size_t k) {
    auto& bt = timing_.buckets[k];
    const auto now = clock::now();
    if (bt.first_ready == clock::time_point{}) bt.first_ready = now;
    if (--remaining_[k] == 0) bt.ready = now;
  }

  /// Ends the iteration: waits for every launched job in plan order with `wait(k)` (which
  /// returns the job's `detail::task::times` and throws its failure), then fills the
  /// timings. Throws the first failure in plan order (a job that could not launch counts at
  /// its place); else, if a tensor was never marked, breaks the communicator (the peers
  /// stop at once) and throws `invalid_argument` naming it. Either way the next iteration
  /// starts afresh. On success returns the timings (kept until the next `finish`).
  template <class Wait>
  const iteration_timing& finish(Wait&& wait) {
    std::size_t unmarked = tensors_;
    {
      std::lock_guard lock(mutex_);
      for (std::size_t i = 0; i < tensors_; ++i)
        if (!marked_[i]) {
          unmarked = i;
          break;
        }
    }
    std::exception_ptr first_error;
    for (std::size_t k = 0; k < jobs_.size(); ++k) {
      auto& bt = timing_.buckets[k];
      if (launched_[k]) {
        try {
          const detail::task::times ts = wait(k);
          bt.queued = ts.queued;
          bt.started = ts.started;
          bt.finished = ts.finished;
        } catch (...) {
          if (!first_error) first_error = std::current_exception();
        }
        bt.collected = clock::now();
      } else if (launch_error_[k] && !first_error) {
        first_error = launch_error_[k];
      }
    }
    timing_.end = clock::now();
    if (!first_error && unmarked < tensors_) {
      first_error = std::make_exception_ptr(invalid_argument(
          owner_ + "::finish: tensor " + std::to_string(unmarked) + " was never marked ready (" +
              std::to_string(tensors_ - marked_count_) +
              " unmarked); the jobs not started are left as they are and the transport is "
              "broken so the other ranks stop",
          rank()));
      detail::fail_communicator(*comm_, first_error);
    }
    if (first_error) {
      reset();
      std::rethrow_exception(first_error);
    }
    std::swap(last_, timing_); // both keep their capacity: no allocation per iteration
    timing_.algorithm = last_.algorithm;
    timing_.tensor_ready.resize(last_.tensor_ready.size());
    timing_.buckets.resize(last_.buckets.size());
    timing_.end = last_.end;
    reset();
    ++iterations_;
    return last_;
  }

  /// Autotune, after a successful `finish`: adds the finished iteration's measurements
  /// (the backward gap of every tensor, the communication time of every measured job);
  /// after the `iterations`-th, builds the measured workload (`tensor_bytes` per tensor, the
  /// median gaps), calls `replan`, and returns rank 0's plan on every rank (the caller
  /// re-arranges its jobs with it). nullopt otherwise, and after the re-plan.
  std::optional<plan::bucket_plan> autotune(std::size_t iterations,
                                            const plan::replan_function& replan,
                                            const std::vector<std::uint64_t>& tensor_bytes) {
    if (iterations == 0 || fitted_) return std::nullopt;
    for (const auto& bt : last_.buckets)
      if (jobs_[bt.bucket].measured && bt.finished > bt.started)
        samples_.push_back(
            {static_cast<double>(bt.bytes),
             std::chrono::duration<double, std::micro>(bt.finished - bt.started).count()});
    detail::record_backward_intervals(backward_, last_.tensor_ready, last_.begin);
    if (iterations_ < iterations) return std::nullopt;
    plan::measured_iterations m;
    m.work.bytes = tensor_bytes;
    for (std::size_t i = 0; i < backward_.size(); ++i)
      m.work.backward_us.push_back(detail::median_us(backward_[i]));
    m.comm = samples_;
    plan::replan_result mine = replan(m);
    fitted_ = mine.cost;
    // every rank adopts rank 0's buckets: one sum over ranks of [count, ends...]
    std::vector<std::uint64_t> v(tensors_ + 1, 0);
    if (rank() == 0) {
      v[0] = mine.plan.ends.size();
      for (std::size_t k = 0; k < mine.plan.ends.size() && k < tensors_; ++k)
        v[k + 1] = mine.plan.ends[k];
    }
    sum_(v);
    plan::bucket_plan agreed;
    for (std::size_t k = 0; k < v[0]; ++k)
      agreed.ends.push_back(static_cast<std::size_t>(v[k + 1]));
    return agreed;
  }
  /// The cost line autotune's re-plan was made with (nullopt before it).
  std::optional<plan::linear_cost> fitted_cost() const { return fitted_; }

private:
  template <class Launch>
  void launch_due(Launch& launch) {
    while (next_ < jobs_.size() && remaining_[next_] == 0) {
      const std::size_t k = next_++;
      try {
        launch(k);
        launched_[k] = 1;
      } catch (...) {
        launch_error_[k] = std::current_exception();
      }
    }
  }

  void reset() {
    marked_.assign(tensors_, 0);
    marked_count_ = 0;
    next_ = 0;
    for (std::size_t k = 0; k < jobs_.size(); ++k) {
      remaining_[k] = jobs_[k].needs;
      launched_[k] = 0;
      launch_error_[k] = nullptr;
      auto& bt = timing_.buckets[k];
      bt = bucket_timing{};
      bt.bucket = k;
      bt.first_tensor = jobs_[k].first_tensor;
      bt.end_tensor = jobs_[k].end_tensor;
      bt.bytes = jobs_[k].bytes;
    }
    timing_.begin = timing_.end != clock::time_point{} ? timing_.end : clock::now();
    std::fill(timing_.tensor_ready.begin(), timing_.tensor_ready.end(), clock::time_point{});
  }

  Comm* comm_;
  std::string owner_;
  sum_function sum_;
  std::size_t tensors_ = 0;
  std::vector<job_shape> jobs_;
  std::vector<std::size_t> remaining_;
  std::vector<unsigned char> marked_, launched_;
  std::vector<std::exception_ptr> launch_error_;
  std::size_t marked_count_ = 0, next_ = 0, iterations_ = 0;
  mutable std::mutex mutex_;
  iteration_timing timing_; // the iteration in progress
  iteration_timing last_;   // the last finished one
  std::vector<plan::sample> samples_;
  std::vector<std::vector<double>> backward_;
  std::optional<plan::linear_cost> fitted_;
};

} // namespace tcoll
