// The C++ half of `tcoll_torch.DistributedDataParallel` (docs/torch.md): `_C.Reducer`.
//
// One `tcoll::gradient_pool<float>` holds every gradient of the model in backward order; the
// Python side makes each parameter's `.grad` a view into it (`grads()`), so a bucket is
// reduced in place, with no copy (GradientFlow's lazy allreduce, DDP's
// gradient_as_bucket_view). The parameters' post-accumulate-grad hooks call `mark_ready(i)`;
// the execution layer's iteration driver starts a bucket in plan order as soon as its
// tensors are ready, on the communication engine of the backend's communicator (the node's
// shared-memory transport, or the hierarchy across nodes), while backward goes on;
// `finish()` waits for the last bucket. What a bucket runs is the scheme's job (the schemes,
// their knobs and defaults are the registry's, compress/registry.hpp):
//  - "dense": `overlap_scheduler` (an allreduce of the bucket, average), the wire float32,
//    bfloat16 or float16 (mixed precision: cast, reduce, cast back);
//  - "csc": `sparse::csc_allreduce` (GradientFlow's coarse-grained sparse chunks over the
//    whole pool, with its residual; buckets are its buffers of important chunks);
//  - "topk", "dgc": `sparse::topk_pool_allreduce` (each rank's k largest elements of the
//    whole pool, with a residual or DGC's momentum correction, allgathered and summed)
//    on the group's flat transport, once backward has marked every gradient.
// Buckets come from any tcoll planner: an initial plan from the tensor sizes, then autotune
// (measure, fit, re-plan with the same planner, adopt rank 0's plan).
#include <pybind11/stl.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/extension.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <tcoll/compress/adaptor_options.hpp>
#include <tcoll/plan.hpp>
#include <tcoll/schedule/collective_tasks.hpp>
#include <tcoll/schedule/gradient_pool.hpp>
#include <tcoll/schedule/scheduler.hpp>
#include <tcoll/schedule/trace.hpp>
#include <tcoll/sparse/csc.hpp>
#include <tcoll/sparse/momentum.hpp>
#include <tcoll/sparse/topk_pool.hpp>

#include "backend_access.hpp"

