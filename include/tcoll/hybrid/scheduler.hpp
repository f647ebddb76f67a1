#pragma once
/// \file
/// Poseidon's Algorithm 2 (wait-free backpropagation with hybrid communication) as a
/// scheduler: the per-layer scheme is fixed at plan time (`hybrid_plan`, from
/// `best_scheme` or Poseidon's `poseidon_best_scheme`), and during backward every tensor of
/// a `gradient_pool` starts its own sync job as soon as its gradient exists:
///
///  - a dense tensor (`mark_ready(i)`): a non-blocking allreduce in place on its range of
///    the pool (`iallreduce`, any algorithm);
///  - an SFB tensor (`mark_factors_ready(i, u, v, samples)`): its K x M and K x N sufficient
///    factors are copied into buffers the scheduler owns (rows past `samples` zero, so every
///    rank passes the same K) and a non-blocking `isfb_allreduce` allgathers them while
///    backward goes on.
///
/// `finish()` waits for every job in plan order and reconstructs each SFB gradient into its
/// pool tensor (the GEMM runs on the calling thread, not on the communication engine), then
/// returns the iteration's timings. Like `overlap_scheduler`, jobs start in tensor order on
/// every rank (a job whose tensor is ready waits until every earlier job has started), so
/// their message spaces match whatever order the marks arrive in.
///
/// Choices where the paper leaves room (docs/hybrid.md):
///  - One job per tensor, as in Algorithm 2 ("one sync job per layer"). A bias is a dense
///    tensor of its own; `hybrid_scheduler_options::fuse_dense` instead fuses each run of
///    consecutive dense tensors into one allreduce (they are contiguous in the pool), which
///    saves a latency per bias on slow links; `dense_buckets` takes a fusion planner's
///    buckets instead (dense tensors fuse within a bucket, SFB tensors split buckets), so
///    any plan of tcoll's planners runs during backward here as in `overlap_scheduler`.
///  - An SFB tensor of the pool is output only: its job never reads it, and the
///    reconstruction in `finish()` overwrites every element. So backward may leave it
///    unwritten, skipping the dense weight gradient (the training app's mlp does), or write it
///    (a model that cannot skip it), with the same result.
///  - The factors are copied at `mark_factors_ready` into buffers of the pool's reducer
///    (device memory for a device reducer, so the jobs run on NCCL too), so the caller may
///    reuse its activations and errors at once (K*(M+N) elements per layer, small beside
///    M*N). `u` and `v` must be in the reducer's memory or one its `copy` reads.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "../plan/interface.hpp"
#include "../schedule/gradient_pool.hpp"
#include "../schedule/iteration.hpp"
#include "../schedule/nonblocking.hpp"
#include "../schedule/scheduler.hpp"
#include "best_scheme.hpp"
#include "sfb.hpp"

