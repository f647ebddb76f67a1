#pragma once
/// \file
/// How the training app exchanges gradients: one interface, one implementation per scheme
/// (`--scheme dense` here; `csc` and `topk` in sparse_exchange.hpp).
/// `after_backward` exchanges the whole buffer with one blocking allreduce once backward
/// is done (the baseline); `overlapped` writes backward straight into a
/// `tcoll::gradient_pool` and lets the overlap scheduler allreduce the buckets of a fusion
/// plan while the earlier layers are still being differentiated.
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <tcoll/plan.hpp>
#include <tcoll/schedule.hpp>
#include <tcoll/tcoll.hpp>

#include "mlp.hpp"

namespace train {

/// One rank's gradient exchange over a training run.
class gradient_exchange {
public:
  virtual ~gradient_exchange() = default;
  /// Tensor `i` (backward order) holds this step's gradient.
  virtual void gradient_ready(std::size_t i) = 0;
  /// Backward is over: on return `model.gradients()` holds the averaged gradients.
  virtual void finish_step() = 0;
  /// After `finish_step()`: applies this step's update to `model.parameters()`. The
  /// default is the optimiser's dense step on `model.gradients()`; a scheme that changes
  /// the update itself (CSC's momentum correction updates only the communicated chunks)
  /// overrides it. Every rank must end with bitwise identical parameters.
  virtual void apply_update(mlp& model, sgd_momentum& optimiser) {
    optimiser.step(model.parameters(), model.gradients());
  }
  /// One line on what runs (plan, buckets), for the run's header; empty for none.
  virtual std::string describe() const { return {}; }
};

/// Blocking allreduce (average) of every gradient after backward.
template <class Comm, class Algo>
class after_backward final : public gradient_exchange {
public:
  after_backward(Comm& comm, mlp& model, const Algo& algo)
      : comm_(&comm), model_(&model), algo_(algo) {}
  void gradient_ready(std::size_t) override {}
  void finish_step() override {
    tcoll::allreduce(*comm_, model_->gradients(), tcoll::avg_op{}, algo_);
  }

private:
  Comm* comm_;
  mlp* model_;
  Algo algo_;
};

/// Knobs of the overlapped exchange.
struct overlap_options {
  /// Planner of the buckets (`tcoll::plan::planner_by_name`).
  std::string planner = "mgwfbp";
  /// Steps measured before the scheduler re-plans with the measured backward times and
  /// a cost fitted to the measured allreduces (0: keep the first plan). The first plan
  /// uses `initial_cost` and equal backward times.
  std::size_t autotune_steps = 5;
  tcoll::plan::linear_cost initial_cost{50.0, 1e-3}; ///< 50 us + 1 ns/byte: a guess
};

/// Backward writes into a gradient pool; the overlap scheduler averages the plan's
/// buckets as they complete.
template <class Comm, class Algo>
class overlapped final : public gradient_exchange {
public:
  overlapped(Comm& comm, mlp& model, const Algo& algo, const overlap_options& o)
      : pool_(model.gradient_tensor_sizes()),
        scheduler_(pool_, comm, first_plan(model, o), tcoll::avg_op{}, algo, options(o)),
        planner_(o.planner) {
    model.bind_gradients(pool_.all());
  }
  void gradient_ready(std::size_t i) override { scheduler_.mark_ready(i); }
  void finish_step() override { scheduler_.finish(); }
  std::string describe() const override {
    return "overlap: planner " + planner_ + ", " + std::to_string(buckets()) + " buckets" +
           (scheduler_.autotuned() ? " (autotuned)" : "");
  }
  std::size_t buckets() const { return scheduler_.plan().bucket_count(); }

private:
  static tcoll::plan::any_planner planner_of(const overlap_options& o) {
    auto p = tcoll::plan::planner_by_name(o.planner);
    if (!p) throw std::invalid_argument("unknown planner '" + o.planner + "'");
    return *p;
  }
  static tcoll::plan::bucket_plan first_plan(const mlp& model, const overlap_options& o) {
    tcoll::plan::workload w;
    for (std::size_t n : model.gradient_tensor_sizes()) {
      w.bytes.push_back(n * sizeof(float));
      w.backward_us.push_back(100.0);
    }
    return tcoll::plan::make_plan(planner_of(o), w, o.initial_cost);
  }
  static tcoll::scheduler_options options(const overlap_options& o) {
    tcoll::scheduler_options s;
    s.autotune_iterations = o.autotune_steps;
    s.autotune_replan = tcoll::plan::replan_with(planner_of(o));
    return s;
  }

  tcoll::gradient_pool<float> pool_;
  tcoll::overlap_scheduler<Comm, float, tcoll::avg_op, Algo> scheduler_;
  std::string planner_;
};

} // namespace train