namespace tcoll_torch {
namespace {

namespace py = pybind11;
using pool_t = tcoll::gradient_pool<float>;

/// The knobs of a reducer (Python passes them by keyword; see DistributedDataParallel).
struct reducer_options {
  std::string planner = "optimal";
  std::string scheme = "dense"; ///< a name of the compression registry
  /// "float32", or for scheme "dense" "bfloat16" / "float16": the registry's schemes
  /// bfloat16 and half (torch's dtype names, as `mixed_precision.reduce_dtype` gives them)
  std::string wire = "float32";
  std::size_t autotune_iterations = 3;
  bool check_plan = true;
  // The compression knobs (tcoll::compression_options): unset (None) takes the scheme's
  // default (`default_compression_options`; csc's residual is error_feedback here, which
  // needs nothing from the optimizer); a knob the scheme does not read is an error.
  std::optional<float> wire_scale;
  std::optional<double> density;
  std::optional<std::size_t> chunk_elements;
  std::optional<std::size_t> warmup_iterations;
  std::optional<std::size_t> threshold_bytes;
  std::optional<std::string> residual;
  std::optional<double> momentum;
};

/// The registry's scheme of `o` (its `scheme`, with `wire` naming a wire format of dense).
tcoll::compression_scheme compression_of(const reducer_options& o, int rank) {
  const auto fail = [&](const std::string& what) {
    throw tcoll::invalid_argument("tcoll_torch.DistributedDataParallel: " + what, rank);
  };
  tcoll::compression_scheme s{};
  try {
    s = tcoll::parse_compression(o.scheme);
  } catch (const tcoll::invalid_argument& e) {
    fail(e.what());
  }
  if (o.wire == "float32") return s;
  if (o.wire != "bfloat16" && o.wire != "float16")
    fail("wire must be 'float32', 'bfloat16' or 'float16', got '" + o.wire + "'");
  if (s != tcoll::compression_scheme::dense)
    fail("scheme '" + o.scheme + "' sends float32 (wire='float32'); wire='" + o.wire +
         "' is a format of scheme 'dense'");
  return o.wire == "bfloat16" ? tcoll::compression_scheme::bfloat16
                              : tcoll::compression_scheme::half;
}

/// The knobs of `o` for scheme `s`: the scheme's defaults, overridden by every knob set.
tcoll::compression_options knobs_of(tcoll::compression_scheme s, const reducer_options& o,
                                    int rank) {
  using tcoll::compression_knob;
  tcoll::compression_options c = tcoll::default_compression_options(s);
  if (s == tcoll::compression_scheme::csc)
    c.residual = tcoll::sparse::residual_rule::error_feedback;
  std::uint16_t set = 0;
  const auto take = [&](const auto& value, auto& field, compression_knob k) {
    if (!value) return;
    field = static_cast<std::remove_reference_t<decltype(field)>>(*value);
    set |= static_cast<std::uint16_t>(k);
  };
  take(o.wire_scale, c.wire_scale, compression_knob::wire_scale);
  take(o.density, c.density, compression_knob::density);
  take(o.chunk_elements, c.chunk_elements, compression_knob::chunk_elements);
  take(o.warmup_iterations, c.warmup_iterations, compression_knob::warmup_iterations);
  take(o.threshold_bytes, c.threshold_bytes, compression_knob::threshold_bytes);
  take(o.momentum, c.momentum, compression_knob::momentum);
  if (o.residual) {
    c.residual = tcoll::parse_residual_rule(*o.residual, rank);
    set |= static_cast<std::uint16_t>(compression_knob::residual);
    if (!tcoll::takes_residual(s, c.residual) && tcoll::takes_knob(s, compression_knob::residual))
      throw tcoll::invalid_argument("tcoll_torch.DistributedDataParallel: scheme '" +
                                        std::string(tcoll::to_string(s)) + "' takes no residual '" +
                                        *o.residual + "'",
                                    rank);
  }
  tcoll::check_knobs(s, set, "tcoll_torch.DistributedDataParallel", rank);
  return c;
}

/// What the reducer runs each iteration: one implementation per scheme and communicator.
class exchange {
public:
  virtual ~exchange() = default;
  virtual void mark_ready(std::size_t i) = 0;
  virtual const tcoll::iteration_timing& finish() = 0;
  /// The bucket ends of the plan in use (for csc: the ends are chunk buffers, not tensors).
  virtual std::vector<std::size_t> plan_ends() const = 0;
  virtual bool autotuned() const = 0;
  virtual std::optional<tcoll::plan::linear_cost> fitted_cost() const = 0;
  /// Scheme-specific figures of the last iteration.
  virtual py::dict stats() const { return {}; }
  /// The scheme's per-element state laid out like the pool (topk: the residual; dgc: the
  /// velocity and the accumulation), writable between iterations; empty for the others.
  virtual std::vector<std::span<float>> state() { return {}; }
  /// GradientFlow's momentum SGD correction over pool-shaped `weights` and `history` (csc
  /// only: `csc_exchange`).
  virtual void momentum_step(std::span<float>, std::span<float>,
                             const tcoll::sparse::csc_sgd_options&, int rank) {
    throw tcoll::invalid_argument("tcoll_torch.CscMomentumSGD: the model's scheme is not 'csc' "
                                  "(the momentum correction steps the chunks CSC sent)",
                                  rank);
  }
  /// Which chunks the last iteration reduced, one entry per chunk (csc only).
  virtual std::vector<unsigned char> last_important() const { return {}; }
};

template <class Comm, class Wire>
class dense_exchange final : public exchange {
public:
  dense_exchange(pool_t& pool, Comm& comm, tcoll::plan::bucket_plan plan,
                 tcoll::scheduler_options options)
      : scheduler_(pool, comm, std::move(plan), {}, {}, std::move(options)) {}
  void mark_ready(std::size_t i) override { scheduler_.mark_ready(i); }
  const tcoll::iteration_timing& finish() override { return scheduler_.finish(); }
  std::vector<std::size_t> plan_ends() const override { return scheduler_.plan().ends; }
  bool autotuned() const override { return scheduler_.autotuned(); }
  std::optional<tcoll::plan::linear_cost> fitted_cost() const override {
    return scheduler_.fitted_cost();
  }

private:
  tcoll::overlap_scheduler<Comm, float, tcoll::avg_op, tcoll::default_algorithm_t<Comm>,
                           tcoll::cpu_reducer, Wire>
      scheduler_;
};

template <class Comm>
class csc_exchange final : public exchange {
public:
  csc_exchange(pool_t& pool, Comm& comm, const tcoll::sparse::csc_options& options)
      : pool_(&pool), csc_(pool, comm, options) {}
  void mark_ready(std::size_t i) override { csc_.mark_ready(i); }
  /// After the adaptor, the chunks it did not send hold this rank's own gradient (kept in
  /// its residual for later iterations). An optimizer must not apply them, or the replicas
  /// drift apart (GradientFlow's update leaves those weights unchanged): they are zeroed, so
  /// the optimizer sees the averaged important chunks and zero elsewhere.
  const tcoll::iteration_timing& finish() override {
    csc_.finish();
    const auto sent = csc_.last_important();
    const auto& chunks = csc_.chunks();
    for (std::size_t c = 0; c < chunks.count(); ++c)
      if (!sent[c]) std::fill_n(pool_->data() + chunks.begin(c), chunks.size(c), 0.0f);
    return csc_.last_timing();
  }
  std::vector<std::size_t> plan_ends() const override { return {}; }
  bool autotuned() const override { return false; }
  std::optional<tcoll::plan::linear_cost> fitted_cost() const override { return std::nullopt; }
  py::dict stats() const override {
    const auto& it = csc_.last();
    py::dict d;
    d["density"] = it.density;
    d["chunks"] = it.chunks;
    d["important_chunks"] = it.important_chunks;
    d["buffers"] = it.buffers;
    d["bytes_sent"] = it.bytes_sent();
    d["dense_bytes_sent"] = it.dense_bytes_sent;
    return d;
  }