namespace tcoll::hybrid {

/// How one tensor of the pool travels, and its shape when it goes SFB.
struct tensor_scheme {
  scheme how = scheme::dense;
  std::size_t rows = 0; ///< M (length of u) for SFB; the tensor holds rows x cols elements
  std::size_t cols = 0; ///< N (length of v) for SFB
};

/// The per-tensor plan of a hybrid iteration: one entry per pool tensor (backward order)
/// and K, the factor rows every rank passes per SFB layer (its per-rank batch, padded).
struct hybrid_plan {
  std::size_t batch = 1;
  std::vector<tensor_scheme> tensors;
  /// Tensors that go SFB.
  std::size_t sfb_count() const noexcept {
    return static_cast<std::size_t>(std::count_if(tensors.begin(), tensors.end(),
                                                  [](auto& t) { return t.how == scheme::sfb; }));
  }
};

/// A plan by tcoll's cost comparison: `layers[i]` describes pool tensor i (an FC weight as
/// `layer::fc(M, N)`, a bias or anything else as `layer::dense(count)`); `batch` is K.
template <scheme_costs C = sfb_costs>
hybrid_plan make_hybrid_plan(std::span<const layer> layers, int ranks, std::size_t batch,
                             const C& costs = {}) {
  hybrid_plan p;
  p.batch = batch;
  const auto chosen =
      best_schemes(layers, ranks, static_cast<int>(std::min<std::size_t>(batch, 1u << 30)), costs);
  for (std::size_t i = 0; i < layers.size(); ++i)
    p.tensors.push_back({chosen[i], static_cast<std::size_t>(layers[i].rows),
                         static_cast<std::size_t>(layers[i].cols)});
  return p;
}

/// Knobs of `hybrid_scheduler`.
struct hybrid_scheduler_options {
  /// One allreduce per run of consecutive dense tensors instead of one per tensor.
  bool fuse_dense = false;
  /// A fusion planner's buckets over the pool's tensors (`plan::make_plan`; empty: not
  /// used). Consecutive dense tensors of one bucket share one allreduce; an SFB tensor is
  /// always a job of its own, so it splits the bucket it falls in. Excludes `fuse_dense`
  /// (which is the one-bucket plan).
  plan::bucket_plan dense_buckets{};
  /// Autotune, as `overlap_scheduler`'s: measure this many iterations, then re-plan
  /// `dense_buckets` with `autotune_replan` from the measured backward times (per tensor)
  /// and the measured dense jobs (0: off). Excludes `fuse_dense`.
  std::size_t autotune_iterations = 0;
  /// How autotune re-plans: `plan::replan_with(planner)` (tcoll/plan/replan.hpp); required
  /// when `autotune_iterations` is set.
  plan::replan_function autotune_replan{};
  /// The ring allgather of the SFB jobs.
  sfb_options sfb{};
  /// Exchange a hash of the plan and the pool's shape at construction, throwing an error
  /// naming the first rank that differs from rank 0 instead of deadlocking.
  bool check_plan = true;
};

/// Timings of one job in one iteration (steady clock).
struct hybrid_job_timing {
  std::size_t first_tensor = 0, end_tensor = 0;
  scheme how = scheme::dense;
  clock::time_point ready{};    ///< its last tensor was marked
  clock::time_point started{};  ///< handed to the engine
  clock::time_point finished{}; ///< `finish()` had its result (reconstructed, for SFB)
  /// Its communication on the engine thread (the allreduce, or the SFB allgathers).
  clock::time_point comm_started{}, comm_finished{};
};

/// Timings of one hybrid iteration.
struct hybrid_timing {
  clock::time_point begin{}, end{};
  std::vector<clock::time_point> tensor_ready; ///< per tensor: when it was marked
  std::vector<hybrid_job_timing> jobs;         ///< in plan order
};

/// Poseidon's Algorithm 2 over a gradient pool (see the file comment). `Comm` is any
/// communicator (a transport, or a hierarchy, on which SFB gathers through an allreduce,
/// see `sfb.hpp`); `Algo` the dense allreduce; `Gemm` the reconstruction (`host_gemm`,
/// `eigen_gemm`). `mark_ready` and `mark_factors_ready` may be called from several threads;
/// `finish` from one.
template <communicator Comm, class T, class Op = sum_op,
          class Algo = tcoll::detail::default_algorithm_t<Comm>, class Gemm = host_gemm,
          reducer R = cpu_reducer>
class hybrid_scheduler {
public:
  hybrid_scheduler(gradient_pool<T, R>& pool, Comm& comm, hybrid_plan plan, const Op& op = {},
                   const Algo& algo = {}, Gemm gemm = {}, hybrid_scheduler_options options = {})
      : pool_(&pool), comm_(&comm), plan_(std::move(plan)), op_(op), algo_(algo),
        gemm_(std::move(gemm)), options_(options),
        driver_(comm, "hybrid_scheduler", [this](std::vector<std::uint64_t>& v) {
          tcoll::detail::sum_over_ranks(*comm_, pool_->reducer(), v);
        }) {
    detail::check_sfb_types<T, Op, Gemm>();
    validate();
    if (options_.check_plan) check_same_plan();
    build_jobs();
  }
  hybrid_scheduler(const hybrid_scheduler&) = delete;
  hybrid_scheduler& operator=(const hybrid_scheduler&) = delete;
  /// Waits for jobs still in flight (they read and write the pool and the factor buffers):
  /// a dense job's request and an SFB job's handle each wait in their destructor.
  ~hybrid_scheduler() = default;

  int rank() const noexcept { return comm_->rank(); }
  const hybrid_plan& plan() const noexcept { return plan_; }
  std::size_t job_count() const noexcept { return jobs_.size(); }
  const hybrid_timing& last_timing() const noexcept { return last_; }

  /// Dense tensor `i` holds its final gradient in the pool. Throws `invalid_argument` for a
  /// bad mark; communication errors (a broken transport included) surface from `finish()`.
  void mark_ready(std::size_t i) {
    driver_.mark_ready(
        i, "mark_ready",
        [&](std::size_t t) {
          check_scheme(t, scheme::dense, "mark_ready");
          driver_.satisfy(job_of_[t]);
        },
        [&](std::size_t k) { start(k); });
  }

  /// SFB tensor `i`: `u` holds `samples` rows of M (row k: sample k's back-propagated error,
  /// or whatever the model's u is) and `v` `samples` rows of N; `samples` <= the plan's batch.
  /// They are copied; the rows past `samples` are zero.
  void mark_factors_ready(std::size_t i, const T* u, const T* v, std::size_t samples) {
    driver_.mark_ready(
        i, "mark_factors_ready",
        [&](std::size_t t) {
          check_scheme(t, scheme::sfb, "mark_factors_ready");
          if (samples > plan_.batch)
            throw invalid_argument(
                "hybrid_scheduler::mark_factors_ready: samples = " + std::to_string(samples) +
                    " for tensor " + std::to_string(t) +
                    " exceeds the plan's batch K = " + std::to_string(plan_.batch),
                rank());
          if (samples > 0 && (!u || !v))
            throw invalid_argument(
                "hybrid_scheduler::mark_factors_ready: u or v is null for tensor " +
                    std::to_string(t),
                rank());
          const tensor_scheme& s = plan_.tensors[t];
          factors& f = factors_[t];
          R& red = pool_->reducer();
          const std::size_t K = plan_.batch;
          red.copy(f.u.data(), u, samples * s.rows);
          red.zero(f.u.data() + samples * s.rows, (K - samples) * s.rows);
          red.copy(f.v.data(), v, samples * s.cols);
          red.zero(f.v.data() + samples * s.cols, (K - samples) * s.cols);
          red.synchronize(); // the caller may reuse u and v once this returns
          driver_.satisfy(job_of_[t]);
        },
        [&](std::size_t k) { start(k); });
  }

  /// Waits for every job (each bounded by the transport's timeout), reconstructs the SFB
  /// gradients into the pool, and returns the timings. A tensor never marked: the started
  /// jobs are waited for, the transport is broken (so the peers fail at once) and
  /// `invalid_argument` names it. A failed job rethrows its cause.
  const hybrid_timing& finish() {
    const iteration_timing& t = driver_.finish([&](std::size_t k) {
      job& j = jobs_[k];
      if (j.how == scheme::sfb) {
        j.sfb.wait();
        return j.sfb.timestamps();
      }
      j.dense.wait();
      return j.dense.timestamps();
    });
    last_.begin = t.begin;
    last_.end = t.end;
    last_.tensor_ready = t.tensor_ready;
    last_.jobs.resize(t.buckets.size());
    for (std::size_t k = 0; k < t.buckets.size(); ++k) {
      const bucket_timing& b = t.buckets[k];
      last_.jobs[k] = {b.first_tensor, b.end_tensor, jobs_[k].how, b.ready,
                       b.queued,       b.collected,  b.started,    b.finished};
    }
    if (auto next = driver_.autotune(options_.autotune_iterations, options_.autotune_replan,
                                     autotune_bytes())) {
      options_.dense_buckets = std::move(*next);
      build_jobs();
      autotuned_ = true;
    }
    return last_;
  }