  /// Algorithm 1 lines 12-17 (`sparse::csc_momentum_step`) on the chunks the last iteration
  /// reduced; the others keep their weights and their frozen history.
  void momentum_step(std::span<float> weights, std::span<float> history,
                     const tcoll::sparse::csc_sgd_options& options, int rank) override {
    tcoll::sparse::csc_momentum_step<float>(std::span<const float>(pool_->data(), pool_->size()),
                                            weights, history, csc_.chunks(), csc_.last_important(),
                                            options, {}, rank);
  }
  std::vector<unsigned char> last_important() const override {
    const auto m = csc_.last_important();
    return {m.begin(), m.end()};
  }

private:
  pool_t* pool_;
  tcoll::sparse::csc_allreduce<Comm, float, tcoll::avg_op> csc_;
};

/// Schemes "topk" and "dgc" (see the file comment). No overlap with backward: the selection
/// needs every gradient, so the one job starts at the last mark.
template <class Tr>
class topk_exchange final : public exchange {
public:
  topk_exchange(pool_t& pool, Tr& t, const tcoll::sparse::topk_pool_options& options)
      : topk_(pool, t, options) {}
  void mark_ready(std::size_t i) override { topk_.mark_ready(i); }
  const tcoll::iteration_timing& finish() override { return topk_.finish(); }
  std::vector<std::size_t> plan_ends() const override { return {}; }
  bool autotuned() const override { return false; }
  std::optional<tcoll::plan::linear_cost> fitted_cost() const override { return std::nullopt; }
  py::dict stats() const override {
    py::dict d;
    d["density"] = topk_.options().density;
    d["k"] = topk_.k();
    d["last_k"] = topk_.last_k();
    d["bytes_sent"] = topk_.bytes_sent();
    return d;
  }
  std::vector<std::span<float>> state() override {
    if (topk_.options().scheme == tcoll::sparse::topk_scheme::dgc)
      return {topk_.velocity(), topk_.accumulation()};
    if (!topk_.residual().empty()) return {topk_.residual()};
    return {};
  }

private:
  tcoll::sparse::topk_pool_allreduce<Tr, float, tcoll::avg_op> topk_;
};

double us_since(tcoll::clock::time_point t, tcoll::clock::time_point origin) {
  if (t == tcoll::clock::time_point{}) return -1.0;
  return std::chrono::duration<double, std::micro>(t - origin).count();
}

/// `_C.Reducer` (see the file comment).
class reducer {
public:
  reducer(const c10::intrusive_ptr<c10d::Backend>& backend, std::vector<std::size_t> sizes,
          reducer_options options)
      : backend_(backend), options_(std::move(options)) {
    const backend_communicators comms = communicators_of(backend);
    rank_ = comms.rank;
    const auto fail = [&](const std::string& what) {
      throw tcoll::invalid_argument("tcoll_torch.DistributedDataParallel: " + what, rank_);
    };
    for (std::size_t i = 0; i < sizes.size(); ++i)
      if (sizes[i] == 0) fail("parameter " + std::to_string(i) + " has no elements");
    pool_ = std::make_shared<pool_t>(sizes);
    pool_->zero();
    marked_.assign(sizes.size(), 0);
    scheme_ = compression_of(options_, rank_);
    knobs_ = knobs_of(scheme_, options_, rank_);
    if (tcoll::describe(scheme_).family == tcoll::compression_family::sparse_elements) {
      if (comms.flat)
        make_topk(*comms.flat);
      else
        make_topk(*comms.shm);
    } else if (comms.machine) {
      make(*comms.machine);
    } else {
      make(*comms.shm);
    }
  }

  /// The pool's tensors (1-D views, backward order); they keep the pool alive.
  std::vector<at::Tensor> grads() {
    std::vector<at::Tensor> views;
    for (std::size_t i = 0; i < pool_->tensor_count(); ++i) {
      auto span = pool_->tensor(i);
      auto keep = pool_;
      views.push_back(torch::from_blob(
          span.data(), {static_cast<std::int64_t>(span.size())}, [keep](void*) {},
          torch::TensorOptions().dtype(torch::kFloat32)));
    }
    return views;
  }

  void mark_ready(std::size_t i) {
    {
      std::lock_guard lock(mutex_);
      if (i < marked_.size()) marked_[i] = 1;
    }
    py::gil_scoped_release release;
    exchange_->mark_ready(i);
  }

  /// Indices of the tensors not marked in this iteration.
  std::vector<std::size_t> unmarked() const {
    std::lock_guard lock(mutex_);
    std::vector<std::size_t> out;
    for (std::size_t i = 0; i < marked_.size(); ++i)
      if (!marked_[i]) out.push_back(i);
    return out;
  }

  /// Waits for every bucket; the pool then holds the averaged gradients.
  void finish() {
    {
      std::lock_guard lock(mutex_);
      std::fill(marked_.begin(), marked_.end(), 0);
    }
    py::gil_scoped_release release;
    const auto& t = exchange_->finish();
    last_ = t;
    ++iterations_;
  }

  std::size_t iterations() const { return iterations_; }
  std::vector<std::size_t> plan_ends() const { return exchange_->plan_ends(); }
  bool autotuned() const { return exchange_->autotuned(); }
  std::optional<std::pair<double, double>> fitted_cost() const {
    if (auto c = exchange_->fitted_cost()) return std::make_pair(c->startup_us, c->per_byte_us);
    return std::nullopt;
  }
  py::dict stats() const { return exchange_->stats(); }

  /// The scheme's state (see `exchange::state`) as 1-D float32 views, valid while this
  /// reducer lives.
  std::vector<at::Tensor> state() {
    std::vector<at::Tensor> views;
    for (std::span<float> s : exchange_->state())
      views.push_back(torch::from_blob(s.data(), {static_cast<std::int64_t>(s.size())},
                                       torch::TensorOptions().dtype(torch::kFloat32)));
    return views;
  }

  /// (elements of the pool, offset of each tensor in it): the layout a pool-shaped buffer
  /// of parameters or optimizer state must have (`momentum_step`).
  std::pair<std::size_t, std::vector<std::size_t>> pool_layout() const {
    std::vector<std::size_t> offsets;
    for (std::size_t i = 0; i < pool_->tensor_count(); ++i)
      offsets.push_back(static_cast<std::size_t>(pool_->tensor(i).data() - pool_->data()));
    return {pool_->size(), offsets};
  }

  /// scheme "csc": GradientFlow's momentum SGD step (tcoll::sparse::csc_momentum_step) on
  /// `weights` and `history`, 1-D contiguous float32 tensors laid out as the pool.
  void momentum_step(const at::Tensor& weights, const at::Tensor& history, double learning_rate,
                     double momentum) {
    for (const auto* t : {&weights, &history})
      if (t->scalar_type() != at::kFloat || !t->is_contiguous() || !t->device().is_cpu() ||
          t->dim() != 1)
        throw tcoll::invalid_argument(
            std::string("tcoll_torch.CscMomentumSGD: ") + (t == &weights ? "weights" : "history") +
                " must be a 1-D contiguous float32 CPU tensor laid out as the pool",
            rank_);
    const auto span_of = [](const at::Tensor& t) {
      return std::span<float>(t.data_ptr<float>(), static_cast<std::size_t>(t.numel()));
    };
    py::gil_scoped_release release;
    exchange_->momentum_step(span_of(weights), span_of(history), {learning_rate, momentum, true},
                             rank_);
  }