  std::size_t iterations() const noexcept { return driver_.iterations(); }
  /// The buckets that group the dense tensors now (empty: `fuse_dense` runs or a job per
  /// tensor); after autotune, the agreed re-plan.
  const plan::bucket_plan& dense_buckets() const noexcept { return options_.dense_buckets; }
  /// Whether autotune has re-planned, and the cost line its re-plan was made with.
  bool autotuned() const noexcept { return autotuned_; }
  std::optional<plan::linear_cost> fitted_cost() const { return driver_.fitted_cost(); }

private:
  using sfb_handle = sfb_request<T, Op, Gemm, R>;
  struct job {
    std::size_t first = 0, end = 0;
    scheme how = scheme::dense;
    request dense;
    sfb_handle sfb;
  };
  /// An SFB tensor's K x M and K x N factor buffers, in the reducer's memory (so a device
  /// reducer's jobs run on a device-only transport such as NCCL).
  struct factors {
    typename R::template buffer<T> u{}, v{};
  };

  void validate() const {
    const std::size_t L = pool_->tensor_count();
    if (plan_.tensors.size() != L)
      throw invalid_argument("hybrid_scheduler: the plan has " +
                                 std::to_string(plan_.tensors.size()) +
                                 " tensors but the pool holds " + std::to_string(L),
                             rank());
    if (plan_.sfb_count() && plan_.batch == 0)
      throw invalid_argument("hybrid_scheduler: plan.batch (K) is 0 but " +
                                 std::to_string(plan_.sfb_count()) + " tensors go SFB",
                             rank());
    if (options_.autotune_iterations && options_.fuse_dense)
      throw invalid_argument("hybrid_scheduler: options.autotune_iterations re-plans the dense "
                             "buckets and excludes options.fuse_dense",
                             rank());
    tcoll::detail::check_autotune(options_.autotune_iterations, options_.autotune_replan,
                                  "hybrid_scheduler", rank());
    if (!options_.dense_buckets.ends.empty()) {
      if (options_.fuse_dense)
        throw invalid_argument("hybrid_scheduler: options.fuse_dense and options.dense_buckets "
                               "both set; fuse_dense is the plan of one bucket",
                               rank());
      if (!plan::is_valid(options_.dense_buckets, L))
        throw invalid_argument("hybrid_scheduler: options.dense_buckets does not partition the "
                               "pool's " +
                                   std::to_string(L) + " tensors into contiguous buckets",
                               rank());
    }
    for (std::size_t i = 0; i < L; ++i) {
      const tensor_scheme& s = plan_.tensors[i];
      if (s.how != scheme::dense && s.how != scheme::sfb)
        throw invalid_argument("hybrid_scheduler: tensor " + std::to_string(i) + " is planned " +
                                   std::string(to_string(s.how)) +
                                   "; a hybrid plan sends a tensor dense or sfb",
                               rank());
      if (s.how == scheme::sfb && s.rows * s.cols != pool_->tensor_size(i))
        throw invalid_argument("hybrid_scheduler: tensor " + std::to_string(i) +
                                   " is planned SFB " + std::to_string(s.rows) + " x " +
                                   std::to_string(s.cols) + " but the pool's tensor holds " +
                                   std::to_string(pool_->tensor_size(i)) + " elements",
                               rank());
    }
  }

  /// What a tensor sends: an SFB tensor its factors (it is a job of its own whatever the
  /// plan says), a dense one its elements. Autotune's workload.
  std::vector<std::uint64_t> autotune_bytes() const {
    std::vector<std::uint64_t> bytes;
    for (std::size_t i = 0; i < pool_->tensor_count(); ++i) {
      const tensor_scheme& s = plan_.tensors[i];
      bytes.push_back(
          (s.how == scheme::sfb ? plan_.batch * (s.rows + s.cols) : pool_->tensor_size(i)) *
          sizeof(T));
    }
    return bytes;
  }