  /// csc: the chunks the last iteration reduced (1) and kept back (0); empty for the others.
  std::vector<unsigned char> last_important() const { return exchange_->last_important(); }

  /// The last iteration's timings in microseconds since its begin (-1: never happened); the
  /// begin is the previous iteration's end (or the reducer's construction).
  py::dict timing() const {
    py::dict d;
    const auto o = last_.begin;
    d["end_us"] = us_since(last_.end, o);
    // the begin on the monotonic clock (steady_clock is CLOCK_MONOTONIC on Linux, as Python's
    // time.perf_counter), so a caller can place its own timestamps on this timeline
    d["begin_s"] = std::chrono::duration<double>(o.time_since_epoch()).count();
    std::vector<double> ready;
    for (auto t : last_.tensor_ready) ready.push_back(us_since(t, o));
    d["tensor_ready_us"] = ready;
    py::list buckets;
    for (const auto& b : last_.buckets) {
      py::dict e;
      e["first_tensor"] = b.first_tensor;
      e["end_tensor"] = b.end_tensor;
      e["bytes"] = b.bytes;
      e["ready_us"] = us_since(b.ready, o);
      e["queued_us"] = us_since(b.queued, o);
      e["started_us"] = us_since(b.started, o);
      e["finished_us"] = us_since(b.finished, o);
      buckets.append(e);
    }
    d["buckets"] = buckets;
    d["algorithm"] = last_.algorithm;
    return d;
  }

  /// The last iteration as a Chrome trace of this rank (Horovod's phase names).
  void write_trace(const std::string& path) const {
    std::ofstream out(path);
    if (!out) throw tcoll::invalid_argument("write_trace: cannot open " + path, rank_);
    const tcoll::rank_iteration it{rank_, last_};
    tcoll::write_chrome_trace(out, std::span<const tcoll::rank_iteration>(&it, 1), last_.begin);
  }

private:
  /// topk and dgc (sparse_elements): on a flat transport.
  template <class Tr>
  void make_topk(Tr& t) {
    tcoll::sparse::topk_pool_options o = tcoll::to_topk_pool_options(scheme_, knobs_, rank_);
    o.check_pool = options_.check_plan;
    exchange_ = std::make_unique<topk_exchange<Tr>>(*pool_, t, o);
  }

  /// csc, and dense with its wire formats: on any communicator.
  template <class Comm>
  void make(Comm& comm) {
    const auto fail = [&](const std::string& what) {
      throw tcoll::invalid_argument("tcoll_torch.DistributedDataParallel: " + what, rank_);
    };
    if (scheme_ == tcoll::compression_scheme::csc) {
      exchange_ =
          std::make_unique<csc_exchange<Comm>>(*pool_, comm, tcoll::to_csc_options(knobs_, rank_));
      return;
    }
    if (tcoll::describe(scheme_).family != tcoll::compression_family::dense &&
        tcoll::describe(scheme_).family != tcoll::compression_family::wire_format)
      fail("scheme '" + options_.scheme + "' does not run in DistributedDataParallel (it runs " +
           "dense, half and bfloat16 (wire='float16', 'bfloat16'), csc, topk and dgc)");
    const auto planner = tcoll::plan::planner_by_name(options_.planner);
    if (!planner)
      fail("unknown planner '" + options_.planner +
           "' (layerwise, single, threshold, ddp, mgwfbp, adafusion, optimal)");
    const std::size_t wire_bytes = tcoll::size_of(tcoll::describe(scheme_).wire);
    // the first plan, before anything is measured: the tensor sizes, equal backward times
    // and a guessed link (50 us + 2 GB/s); autotune replaces it with a measured one
    tcoll::plan::workload w;
    for (std::size_t i = 0; i < pool_->tensor_count(); ++i) {
      w.bytes.push_back(pool_->tensor_size(i) * wire_bytes);
      w.backward_us.push_back(100.0);
    }
    tcoll::plan::bucket_plan first =
        pool_->tensor_count()
            ? tcoll::plan::make_plan(*planner, w, tcoll::plan::linear_cost{50.0, 5e-4})
            : tcoll::plan::bucket_plan{};
    tcoll::scheduler_options o;
    o.check_plan = options_.check_plan;
    o.autotune_iterations = options_.autotune_iterations;
    o.autotune_replan = tcoll::plan::replan_with(*planner);
    o.wire_scale = knobs_.wire_scale;
    tcoll::visit_wire_type(scheme_, [&](auto wire) {
      using Wire = typename decltype(wire)::type;
      exchange_ = std::make_unique<dense_exchange<Comm, Wire>>(*pool_, comm, std::move(first), o);
    });
  }