  void check_same_plan() {
    tcoll::detail::fingerprint f;
    f.add(sizeof(T)).add(plan_.batch).add(options_.fuse_dense);
    for (std::size_t end : options_.dense_buckets.ends) f.add(end + 1);
    f.add(options_.autotune_iterations).add(pool_->tensor_count());
    for (std::size_t i = 0; i < pool_->tensor_count(); ++i) {
      const tensor_scheme& s = plan_.tensors[i];
      f.add(pool_->tensor_size(i)).add(s.how == scheme::sfb ? 1 + s.rows * 7919u + s.cols : 0);
    }
    driver_.agree(f.value(), "runs a different hybrid plan or pool", "run the same plan");
  }

  void build_jobs() {
    const std::size_t L = pool_->tensor_count();
    jobs_.clear();
    job_of_.assign(L, 0);
    factors_.resize(L);
    std::vector<job_shape> shapes;
    for (std::size_t i = 0; i < L;) {
      job j;
      j.first = i;
      j.how = plan_.tensors[i].how;
      std::size_t end = i + 1;
      if (j.how == scheme::dense && options_.fuse_dense)
        while (end < L && plan_.tensors[end].how == scheme::dense) ++end;
      if (j.how == scheme::dense && !options_.dense_buckets.ends.empty()) {
        const auto& ends = options_.dense_buckets.ends; // the bucket holding i ends at *e
        const std::size_t bucket_end = *std::upper_bound(ends.begin(), ends.end(), i);
        while (end < bucket_end && plan_.tensors[end].how == scheme::dense) ++end;
      }
      j.end = end;
      std::size_t bytes = pool_->range_size(i, end) * sizeof(T);
      if (j.how == scheme::sfb) {
        const tensor_scheme& s = plan_.tensors[i];
        R& red = pool_->reducer();
        factors_[i].u = red.template allocate<T>(plan_.batch * s.rows);
        factors_[i].v = red.template allocate<T>(plan_.batch * s.cols);
        bytes = plan_.batch * (s.rows + s.cols) * sizeof(T);
      }
      for (std::size_t k = i; k < end; ++k) job_of_[k] = jobs_.size();
      shapes.push_back({i, end, bytes, end - i, j.how == scheme::dense});
      jobs_.push_back(std::move(j));
      i = end;
    }
    driver_.arrange(L, std::move(shapes));
  }

  void check_scheme(std::size_t i, scheme expected, const char* what) const {
    if (plan_.tensors[i].how != expected)
      throw invalid_argument(
          std::string("hybrid_scheduler::") + what + ": tensor " + std::to_string(i) +
              " is planned " + std::string(scheme_name(plan_.tensors[i].how)) +
              (expected == scheme::sfb ? "; call mark_ready" : "; call mark_factors_ready"),
          rank());
  }

  /// Starts job `k` (the driver reports a job that cannot start from `finish()`).
  void start(std::size_t k) {
    job& j = jobs_[k];
    R& red = pool_->reducer();
    if (j.how == scheme::sfb) {
      const tensor_scheme& s = plan_.tensors[j.first];
      factors& f = factors_[j.first];
      j.sfb = isfb_allreduce(*comm_, f.u.data(), f.v.data(), plan_.batch, s.rows, s.cols,
                             pool_->tensor(j.first).data(), op_, gemm_, options_.sfb, red);
    } else {
      std::span<T> range = pool_->range(j.first, j.end);
      j.dense = iallreduce(*comm_, range.data(), range.data(), range.size(), op_, algo_, red);
    }
  }

  gradient_pool<T, R>* pool_;
  Comm* comm_;
  hybrid_plan plan_;
  Op op_;
  Algo algo_;
  Gemm gemm_;
  hybrid_scheduler_options options_;
  iteration_driver<Comm> driver_;
  // declared before jobs_ so that an SFB exchange still in flight at destruction (an
  // sfb_request waits for it in its destructor) never reads freed factor buffers
  std::vector<factors> factors_;
  std::vector<job> jobs_;
  std::vector<std::size_t> job_of_;
  bool autotuned_ = false;
  hybrid_timing last_;
};

} // namespace tcoll::hybrid