  c10::intrusive_ptr<c10d::Backend> backend_; ///< outlives the exchange (its transport)
  reducer_options options_;
  tcoll::compression_scheme scheme_{};
  tcoll::compression_options knobs_;
  int rank_ = 0;
  std::shared_ptr<pool_t> pool_;
  std::unique_ptr<exchange> exchange_; ///< destroyed first: waits for buckets in flight
  mutable std::mutex mutex_;
  std::vector<unsigned char> marked_;
  std::size_t iterations_ = 0;
  tcoll::iteration_timing last_;
};

/// The workload and plan of the simulator's inputs (see `predict_iteration_us`), checked.
std::pair<tcoll::plan::workload, tcoll::plan::bucket_plan>
simulator_inputs(const char* who, std::vector<std::size_t> ends, std::vector<std::uint64_t> bytes,
                 std::vector<double> backward_us, double forward_us) {
  tcoll::plan::workload w{std::move(bytes), std::move(backward_us), forward_us};
  if (w.backward_us.size() != w.bytes.size())
    throw tcoll::invalid_argument(std::string(who) + ": bytes and backward_us differ in length");
  tcoll::plan::bucket_plan plan{std::move(ends), {}};
  if (!tcoll::plan::is_valid(plan, w.size()))
    throw tcoll::invalid_argument(std::string(who) + ": the bucket ends do not partition the " +
                                  std::to_string(w.size()) + " tensors");
  return {std::move(w), std::move(plan)};
}

/// The simulator's iteration time (plan::iteration_time_us) for `ends` over a workload of
/// per-tensor `bytes` and `backward_us` after `forward_us`, on the line a + b M.
double predict_iteration_us(std::vector<std::size_t> ends, std::vector<std::uint64_t> bytes,
                            std::vector<double> backward_us, double forward_us, double startup_us,
                            double per_byte_us) {
  const auto [w, plan] = simulator_inputs("predict_iteration_us", std::move(ends), std::move(bytes),
                                          std::move(backward_us), forward_us);
  return tcoll::plan::iteration_time_us(w, tcoll::plan::linear_cost{startup_us, per_byte_us}, plan);
}

/// The simulator's timeline for the same inputs as `predict_iteration_us`, written to `path`
/// as a Chrome trace (FORWARD, BACKWARD per tensor, ALLREDUCE per bucket), to lay beside
/// the measured one (`write_trace`).
void write_predicted_trace(const std::string& path, std::vector<std::size_t> ends,
                           std::vector<std::uint64_t> bytes, std::vector<double> backward_us,
                           double forward_us, double startup_us, double per_byte_us) {
  const auto [w, plan] = simulator_inputs("write_predicted_trace", std::move(ends),
                                          std::move(bytes), std::move(backward_us), forward_us);
  std::ofstream out(path);
  if (!out) throw tcoll::invalid_argument("write_predicted_trace: cannot open " + path);
  tcoll::plan::write_chrome_trace(
      out, tcoll::plan::simulate(w, tcoll::plan::linear_cost{startup_us, per_byte_us}, plan));
}

} // namespace

/// The compression registry (compress/registry.hpp) as a list of dicts, one per scheme.
py::list compression_registry() {
  py::list out;
  for (const tcoll::compression_description& d : tcoll::compression_registry) {
    py::dict e;
    e["name"] = std::string(d.name);
    e["title"] = std::string(d.title);
    e["family"] = std::string(tcoll::to_string(d.family));
    e["wire"] = std::string(tcoll::name_of(d.wire));
    py::list knobs, state, residuals;
    for (tcoll::compression_knob k : tcoll::all_compression_knobs)
      if (tcoll::takes_knob(d.id, k)) knobs.append(std::string(tcoll::to_string(k)));
    for (auto r :
         {tcoll::sparse::residual_rule::momentum_scaled,
          tcoll::sparse::residual_rule::error_feedback, tcoll::sparse::residual_rule::none})
      if (tcoll::takes_residual(d.id, r)) residuals.append(tcoll::sparse::to_string(r));
    for (std::string_view name : d.state) state.append(std::string(name));
    e["knobs"] = knobs;
    e["residuals"] = residuals;
    e["state"] = state;
    e["momentum_in_result"] = d.momentum_in_result;
    e["needs_whole_pool"] = d.needs_whole_pool;
    e["header"] = std::string(d.header);
    out.append(e);
  }
  return out;
}

void register_ddp(py::module& m) {
  m.def("compression_registry", &compression_registry,
        "tcoll's compression schemes (compress/registry.hpp): name, title, family, wire type, "
        "knobs, residual rules, per-element state");
  m.def("predict_iteration_us", &predict_iteration_us,
        "the simulator's iteration time of a plan (microseconds)", py::arg("ends"),
        py::arg("bytes"), py::arg("backward_us"), py::arg("forward_us"), py::arg("startup_us"),
        py::arg("per_byte_us"));
  m.def("write_predicted_trace", &write_predicted_trace,
        "the simulator's timeline of a plan as a Chrome trace", py::arg("path"), py::arg("ends"),
        py::arg("bytes"), py::arg("backward_us"), py::arg("forward_us"), py::arg("startup_us"),
        py::arg("per_byte_us"));
  py::class_<reducer_options>(m, "ReducerOptions")
      .def(py::init<>())
      .def_readwrite("planner", &reducer_options::planner)
      .def_readwrite("scheme", &reducer_options::scheme)
      .def_readwrite("wire", &reducer_options::wire)
      .def_readwrite("autotune_iterations", &reducer_options::autotune_iterations)
      .def_readwrite("check_plan", &reducer_options::check_plan)
      .def_readwrite("wire_scale", &reducer_options::wire_scale)
      .def_readwrite("density", &reducer_options::density)
      .def_readwrite("chunk_elements", &reducer_options::chunk_elements)
      .def_readwrite("warmup_iterations", &reducer_options::warmup_iterations)
      .def_readwrite("threshold_bytes", &reducer_options::threshold_bytes)
      .def_readwrite("residual", &reducer_options::residual)
      .def_readwrite("momentum", &reducer_options::momentum);
  py::class_<reducer>(m, "Reducer")
      .def(py::init<const c10::intrusive_ptr<c10d::Backend>&, std::vector<std::size_t>,
                    reducer_options>(),
           py::arg("backend"), py::arg("sizes"), py::arg("options"))
      .def("grads", &reducer::grads, "the pool's tensors: 1-D views in backward order")
      .def("mark_ready", &reducer::mark_ready, "tensor i holds its gradient")
      .def("unmarked", &reducer::unmarked, "the tensors not marked in this iteration")
      .def("finish", &reducer::finish, "wait for every bucket")
      .def("iterations", &reducer::iterations)
      .def("plan", &reducer::plan_ends, "the bucket ends of the plan in use")
      .def("autotuned", &reducer::autotuned)
      .def("fitted_cost", &reducer::fitted_cost, "(startup_us, per_byte_us) of autotune's fit")
      .def("stats", &reducer::stats)
      .def("state", &reducer::state,
           "the scheme's per-element state (topk: residual; dgc: velocity, accumulation)")
      .def("pool_layout", &reducer::pool_layout, "(pool elements, offset of each tensor)")
      .def("momentum_step", &reducer::momentum_step,
           "csc: GradientFlow's momentum SGD step on pool-shaped weights and history",
           py::arg("weights"), py::arg("history"), py::arg("learning_rate"), py::arg("momentum"))
      .def("last_important", &reducer::last_important,
           "csc: 1 for each chunk the last iteration reduced, 0 for those kept back")
      .def("timing", &reducer::timing, "the last iteration's timings (us since its begin)")
      .def("write_trace", &reducer::write_trace, "the last iteration as a Chrome trace");
}

} // namespace tcoll_torch
