// The tcoll backend's collectives (backend.hpp): every collective of `c10d::Backend` it
// overrides, barriers included, and how a call runs (`enqueue`: at once in the caller's
// thread, or queued on the communication engine of the group's flat transport or of the
// hierarchy) with what the calls share: the reductions of torch's ops and dtypes, the
// staged two-rank allreduce, the sparse allreduce, and the checks of the arguments.
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <tcoll/algorithm/bruck.hpp>
#include <tcoll/algorithm/hierarchical.hpp>
#include <tcoll/algorithm/pairwise_exchange.hpp>
#include <tcoll/algorithm/select.hpp>
#include <tcoll/collectives.hpp>
#include <tcoll/schedule/collective_tasks.hpp>
#include <tcoll/schedule/engine.hpp>
#include <tcoll/transport/shm.hpp>

#include "backend.hpp"
#include "work.hpp"

namespace tcoll_torch {

namespace {

/// Does the first of `rules` that covers `bytes` name `hierarchical`?
bool names_hierarchical(const std::vector<tcoll::size_rule>& rules, std::size_t bytes) {
  const tcoll::size_rule* r = tcoll::first_rule_covering(rules, bytes);
  return r && r->algorithm == tcoll::algorithm_id::hierarchical;
}

/// Where each of `sizes`' blocks starts when they lie one after another.
std::vector<std::size_t> starts_of(const std::vector<std::size_t>& sizes) {
  std::vector<std::size_t> starts(sizes.size());
  for (std::size_t q = 1; q < sizes.size(); ++q) starts[q] = starts[q - 1] + sizes[q - 1];
  return starts;
}

const char* op_name(c10d::ReduceOp::RedOpType op) {
  static const char* names[] = {"SUM",  "AVG", "PRODUCT", "MIN",        "MAX",
                                "BAND", "BOR", "BXOR",    "PREMUL_SUM", "UNUSED"};
  return names[static_cast<int>(op)];
}

/// A reduction of the backend: tcoll's runtime-typed op (every algorithm instantiated once
/// per element size, not per dtype and op) and whether it averages.
struct reduction {
  tcoll::scalar_type type;
  tcoll::reduce_kind kind;
  std::size_t lanes = 1; ///< elements of `type` per tensor element: 2 for complex dtypes
  tcoll::runtime_op op() const { return tcoll::runtime_op(type, kind); }
  /// Elements of `type` in tensor `t`.
  std::size_t count(const at::Tensor& t) const {
    return static_cast<std::size_t>(t.numel()) * lanes;
  }
  /// avg's final division of `n` elements at `data` by `nranks` (nothing for other kinds).
  void finalize(void* data, std::size_t n, int nranks) const {
    if (kind == tcoll::reduce_kind::avg) tcoll::finalize_average(type, data, n, nranks);
  }
};

/// The tcoll reduction of `op` on `dtype` (bool travels as uint8: SUM, MAX and BOR are
/// logical or, PRODUCT, MIN and BAND logical and, as NCCL's bool sum; BXOR xor; a complex
/// dtype as its real and imaginary parts, for SUM and AVG, as Gloo). Throws naming the
/// rank, op and dtype where tcoll has none.
reduction reduction_of(const c10d::ReduceOp& op, at::ScalarType dtype, int rank) {
  using R = c10d::ReduceOp;
  using tcoll::reduce_kind;
  using tcoll::scalar_type;
  if (at::isComplexType(dtype)) {
    TORCH_CHECK(op.op_ == R::SUM || op.op_ == R::AVG, "tcoll: rank ", rank, ": reduce op ",
                op_name(op.op_), " is not supported on dtype ", dtype, " (SUM and AVG are)");
    reduction r = reduction_of(op, c10::toRealValueType(dtype), rank);
    r.lanes = 2;
    return r;
  }
  std::optional<scalar_type> type;
  switch (dtype) {
  case at::kFloat:
    type = scalar_type::float32;
    break;
  case at::kDouble:
    type = scalar_type::float64;
    break;
  case at::kHalf:
    type = scalar_type::float16;
    break;
  case at::kBFloat16:
    type = scalar_type::bfloat16;
    break;
  case at::kChar:
    type = scalar_type::int8;
    break;
  case at::kByte:
  case at::kBool:
    type = scalar_type::uint8;
    break;
  case at::kShort:
    type = scalar_type::int16;
    break;
  case at::kInt:
    type = scalar_type::int32;
    break;
  case at::kLong:
    type = scalar_type::int64;
    break;
  default:
    TORCH_CHECK(false, "tcoll: rank ", rank, ": dtype ", dtype, " is not supported");
  }
  std::optional<reduce_kind> kind;
  if (dtype == at::kBool) {
    switch (op.op_) {
    case R::SUM:
    case R::MAX:
    case R::BOR:
      kind = reduce_kind::max;
      break;
    case R::PRODUCT:
    case R::MIN:
    case R::BAND:
      kind = reduce_kind::min;
      break;
    case R::BXOR:
      kind = reduce_kind::bxor;
      break;
    default:
      break;
    }
  } else {
    switch (op.op_) {
    case R::SUM:
      kind = reduce_kind::sum;
      break;
    case R::AVG:
      kind = reduce_kind::avg;
      break;
    case R::PRODUCT:
      kind = reduce_kind::prod;
      break;
    case R::MIN:
      kind = reduce_kind::min;
      break;
    case R::MAX:
      kind = reduce_kind::max;
      break;
    case R::BAND:
      kind = reduce_kind::band;
      break;
    case R::BOR:
      kind = reduce_kind::bor;
      break;
    case R::BXOR:
      kind = reduce_kind::bxor;
      break;
    default:
      break;
    }
  }
  TORCH_CHECK(kind && tcoll::reduces(*type, *kind), "tcoll: rank ", rank, ": reduce op ",
              op_name(op.op_), " is not supported on dtype ", dtype);
  return {*type, *kind};
}

/// Calls `f.template operator()<E>(op)` with the raw element type of `r`'s size and its
/// runtime op.
template <class F>
void with_reduction(const reduction& r, F&& f) {
  const tcoll::runtime_op op = r.op();
  tcoll::visit_element_size(tcoll::size_of(r.type),
                            [&]<class E>(tcoll::type_tag<E>) { f.template operator()<E>(op); });
}

} // namespace

/// Whether the collective being started on this thread is waited on at once by its caller
/// (torch's `asyncOp` false: `dist.all_reduce(x)` without `async_op=True`). Such a call
/// runs in the caller's thread whatever its size: handing it to the engine thread would
/// only add a wake-up to a wait that begins at once.
inline thread_local bool caller_waits = false;

/// Whether the collective that an override of `c10d::Backend` starts goes into torch's
/// Flight Recorder: the calls torch's dispatcher makes do, as they would through torch's
/// hook; `tcoll_torch.all_reduce` and `monitored_barrier`, which bypass it, do not.
inline thread_local bool call_traced = true;

/// Sets `caller_waits` and `call_traced` for the collective that an override of
/// `c10d::Backend` starts.
struct waited_call {
  explicit waited_call(bool async_op, bool traced = true) noexcept {
    caller_waits = !async_op;
    call_traced = traced;
  }
  ~waited_call() {
    caller_waits = false;
    call_traced = true;
  }
  waited_call(const waited_call&) = delete;
  waited_call& operator=(const waited_call&) = delete;
};

template <class Body>
c10::intrusive_ptr<c10d::Work> backend::enqueue(OpType type, std::vector<at::Tensor> outputs,
                                                const std::vector<at::Tensor>& inputs,
                                                const char* what, std::size_t bytes, Body body) {
  return with_flat([&](auto& t) {
    return enqueue_on(t, type, std::move(outputs), inputs, what, bytes,
                      [&t, body = std::move(body)](int tag) mutable { body(t, tag); });
  });
}

template <tcoll::collective C>
bool backend::on_machine(std::size_t rule_bytes) const {
  return machine_ && names_hierarchical(tcoll::selection_from_env<C>(), rule_bytes);
}

template <tcoll::collective C, class Run>
c10::intrusive_ptr<c10d::Work>
backend::enqueue_by_rule(OpType type, std::vector<at::Tensor> outputs,
                         const std::vector<at::Tensor>& inputs, const char* what, std::size_t bytes,
                         Run run) {
  if (on_machine<C>(bytes))
    return enqueue_on(
        *machine_, type, std::move(outputs), inputs, what, bytes,
        [run = std::move(run), this](const auto& tags) { run(*machine_, tags, machine_bytes); });
  return enqueue(type, std::move(outputs), inputs, what, bytes,
                 [run = std::move(run), bytes](auto& t, int tag) { run(t, tag, bytes); });
}

template <class Comm, class Body>
c10::intrusive_ptr<c10d::Work> backend::enqueue_on(Comm& c, OpType type,
                                                   std::vector<at::Tensor> outputs,
                                                   const std::vector<at::Tensor>& inputs,
                                                   const char* what, std::size_t bytes, Body body) {
  trace_entry entry = call_traced ? trace_->record(*this, type, inputs, outputs) : trace_entry{};
  if constexpr (std::is_same_v<Comm, std::remove_reference_t<decltype(*machine_)>>)
    machine_calls_.fetch_add(1, std::memory_order_relaxed);
  auto w = c10::make_intrusive<work>(rank_, type, std::move(outputs));
  w->set_trace(std::move(entry));
  recorded(w);
  ++sequence_;
  // A call made by a callback chained on an earlier call runs on the engine thread: the
  // calls queued before it run first, here, then it does (waiting for the engine would
  // wait for this very thread; running it before them would break the call order).
  const bool in_callback = tcoll::run_queued_here(c);
  // Across nodes a group has two engines, the machine's and the flat transport's: a call on
  // one must not overtake the calls still pending on the other (they may use the same
  // tensors; each engine keeps the order of its own calls only), so it waits for them
  // before it runs, here or on its engine, as a barrier waits for every earlier call.
  // A callback on the other engine's thread runs that engine's queue here first, as above
  // (those calls came first, and they cannot run while this thread waits; a wait for one
  // of them from here would run them too, but a call queued on this engine could not).
  std::vector<c10::intrusive_ptr<work>> elsewhere;
  if (machine_) {
    if (!in_callback) {
      (void)tcoll::run_queued_here(*machine_);
      with_flat([](auto& t) { (void)tcoll::run_queued_here(t); });
    }
    elsewhere = pending_elsewhere(&c);
  }
  // a call its caller waits for at once runs here too unless earlier calls are still
  // queued or running, which it must not overtake (they may use the same tensors); a
  // barrier waits for every earlier call, so it runs here only when none is left
  // (the engine's idleness takes its lock: asked only where it decides)
  const bool run_here =
      in_callback || (type == OpType::BARRIER ? caller_waits && tcoll::engine_is_idle(c)
                                              : bytes <= inline_max_bytes_ ||
                                                    (caller_waits && tcoll::engine_is_idle(c)));
  if (debug_enabled())
    std::fprintf(stderr, "[tcoll] rank %d: %s of %zu bytes%s\n", rank_, what, bytes,
                 run_here ? " (inline)" : "");
  if (run_here) {
    // Small calls run here, in the caller's thread: handing them to the engine thread
    // costs a wake-up (10-30 us on a loaded machine) that is longer than the collective
    // itself. They draw their message space now, like a queued call, so the call order
    // is kept; one that runs while the engine works on an earlier call is allowed (the
    // transport takes calls from several threads). The work is complete on return.
    std::exception_ptr error;
    try {
      for (const auto& e : elsewhere) e->wait(timeout_);
      tcoll::run_collective(c, body);
    } catch (...) {
      error = std::current_exception();
    }
    w->complete(error);
    return w;
  }
  w->set_drain([&c] { (void)tcoll::run_queued_here(c); });
  {
    std::lock_guard lock(queued_mutex_); // what a later barrier waits for
    std::erase_if(queued_, [](const auto& q) { return q.call.expired(); });
    queued_.push_back({c10::weak_intrusive_ptr<work>(w), &c});
  }
  try {
    // the engine may hold the call behind earlier ones: its recorded duration starts when
    // it runs (`w` outlives the body: the completion below holds it)
    tcoll::queue_collective(
        c,
        [started = w.get(), body = std::move(body), elsewhere = std::move(elsewhere),
         this](const auto& tags) mutable {
          for (const auto& e : elsewhere) e->wait(timeout_);
          elsewhere.clear();
          started->started();
          body(tags);
        },
        [w](std::exception_ptr error) { w->complete(error); });
  } catch (...) {
    w->complete(std::current_exception());
  }
  return w;
}

std::vector<c10::intrusive_ptr<work>> backend::pending_elsewhere(const void* engine) {
  std::vector<c10::intrusive_ptr<work>> pending;
  std::lock_guard lock(queued_mutex_);
  for (const auto& q : queued_)
    if (q.engine != engine)
      if (auto w = q.call.lock(); w && !w->isCompleted()) pending.push_back(std::move(w));
  return pending;
}

void backend::all_reduce_now(const at::Tensor& tensor, c10d::ReduceOp::RedOpType op) {
  TORCH_CHECK(tensor.defined() && tensor.layout() == at::kStrided && tensor.is_cpu(),
              "tcoll_torch.all_reduce: rank ", rank_, ": needs a dense CPU tensor");
  const waited_call waited(false, /*traced=*/false);
  std::vector<at::Tensor> tensors{tensor};
  const auto work = reduce_all(tensors, c10d::ReduceOp(op), OpType::ALLREDUCE, "all_reduce");
  work->wait();
}

c10::intrusive_ptr<c10d::Work> backend::allreduce(std::vector<at::Tensor>& tensors,
                                                  const c10d::AllreduceOptions& opts) {
  const waited_call waited(opts.asyncOp);
  // torch routes sparse CPU tensors here (its dispatcher's SparseCPU key), as to Gloo
  if (!tensors.empty() && tensors[0].defined() && tensors[0].layout() == at::kSparse)
    return sparse_allreduce(tensors, opts.reduceOp);
  return reduce_all(tensors, opts.reduceOp, OpType::ALLREDUCE, "allreduce");
}

c10::intrusive_ptr<c10d::Work> backend::allreduce_sparse(std::vector<at::Tensor>& tensors,
                                                         const c10d::AllreduceOptions& opts) {
  const waited_call waited(opts.asyncOp);
  return sparse_allreduce(tensors, opts.reduceOp);
}

c10::intrusive_ptr<c10d::Work>
backend::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                             const c10d::AllreduceCoalescedOptions& opts) {
  const waited_call waited(opts.asyncOp);
  return reduce_all(tensors, opts.reduceOp, OpType::ALLREDUCE_COALESCED, "allreduce_coalesced");
}

c10::intrusive_ptr<c10d::Work> backend::broadcast(std::vector<at::Tensor>& tensors,
                                                  const c10d::BroadcastOptions& opts) {
  const waited_call waited(opts.asyncOp);
  check_list(tensors, "broadcast", "tensors");
  const int root = check_root(opts.rootRank, "broadcast");
  const std::size_t total = total_bytes(tensors);
  return enqueue_by_rule<tcoll::collective::broadcast>(
      OpType::BROADCAST, tensors, tensors, "broadcast", total,
      [tensors, root, this](auto& c, const auto& tags, std::size_t call_bytes) {
        for (const auto& tensor : tensors) {
          const at::Tensor b = dense(tensor); // when it runs: after earlier calls
          tcoll::cpu_reducer red;
          // on shared memory: the collective area for small tensors (shared_memory_choice;
          // on 2 ranks with a CPU each at every size, in pieces), where the call is sure to
          // run in the caller's thread (see inline_choice_)
          const tcoll::algorithm_id a =
              call_bytes <= inline_max_bytes_
                  ? tcoll::shared_memory_choice{}.choose_broadcast(
                        b.nbytes(), size_, tcoll::shm_transport::ranks_have_cpus(size_))
                  : tcoll::algorithm_id::binomial_tree;
          tcoll::visit_algorithm<tcoll::collective::broadcast>(
              a,
              [&](const auto& algo) {
                tcoll::broadcast_in(c, tags, bytes_of(b), b.nbytes(), root, algo, red);
              },
              inline_choice_.in_segment_knobs);
          copy_back(tensor, b);
        }
      });
}

c10::intrusive_ptr<c10d::Work> backend::reduce(std::vector<at::Tensor>& tensors,
                                               const c10d::ReduceOptions& opts) {
  const waited_call waited(opts.asyncOp);
  check_list(tensors, "reduce", "tensors");
  TORCH_CHECK(tensors.size() == 1, "tcoll: reduce: rank ", rank_, ": takes one tensor");
  const int root = check_root(opts.rootRank, "reduce");
  const reduction r = reduction_of(opts.reduceOp, tensors[0].scalar_type(), rank_);
  return enqueue_by_rule<tcoll::collective::reduce>(
      OpType::REDUCE, tensors, tensors, "reduce", tensors[0].nbytes(),
      [tensor = tensors[0], root, r, this](auto& c, const auto& tags, std::size_t call_bytes) {
        const at::Tensor buffer = dense(tensor); // when it runs: after earlier calls
        const std::size_t n = r.count(buffer);
        with_reduction(r, [&]<class E>(const tcoll::runtime_op& o) {
          tcoll::cpu_reducer red;
          E* data = reinterpret_cast<E*>(buffer.data_ptr());
          E* out = rank_ == root ? data : nullptr;
          // the collective area where the call surely runs in the caller's thread (see
          // inline_choice_) and shared_memory_choice takes it for its size (on 2 ranks with
          // a CPU each at every size, in pieces)
          const tcoll::algorithm_id a =
              call_bytes <= inline_max_bytes_
                  ? tcoll::shared_memory_choice{}.choose_reduce(
                        buffer.nbytes(), size_, tcoll::shm_transport::ranks_have_cpus(size_))
                  : tcoll::algorithm_id::binomial_tree;
          tcoll::visit_algorithm<tcoll::collective::reduce>(
              a,
              [&](const auto& algo) {
                tcoll::reduce_in(c, tags, static_cast<const E*>(data), out, n, root, o, algo, red);
              },
              inline_choice_.in_segment_knobs);
        });
        if (rank_ == root) r.finalize(buffer.data_ptr(), n, size_);
        copy_back(tensor, buffer);
      });
}

c10::intrusive_ptr<c10d::Work> backend::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                  std::vector<at::Tensor>& inputs,
                                                  const c10d::AllgatherOptions& opts) {
  const waited_call waited(opts.asyncOp);
  TORCH_CHECK(inputs.size() == 1 && outputs.size() == 1, "tcoll: allgather: rank ", rank_,
              ": takes one input tensor and one output list");
  check_cpu(inputs[0], "allgather", "input", rank_);
  auto& list = outputs[0];
  check_list_size(list, "allgather", "output list");
  for (const auto& o : list) check_like(o, inputs[0], "allgather", "output tensor");
  at::Tensor in = dense(inputs[0]);
  at::Tensor gathered = at::empty({static_cast<std::int64_t>(size_) * in.numel()}, in.options());
  std::vector<at::Tensor> out_list = list;
  return enqueue_by_rule<tcoll::collective::allgather>(
      OpType::ALLGATHER, list, inputs, "allgather", gathered.nbytes(),
      [=, this](auto& c, const auto& tags, std::size_t call_bytes) {
        run_allgather(c, tags, in, gathered, call_bytes);
        for (int q = 0; q < size_; ++q)
          out_list[q].copy_(
              gathered.narrow(0, q * in.numel(), in.numel()).view(out_list[q].sizes()));
      });
}

c10::intrusive_ptr<c10d::Work>
backend::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                             std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) {
  const waited_call waited(opts.asyncOp);
  const char* what = "all_gather_coalesced";
  TORCH_CHECK(!inputs.empty(), "tcoll: ", what, ": rank ", rank_, ": no input tensors");
  TORCH_CHECK(static_cast<int>(outputs.size()) == size_, "tcoll: ", what, ": rank ", rank_, ": ",
              outputs.size(), " output lists, the group has ", size_, " ranks");
  std::vector<at::Tensor> ins, gathered, flat_outputs;
  std::size_t bytes = 0;
  for (const auto& list : outputs)
    TORCH_CHECK(list.size() == inputs.size(), "tcoll: ", what, ": rank ", rank_,
                ": an output list has ", list.size(), " tensors for ", inputs.size(), " inputs");
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    check_cpu(inputs[i], what, "input", rank_);
    for (const auto& list : outputs) check_like(list[i], inputs[i], what, "output tensor");
    ins.push_back(dense(inputs[i]));
    gathered.push_back(
        at::empty({static_cast<std::int64_t>(size_) * inputs[i].numel()}, inputs[i].options()));
    bytes += gathered.back().nbytes();
  }
  for (const auto& list : outputs)
    flat_outputs.insert(flat_outputs.end(), list.begin(), list.end());
  std::vector<std::vector<at::Tensor>> out_lists = outputs;
  auto run = [=, this](auto& c, const auto& tags, std::size_t call_bytes) {
    for (std::size_t i = 0; i < ins.size(); ++i) {
      run_allgather(c, tags, ins[i], gathered[i], call_bytes);
      const std::int64_t n = ins[i].numel();
      for (int q = 0; q < size_; ++q)
        out_lists[q][i].copy_(gathered[i].narrow(0, q * n, n).view(out_lists[q][i].sizes()));
    }
  };
  return enqueue_by_rule<tcoll::collective::allgather>(OpType::ALLGATHER_COALESCED, flat_outputs,
                                                       inputs, what, bytes, std::move(run));
}

c10::intrusive_ptr<c10d::Work> backend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                        const c10d::AllgatherOptions& opts) {
  const waited_call waited(opts.asyncOp);
  check_pair(output, input, "all_gather_into_tensor");
  TORCH_CHECK(output.numel() == input.numel() * size_, "tcoll: all_gather_into_tensor: rank ",
              rank_, ": output has ", output.numel(), " elements, expected ", size_, " x ",
              input.numel());
  at::Tensor in = dense(input), out = dense(output);
  auto run = [=, this](auto& c, const auto& tags, std::size_t call_bytes) {
    run_allgather(c, tags, in, out, call_bytes);
    copy_back(output, out);
  };
  const std::size_t bytes = out.nbytes();
  return enqueue_by_rule<tcoll::collective::allgather>(
      OpType::_ALLGATHER_BASE, {output}, {input}, "all_gather_into_tensor", bytes, std::move(run));
}

c10::intrusive_ptr<c10d::Work>
backend::all_gather_single_coalesced(std::vector<at::Tensor>& outputs,
                                     std::vector<at::Tensor>& inputs,
                                     const c10d::AllgatherOptions& opts) {
  const waited_call waited(opts.asyncOp);
  const char* what = "all_gather_into_tensor (coalesced)";
  check_pairs(outputs, inputs, what);
  std::vector<at::Tensor> ins, outs;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    check_pair(outputs[i], inputs[i], what);
    TORCH_CHECK(outputs[i].numel() == inputs[i].numel() * size_, "tcoll: ", what, ": rank ", rank_,
                ": output ", i, " has ", outputs[i].numel(), " elements, expected ", size_, " x ",
                inputs[i].numel());
    ins.push_back(dense(inputs[i]));
    outs.push_back(dense(outputs[i]));
  }
  const std::size_t call_bytes = total_bytes(outs);
  auto run = [=, this](auto& c, const auto& tags, std::size_t bytes) {
    for (std::size_t i = 0; i < ins.size(); ++i) {
      run_allgather(c, tags, ins[i], outs[i], bytes);
      copy_back(outputs[i], outs[i]);
    }
  };
  return enqueue_by_rule<tcoll::collective::allgather>(
      OpType::ALLGATHER_INTO_TENSOR_COALESCED, outputs, inputs, what, call_bytes, std::move(run));
}

c10::intrusive_ptr<c10d::Work>
backend::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                         std::vector<at::Tensor>& inputs,
                                         const c10d::AllgatherOptions& opts) {
  const waited_call waited(opts.asyncOp);
  return all_gather_single_coalesced(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work>
backend::reduce_scatter_single_coalesced(std::vector<at::Tensor>& outputs,
                                         std::vector<at::Tensor>& inputs,
                                         const c10d::ReduceScatterOptions& opts) {
  const waited_call waited(opts.asyncOp);
  const char* what = "reduce_scatter_tensor (coalesced)";
  check_pairs(outputs, inputs, what);
  std::vector<at::Tensor> ins, outs;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    check_pair(outputs[i], inputs[i], what);
    TORCH_CHECK(inputs[i].numel() == outputs[i].numel() * size_, "tcoll: ", what, ": rank ", rank_,
                ": input ", i, " has ", inputs[i].numel(), " elements, expected ", size_, " x ",
                outputs[i].numel());
    check_op(opts.reduceOp, outputs[i].scalar_type());
    ins.push_back(dense(inputs[i]));
    outs.push_back(dense(outputs[i]));
  }
  const std::size_t call_bytes = total_bytes(ins);
  auto run = [=, this](auto& c, const auto& tags, std::size_t bytes) {
    for (std::size_t i = 0; i < ins.size(); ++i) {
      run_reduce_scatter(c, tags, ins[i], outs[i], bytes, opts.reduceOp);
      copy_back(outputs[i], outs[i]);
    }
  };
  return enqueue_by_rule<tcoll::collective::reduce_scatter>(
      OpType::REDUCE_SCATTER_TENSOR_COALESCED, outputs, inputs, what, call_bytes, std::move(run));
}

c10::intrusive_ptr<c10d::Work>
backend::reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                         std::vector<at::Tensor>& inputs,
                                         const c10d::ReduceScatterOptions& opts) {
  const waited_call waited(opts.asyncOp);
  return reduce_scatter_single_coalesced(outputs, inputs, opts);
}

c10::intrusive_ptr<c10d::Work> backend::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                       std::vector<std::vector<at::Tensor>>& inputs,
                                                       const c10d::ReduceScatterOptions& opts) {
  const waited_call waited(opts.asyncOp);
  TORCH_CHECK(outputs.size() == 1 && inputs.size() == 1, "tcoll: reduce_scatter: rank ", rank_,
              ": takes one output tensor and one input list");
  check_cpu(outputs[0], "reduce_scatter", "output", rank_);
  check_list_size(inputs[0], "reduce_scatter", "input list");
  // inputs[0][q] is rank q's block: as large as rank q's output (blocks may differ in
  // size across ranks, as Gloo allows); this rank's block is as large as its output
  bool even = true;
  for (const auto& i : inputs[0]) {
    check_cpu(i, "reduce_scatter", "input tensor", rank_);
    TORCH_CHECK(i.scalar_type() == outputs[0].scalar_type(), "tcoll: reduce_scatter: rank ", rank_,
                ": input tensor dtype ", i.scalar_type(), " differs from the output's ",
                outputs[0].scalar_type());
    even = even && i.numel() == outputs[0].numel();
  }
  check_like(inputs[0][rank_], outputs[0], "reduce_scatter", "this rank's input tensor");
  check_op(opts.reduceOp, outputs[0].scalar_type());
  at::Tensor packed = at::cat(flattened(inputs[0]));
  at::Tensor out = dense(outputs[0]);
  // uneven blocks: tcoll's reduce_scatterv, block q's elements and where it starts
  std::vector<std::size_t> counts, offsets;
  for (const auto& i : inputs[0]) {
    offsets.push_back(counts.empty() ? 0 : offsets.back() + counts.back());
    counts.push_back(static_cast<std::size_t>(i.numel()));
  }
  // across nodes on the machine where a TCOLL_REDUCE_SCATTER_ALGO rule covering the input
  // says so, blocks of one size or not (every rank has every block's size), as the
  // preload's MPI_Reduce_scatter
  return enqueue_by_rule<tcoll::collective::reduce_scatter>(
      OpType::REDUCE_SCATTER, outputs, inputs[0], "reduce_scatter", packed.nbytes(),
      [=, this](auto& c, const auto& tags, std::size_t call_bytes) {
        if (even) {
          run_reduce_scatter(c, tags, packed, out, call_bytes, opts.reduceOp);
        } else {
          const reduction r = reduction_of(opts.reduceOp, packed.scalar_type(), rank_);
          with_reduction(r, [&]<class E>(const tcoll::runtime_op& o) {
            tcoll::cpu_reducer red;
            tcoll::reduce_scatterv_in(c, tags, reinterpret_cast<const E*>(packed.data_ptr()),
                                      reinterpret_cast<E*>(out.data_ptr()),
                                      std::span<const std::size_t>(counts),
                                      std::span<const std::size_t>(offsets), o, tcoll::ring{}, red);
          });
          r.finalize(out.data_ptr(), r.count(out), size_);
        }
        copy_back(outputs[0], out);
      });
}

c10::intrusive_ptr<c10d::Work>
backend::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                              const c10d::ReduceScatterOptions& opts) {
  const waited_call waited(opts.asyncOp);
  check_pair(output, input, "reduce_scatter_tensor");
  TORCH_CHECK(input.numel() == output.numel() * size_, "tcoll: reduce_scatter_tensor: rank ", rank_,
              ": input has ", input.numel(), " elements, expected ", size_, " x ", output.numel());
  check_op(opts.reduceOp, output.scalar_type());
  at::Tensor in = dense(input), out = dense(output);
  auto run = [=, this](auto& c, const auto& tags, std::size_t call_bytes) {
    run_reduce_scatter(c, tags, in, out, call_bytes, opts.reduceOp);
    copy_back(output, out);
  };
  const std::size_t bytes = in.nbytes();
  return enqueue_by_rule<tcoll::collective::reduce_scatter>(OpType::_REDUCE_SCATTER_BASE, {output},
                                                            {input}, "reduce_scatter_tensor", bytes,
                                                            std::move(run));
}

c10::intrusive_ptr<c10d::Work> backend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                      std::vector<int64_t>& output_splits,
                                                      std::vector<int64_t>& input_splits,
                                                      const c10d::AllToAllOptions& opts) {
  const waited_call waited(opts.asyncOp);
  check_pair(output, input, "all_to_all_single");
  const auto send_bytes = split_bytes(input, input_splits, "input_split_sizes");
  const auto recv_bytes = split_bytes(output, output_splits, "output_split_sizes");
  TORCH_CHECK(send_bytes[rank_] == recv_bytes[rank_], "tcoll: all_to_all_single: rank ", rank_,
              ": sends itself ", send_bytes[rank_], " bytes but expects ", recv_bytes[rank_]);
  // Without split sizes (torch's even form) every block has one size on every rank: the
  // library's choice by size (`alltoall_by_size`: the collective area for small calls on
  // shared memory, Bruck for short blocks on many ranks, TCOLL_ALLTOALL_ALGO), made at the
  // call, so a bad TCOLL_ALLTOALL_ALGO fails there; the area only where the call surely runs
  // in the caller's thread (see inline_choice_), elsewhere the exchange. With split sizes,
  // even ones, the exchange of blocks (or the machine's alltoallv, below): the ranks of one
  // call must choose alike, and a rank whose splits happen to be even while another's are
  // not would otherwise enter the area alone. Gloo decides so too (alltoall or alltoallv).
  const bool equal = input_splits.empty() && output_splits.empty();
  const std::size_t block = send_bytes[0];
  at::Tensor in = dense(input), out = dense(output);
  const std::size_t call_bytes = std::max(in.nbytes(), out.nbytes());
  // across nodes, a TCOLL_ALLTOALL_ALGO rule naming `hierarchical` for this size (with split
  // sizes: a TCOLL_ALLTOALLV_ALGO rule, which covers every size) runs the call on the
  // two-level machine, as under the preload (through the peers where the nodes have as many
  // ranks: shared memory inside a node, one message per peer node across)
  if (equal ? on_machine<tcoll::collective::alltoall>(call_bytes)
            : on_machine<tcoll::collective::alltoallv>(0))
    return enqueue_on(*machine_, OpType::ALLTOALL_BASE, {output}, {input}, "all_to_all_single",
                      call_bytes, [=, this](const auto& tags) {
                        tcoll::cpu_reducer red;
                        if (equal) {
                          tcoll::alltoall_in(*machine_, tags, bytes_of(in), bytes_of(out), block,
                                             false, tcoll::pairwise_exchange{}, red);
                        } else {
                          using blocks = std::span<const std::size_t>;
                          tcoll::alltoallv_in(*machine_, tags, bytes_of(in), blocks(send_bytes),
                                              blocks(starts_of(send_bytes)), bytes_of(out),
                                              blocks(recv_bytes), blocks(starts_of(recv_bytes)),
                                              false, tcoll::pairwise_exchange{}, red);
                        }
                        copy_back(output, out);
                      });
  tcoll::algorithm_id a =
      equal ? tcoll::alltoall_by_size{}.choose(block, size_, call_bytes <= inline_max_bytes_)
            : tcoll::algorithm_id::pairwise_exchange;
  if (a == tcoll::algorithm_id::in_segment && call_bytes > inline_max_bytes_)
    a = tcoll::algorithm_id::pairwise_exchange; // a TCOLL_ALLTOALL_ALGO rule, not inline here
  return enqueue(OpType::ALLTOALL_BASE, {output}, {input}, "all_to_all_single", call_bytes,
                 [=, this](auto& t, int tag) {
                   tcoll::cpu_reducer red;
                   if (equal) {
                     tcoll::visit_algorithm<tcoll::collective::alltoall>(
                         a,
                         [&](const auto& algo) {
                           tcoll::alltoall_in(t, tag, bytes_of(in), bytes_of(out), block, false,
                                              algo, red);
                         },
                         inline_choice_.in_segment_knobs);
                   } else {
                     std::vector<tcoll::exchange_block> blocks(size_);
                     std::size_t sent = 0, received = 0;
                     for (int q = 0; q < size_; ++q) {
                       blocks[q] = {bytes_of(in) + sent, send_bytes[q], bytes_of(out) + received,
                                    recv_bytes[q]};
                       sent += send_bytes[q];
                       received += recv_bytes[q];
                     }
                     tcoll::pairwise_exchange{}.exchange(
                         t, tag, std::span<const tcoll::exchange_block>(blocks), red);
                   }
                   copy_back(output, out);
                 });
}

c10::intrusive_ptr<c10d::Work> backend::alltoall(std::vector<at::Tensor>& outputs,
                                                 std::vector<at::Tensor>& inputs,
                                                 const c10d::AllToAllOptions& opts) {
  const waited_call waited(opts.asyncOp);
  const char* what = "all_to_all";
  check_list_size(inputs, what, "input list");
  check_list_size(outputs, what, "output list");
  std::vector<at::Tensor> ins, outs;
  std::size_t bytes = 0;
  for (int q = 0; q < size_; ++q) {
    check_pair(outputs[q], inputs[q], what);
    TORCH_CHECK(inputs[q].scalar_type() == inputs[0].scalar_type(), "tcoll: ", what, ": rank ",
                rank_, ": input ", q, " is ", inputs[q].scalar_type(), ", input 0 ",
                inputs[0].scalar_type());
    ins.push_back(dense(inputs[q]));
    outs.push_back(dense(outputs[q]));
    bytes += std::max(inputs[q].nbytes(), outputs[q].nbytes());
  }
  TORCH_CHECK(inputs[rank_].nbytes() == outputs[rank_].nbytes(), "tcoll: ", what, ": rank ", rank_,
              ": sends itself ", inputs[rank_].nbytes(), " bytes but expects ",
              outputs[rank_].nbytes());
  // across nodes, where a TCOLL_ALLTOALLV_ALGO rule names `hierarchical` (the lists' blocks
  // may differ in size, as all_to_all_single's split sizes): the machine's alltoallv, on the
  // blocks packed one after another
  if (on_machine<tcoll::collective::alltoallv>(0))
    return enqueue_on(
        *machine_, OpType::ALLTOALL, outputs, inputs, what, bytes, [=, this](const auto& tags) {
          std::vector<std::size_t> send_bytes, recv_bytes;
          for (int q = 0; q < size_; ++q) {
            send_bytes.push_back(ins[q].nbytes());
            recv_bytes.push_back(outs[q].nbytes());
          }
          const auto send_starts = starts_of(send_bytes);
          const auto recv_starts = starts_of(recv_bytes);
          std::vector<byte> packed(send_starts.back() + send_bytes.back());
          std::vector<byte> received(recv_starts.back() + recv_bytes.back());
          for (int q = 0; q < size_; ++q)
            std::memcpy(packed.data() + send_starts[q], bytes_of(ins[q]), send_bytes[q]);
          using blocks = std::span<const std::size_t>;
          tcoll::cpu_reducer red;
          tcoll::alltoallv_in(*machine_, tags, packed.data(), blocks(send_bytes),
                              blocks(send_starts), received.data(), blocks(recv_bytes),
                              blocks(recv_starts), false, tcoll::pairwise_exchange{}, red);
          for (int q = 0; q < size_; ++q) {
            std::memcpy(bytes_of(outs[q]), received.data() + recv_starts[q], recv_bytes[q]);
            copy_back(outputs[q], outs[q]);
          }
        });
  return enqueue(OpType::ALLTOALL, outputs, inputs, what, bytes, [=, this](auto& t, int tag) {
    std::vector<tcoll::exchange_block> blocks;
    for (int q = 0; q < size_; ++q)
      blocks.push_back({bytes_of(ins[q]), ins[q].nbytes(), bytes_of(outs[q]), outs[q].nbytes()});
    tcoll::cpu_reducer red;
    tcoll::pairwise_exchange{}.exchange(t, tag, std::span<const tcoll::exchange_block>(blocks),
                                        red);
    for (int q = 0; q < size_; ++q) copy_back(outputs[q], outs[q]);
  });
}

c10::intrusive_ptr<c10d::Work> backend::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                               std::vector<at::Tensor>& inputs,
                                               const c10d::GatherOptions& opts) {
  const waited_call waited(opts.asyncOp);
  TORCH_CHECK(inputs.size() == 1, "tcoll: gather: rank ", rank_, ": takes one input tensor");
  check_cpu(inputs[0], "gather", "input", rank_);
  const int root = check_root(opts.rootRank, "gather");
  std::vector<at::Tensor> list;
  if (rank_ == root) {
    TORCH_CHECK(outputs.size() == 1, "tcoll: gather: rank ", rank_,
                ": the root takes one output list");
    list = outputs[0];
    check_list_size(list, "gather", "output list");
    for (const auto& o : list) check_like(o, inputs[0], "gather", "output tensor");
  } else {
    TORCH_CHECK(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()),
                "tcoll: gather: rank ", rank_, ": only the root (", root,
                ") passes an output list");
  }
  at::Tensor in = dense(inputs[0]);
  const std::size_t gathered_bytes = in.nbytes() * static_cast<std::size_t>(size_);
  // across nodes, where a TCOLL_GATHER_ALGO rule names `hierarchical`: the machine's gather
  // (through the leaders) into one buffer at the root, then into its list
  if (on_machine<tcoll::collective::gather>(gathered_bytes))
    return enqueue_on(*machine_, OpType::GATHER, list, inputs, "gather", gathered_bytes,
                      [=, this](const auto& tags) {
                        std::vector<byte> gathered(rank_ == root ? gathered_bytes : 0);
                        tcoll::cpu_reducer red;
                        tcoll::gather_in(*machine_, tags, static_cast<const byte*>(bytes_of(in)),
                                         gathered.data(), in.nbytes(), root, {}, tcoll::linear{},
                                         red);
                        for (std::size_t q = 0; q < list.size(); ++q) {
                          const at::Tensor o = dense(list[q]);
                          std::memcpy(bytes_of(o), gathered.data() + q * in.nbytes(), in.nbytes());
                          copy_back(list[q], o);
                        }
                      });
  return enqueue(OpType::GATHER, list, inputs, "gather", gathered_bytes,
                 [=, this](auto& t, int tag) {
                   std::vector<at::Tensor> dense_list;
                   std::vector<tcoll::root_block> blocks;
                   for (const auto& o : list) {
                     dense_list.push_back(dense(o));
                     blocks.push_back({bytes_of(dense_list.back()), dense_list.back().nbytes()});
                   }
                   tcoll::cpu_reducer red;
                   tcoll::linear{}.gather(t, tag, root, bytes_of(in), in.nbytes(),
                                          std::span<const tcoll::root_block>(blocks), red);
                   for (std::size_t q = 0; q < list.size(); ++q) copy_back(list[q], dense_list[q]);
                 });
}

c10::intrusive_ptr<c10d::Work> backend::scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ScatterOptions& opts) {
  const waited_call waited(opts.asyncOp);
  TORCH_CHECK(outputs.size() == 1, "tcoll: scatter: rank ", rank_, ": takes one output tensor");
  check_cpu(outputs[0], "scatter", "output", rank_);
  const int root = check_root(opts.rootRank, "scatter");
  std::vector<at::Tensor> list;
  if (rank_ == root) {
    TORCH_CHECK(inputs.size() == 1, "tcoll: scatter: rank ", rank_,
                ": the root takes one input list");
    check_list_size(inputs[0], "scatter", "input list");
    for (const auto& i : inputs[0]) check_like(i, outputs[0], "scatter", "input tensor");
    list = flattened(inputs[0]);
  }
  at::Tensor out = dense(outputs[0]);
  const std::size_t scattered_bytes = out.nbytes() * static_cast<std::size_t>(size_);
  const std::vector<at::Tensor> read = rank_ == root ? inputs[0] : std::vector<at::Tensor>{};
  // across nodes, where a TCOLL_SCATTER_ALGO rule names `hierarchical`: the root's list in
  // one buffer, then the machine's scatter (through the leaders)
  if (on_machine<tcoll::collective::scatter>(scattered_bytes))
    return enqueue_on(
        *machine_, OpType::SCATTER, outputs, read, "scatter", scattered_bytes,
        [=, this](const auto& tags) {
          std::vector<byte> packed(rank_ == root ? scattered_bytes : 0);
          for (std::size_t q = 0; q < list.size(); ++q)
            std::memcpy(packed.data() + q * out.nbytes(), bytes_of(list[q]), out.nbytes());
          tcoll::cpu_reducer red;
          tcoll::scatter_in(*machine_, tags, static_cast<const byte*>(packed.data()), bytes_of(out),
                            out.nbytes(), root, {}, tcoll::linear{}, red);
          copy_back(outputs[0], out);
        });
  return enqueue(OpType::SCATTER, outputs, read, "scatter", scattered_bytes,
                 [=, this](auto& t, int tag) {
                   std::vector<tcoll::root_block> blocks;
                   for (const auto& i : list) blocks.push_back({bytes_of(i), i.nbytes()});
                   tcoll::cpu_reducer red;
                   tcoll::linear{}.scatter(t, tag, root, bytes_of(out), out.nbytes(),
                                           std::span<const tcoll::root_block>(blocks), red);
                   copy_back(outputs[0], out);
                 });
}

c10::intrusive_ptr<c10d::Work> backend::barrier(const c10d::BarrierOptions& opts) {
  const waited_call waited(opts.asyncOp);
  // a one-byte allreduce in the call order (a barrier is a collective like the others),
  // after every earlier call of this group has finished, as Gloo's barrier: those queued
  // on the same engine ran before it, others (the hierarchy's) are waited for
  at::Tensor token = at::zeros({1}, at::kByte);
  std::vector<c10::weak_intrusive_ptr<work>> earlier;
  {
    std::lock_guard lock(queued_mutex_);
    for (const auto& q : queued_) earlier.push_back(q.call);
  }
  // across nodes, where a TCOLL_BARRIER_ALGO rule names `hierarchical`: the machine's
  // barrier (inside each node, then among the leaders, then inside again)
  if (on_machine<tcoll::collective::barrier>(0))
    return enqueue_on(*machine_, OpType::BARRIER, {}, {}, "barrier", 1,
                      [=, this](const auto& tags) {
                        for (const auto& e : earlier)
                          if (auto w = e.lock()) w->wait(timeout_);
                        tcoll::cpu_reducer red;
                        tcoll::barrier_in(*machine_, tags, tcoll::dissemination{}, red);
                      });
  return enqueue(OpType::BARRIER, {}, {}, "barrier", 1, [=, this](auto& t, int tag) {
    for (const auto& e : earlier)
      if (auto w = e.lock()) w->wait(timeout_);
    tcoll::cpu_reducer red;
    tcoll::allreduce_in(t, tag, token.data_ptr<byte>(), token.data_ptr<byte>(), 1, tcoll::max_op{},
                        tcoll::recursive_doubling{}, red);
  });
}

void backend::monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) {
  // the caller waits for it at once; torch's dispatcher (and its recorder) never sees it
  const waited_call waited(false, /*traced=*/false);
  const auto limit = opts.timeout == c10d::kUnsetTimeout ? timeout_ : opts.timeout;
  const auto ms = static_cast<long long>(limit.count());
  auto w = enqueue(OpType::BARRIER, {}, {}, "monitored_barrier", 0, [=, this](auto& t, int tag) {
    const auto until = tcoll::clock::now() + limit;
    byte token = 0;
    if (rank_ != 0) {
      try {
        auto sr = t.isend(0, &token, 1, tag);
        t.wait(sr, until);
        auto rr = t.irecv(0, &token, 1, tag);
        t.wait(rr, until);
      } catch (const std::exception& e) {
        TORCH_CHECK(false, "Rank ", rank_,
                    " successfully reached monitoredBarrier, but received errors while waiting "
                    "for send/recv from rank 0. Please check rank 0 logs for faulty rank. (",
                    e.what(), ")");
      }
      return;
    }
    std::vector<byte> tokens(static_cast<std::size_t>(size_));
    using request = typename std::remove_cvref_t<decltype(t)>::request;
    std::vector<std::optional<request>> pending(static_cast<std::size_t>(size_));
    for (int q = 1; q < size_; ++q) pending[q].emplace(t.irecv(q, &tokens[q], 1, tag));
    // poll rather than wait, so that one rank's silence does not use up another's time
    std::vector<int> late;
    for (;;) {
      late.clear();
      for (int q = 1; q < size_; ++q)
        if (pending[q] && t.test(*pending[q]))
          pending[q].reset();
        else if (pending[q])
          late.push_back(q);
      if (late.empty() || tcoll::clock::now() >= until) break;
      std::this_thread::yield();
    }
    if (!late.empty() && !wait_all_ranks && late.size() == static_cast<std::size_t>(size_ - 1) &&
        limit.count() <= 0) {
      // Gloo's words when the time is up before rank 0 waits for anyone
      TORCH_CHECK(false, "Rank 0 timed out in monitoredBarrier after ", ms,
                  " ms.\nNo ranks successfully processed in monitoredBarrier.");
    }
    if (!late.empty()) {
      std::string ranks;
      for (int q : wait_all_ranks ? late : std::vector<int>{late.front()})
        ranks += (ranks.empty() ? "" : ", ") + std::to_string(q);
      TORCH_CHECK(false, "[Rank 0]: Rank", wait_all_ranks ? "s " : " ", ranks,
                  " failed to pass monitoredBarrier in ", ms, " ms");
    }
    for (int q = 1; q < size_; ++q) {
      auto sr = t.isend(q, &token, 1, tag);
      t.wait(sr, until);
    }
  });
  w->wait();
}

double backend::time_raw_allreduce(std::size_t bytes, int iters) {
  std::vector<float> data(std::max<std::size_t>(1, bytes / sizeof(float)), 0.5f);
  auto once = [&] {
    if (machine_)
      tcoll::allreduce(*machine_, data.data(), data.data(), data.size(), tcoll::sum_op{},
                       tcoll::hierarchical_options<tcoll::ring>{});
    else
      tcoll::allreduce(*shm_, std::span<float>(data));
  };
  for (int k = 0; k < 10; ++k) once();
  const auto start = std::chrono::steady_clock::now();
  for (int k = 0; k < iters; ++k) once();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iters;
}

c10::intrusive_ptr<c10d::Work> backend::reduce_all(std::vector<at::Tensor>& tensors,
                                                   const c10d::ReduceOp& op, OpType type,
                                                   const char* what) {
  check_list(tensors, what, "tensors");
  // PREMUL_SUM (torch.distributed._make_nccl_premul_sum): each rank scales its input by
  // the factor, then a sum (floating-point dtypes only, as NCCL)
  std::optional<at::Tensor> factor;
  c10d::ReduceOp run_op = op;
  if (op.op_ == c10d::ReduceOp::PREMUL_SUM) {
    const auto* s = dynamic_cast<const c10d::PreMulSumSupplement*>(op.supplement_.get());
    TORCH_CHECK(s, "tcoll: ", what, ": rank ", rank_, ": PREMUL_SUM without its factor");
    factor = s->tensor_factor.defined() ? s->tensor_factor.to(at::kCPU)
                                        : at::scalar_tensor(s->double_factor, at::kDouble);
    run_op = c10d::ReduceOp(c10d::ReduceOp::SUM);
    for (auto& t : tensors)
      TORCH_CHECK(at::isFloatingType(t.scalar_type()), "tcoll: ", what, ": rank ", rank_,
                  ": PREMUL_SUM needs a floating-point dtype, got ", t.scalar_type());
  }
  std::vector<reduction> reductions;
  for (auto& t : tensors) reductions.push_back(reduction_of(run_op, t.scalar_type(), rank_));
  // every tensor in turn: reduce_one(data, count, op) runs one allreduce in place. A
  // tensor that is not contiguous is copied when the call runs, not when it is made, so
  // calls queued on one tensor see each other's results in call order. The closures own
  // one copy of the tensor list, moved on from here (each copy is an allocation and an
  // atomic count per tensor, per call).
  auto each = [tensors, factor = std::move(factor), reductions = std::move(reductions),
               this](auto&& reduce_one) {
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      const at::Tensor b = dense(tensors[i]);
      if (factor) b.mul_(*factor);
      const std::size_t n = reductions[i].count(b);
      with_reduction(reductions[i], [&]<class E>(const tcoll::runtime_op& o) {
        reduce_one(reinterpret_cast<E*>(b.data_ptr()), n, o);
      });
      reductions[i].finalize(b.data_ptr(), n, size_);
      copy_back(tensors[i], b);
    }
  };
  const std::size_t total = total_bytes(tensors);
  if (machine_) // across nodes: shared memory inside each node, MPI or Gloo between them
    return enqueue_on(*machine_, type, tensors, tensors, what, total,
                      [each = std::move(each), this](const auto& tags) {
                        each([&](auto* data, std::size_t n, const auto& o) {
                          tcoll::cpu_reducer red;
                          tcoll::allreduce_in(*machine_, tags, data, data, n, o,
                                              tcoll::hierarchical_options<tcoll::ring>{}, red);
                        });
                      });
  const tcoll::automatic* choice = &allreduce_choice(total);
  return enqueue(
      type, tensors, tensors, what, total,
      [each = std::move(each), choice, this](auto& t, int tag) {
        each([&](auto* data, std::size_t n, const auto& o) {
          using T = std::remove_pointer_t<decltype(data)>;
          // small calls run in the segment's collective area (in_segment): staging them would
          // only add a copy
          if constexpr (std::is_same_v<std::remove_cvref_t<decltype(t)>, tcoll::shm_transport>)
            if (staging_bytes_ && n * sizeof(T) <= staging_bytes_ &&
                n * sizeof(T) > staged_choice_.shared_memory.in_segment_up_to_bytes)
              return staged_allreduce(t, tag, data, n, o);
          tcoll::cpu_reducer red;
          tcoll::allreduce_in(t, tag, static_cast<const T*>(data), data, n, o, *choice, red);
        });
      });
}

template <class T>
void backend::staged_allreduce(tcoll::shm_transport& t, int tag, T* data, std::size_t n,
                               const tcoll::runtime_op& op) {
  tcoll::cpu_reducer red;
  for (auto& s : staging_) {
    std::unique_lock held(s.busy, std::try_to_lock);
    if (!held) continue;
    T* in = reinterpret_cast<T*>(s.memory.data());
    std::memcpy(in, data, n * sizeof(T));
    tcoll::allreduce_in(t, tag, static_cast<const T*>(in), data, n, op, staged_choice_, red);
    return;
  }
  tcoll::allreduce_in(t, tag, static_cast<const T*>(data), data, n, op, staged_choice_, red);
}

c10::intrusive_ptr<c10d::Work> backend::sparse_allreduce(std::vector<at::Tensor>& tensors,
                                                         const c10d::ReduceOp& op) {
  const char* what = "allreduce (sparse)";
  TORCH_CHECK(tensors.size() == 1, "tcoll: ", what, ": rank ", rank_,
              ": takes one sparse tensor, got ", tensors.size());
  const at::Tensor& user = tensors[0];
  TORCH_CHECK(user.defined() && user.device().is_cpu(), "tcoll: ", what, ": rank ", rank_,
              ": the tensor must be a defined CPU tensor");
  TORCH_CHECK(user.layout() == at::kSparse, "tcoll: ", what, ": rank ", rank_, ": the tensor is ",
              user.layout(), ", not sparse COO (to_sparse_coo())");
  const bool average = op.op_ == c10d::ReduceOp::AVG;
  TORCH_CHECK(op.op_ == c10d::ReduceOp::SUM || (average && at::isFloatingType(user.scalar_type())),
              "tcoll: ", what, ": rank ", rank_, ": reduce op ", op_name(op.op_),
              " is not supported on sparse tensors of dtype ", user.scalar_type(),
              " (SUM, and AVG for floating point)");
  constexpr std::int64_t max_dims = sparse_meta_slots - 5;
  TORCH_CHECK(user.dim() <= max_dims, "tcoll: ", what, ": rank ", rank_, ": the tensor has ",
              user.dim(), " dimensions, at most ", max_dims, " are supported");
  at::Tensor in = user.coalesce();
  // what every rank checks of every other: dimensions, dtype, count, sizes
  at::Tensor meta = at::full({sparse_meta_slots}, -1, at::kLong);
  {
    auto m = meta.accessor<std::int64_t, 1>();
    m[0] = in.dim(), m[1] = in.sparse_dim(), m[2] = in.dense_dim(), m[3] = in._nnz();
    m[4] = static_cast<std::int64_t>(in.scalar_type());
    for (std::int64_t d = 0; d < in.dim(); ++d) m[5 + d] = in.size(d);
  }
  const std::size_t bytes = in._indices().nbytes() + in._values().nbytes();
  return enqueue(OpType::ALLREDUCE, tensors, tensors, what, bytes, [=, this](auto& t, int tag) {
    const int P = size_;
    at::Tensor metas = at::empty({P, sparse_meta_slots}, at::kLong);
    run_allgather(t, tag, meta, metas, SIZE_MAX); // the call's size differs across ranks
    const auto m = metas.accessor<std::int64_t, 2>();
    std::int64_t max_nnz = 0;
    for (int q = 0; q < P; ++q) {
      for (int k : {0, 1, 2, 4}) {
        static const char* names[] = {"dimensions", "sparse dimensions", "dense dimensions", "",
                                      "dtype"};
        TORCH_CHECK(m[q][k] == m[0][k], "tcoll: ", what, ": rank ", rank_, ": rank ", q,
                    "'s tensor has ", m[q][k], " as its ", names[k], ", rank 0's has ", m[0][k],
                    k == 4 ? " (dtype codes)" : "");
      }
      for (std::int64_t d = 0; d < m[0][0]; ++d)
        TORCH_CHECK(m[q][5 + d] == m[0][5 + d], "tcoll: ", what, ": rank ", rank_, ": rank ", q,
                    "'s tensor has size ", m[q][5 + d], " in dimension ", d, ", rank 0's has ",
                    m[0][5 + d]);
      max_nnz = std::max(max_nnz, m[q][3]);
    }
    const std::int64_t nnz = in._nnz();
    // padded to the largest count, so one fixed-size allgather carries each part
    at::Tensor indices = at::zeros({max_nnz, in.sparse_dim()}, at::kLong);
    indices.narrow(0, 0, nnz).copy_(in._indices().t());
    std::vector<std::int64_t> value_sizes = in._values().sizes().vec();
    value_sizes[0] = max_nnz;
    at::Tensor values = at::zeros(value_sizes, in._values().options());
    values.narrow(0, 0, nnz).copy_(in._values());
    std::vector<std::int64_t> all_index_sizes = {P * max_nnz, in.sparse_dim()};
    std::vector<std::int64_t> all_value_sizes = value_sizes;
    all_value_sizes[0] = P * max_nnz;
    at::Tensor all_indices = at::empty(all_index_sizes, at::kLong);
    at::Tensor all_values = at::empty(all_value_sizes, values.options());
    if (indices.nbytes() > 0) run_allgather(t, tag, indices, all_indices, SIZE_MAX);
    if (values.nbytes() > 0) run_allgather(t, tag, values, all_values, SIZE_MAX);
    at::Tensor sum;
    for (int q = 0; q < P; ++q) {
      const std::int64_t n = m[q][3];
      // each rank's part is coalesced (sorted, no repeats): sums of two such merge in
      // index order, element by element, rank 0 first
      at::Tensor part = at::sparse_coo_tensor(all_indices.narrow(0, q * max_nnz, n).t(),
                                              all_values.narrow(0, q * max_nnz, n), in.sizes(),
                                              values.options().layout(at::kSparse))
                            ._coalesced_(true);
      sum = q == 0 ? part : at::add(sum, part);
    }
    sum = sum.coalesce();
    if (average) sum._values().div_(P);
    tensors[0].copy_(sum);
  });
}

template <class Comm, class Tags>
void backend::run_allgather(Comm& t, const Tags& tag, const at::Tensor& in, const at::Tensor& out,
                            std::size_t call_bytes) {
  tcoll::cpu_reducer red;
  const auto* from = static_cast<const byte*>(bytes_of(in));
  const tcoll::algorithm_id a = call_bytes <= inline_max_bytes_
                                    ? tcoll::shared_memory_choice{}.choose_allgather(out.nbytes())
                                    : tcoll::algorithm_id::ring;
  tcoll::visit_algorithm<tcoll::collective::allgather>(
      a,
      [&](const auto& algo) {
        tcoll::allgather_in(t, tag, from, bytes_of(out), in.nbytes(), algo, red);
      },
      inline_choice_.in_segment_knobs);
}

template <class Comm, class Tags>
void backend::run_reduce_scatter(Comm& t, const Tags& tag, const at::Tensor& in,
                                 const at::Tensor& out, std::size_t call_bytes,
                                 const c10d::ReduceOp& op) {
  const reduction r = reduction_of(op, in.scalar_type(), rank_);
  const std::size_t n = r.count(out);
  const tcoll::algorithm_id a =
      call_bytes <= inline_max_bytes_
          ? tcoll::shared_memory_choice{}.choose_reduce_scatter(in.nbytes())
          : tcoll::algorithm_id::ring;
  with_reduction(r, [&]<class E>(const tcoll::runtime_op& o) {
    tcoll::cpu_reducer red;
    const auto* from = reinterpret_cast<const E*>(in.data_ptr());
    auto* to = reinterpret_cast<E*>(out.data_ptr());
    tcoll::visit_algorithm<tcoll::collective::reduce_scatter>(
        a, [&](const auto& algo) { tcoll::reduce_scatter_in(t, tag, from, to, n, o, algo, red); },
        inline_choice_.in_segment_knobs);
  });
  r.finalize(out.data_ptr(), n, size_);
}

std::size_t backend::total_bytes(const std::vector<at::Tensor>& tensors) {
  std::size_t n = 0;
  for (const auto& t : tensors) n += t.nbytes();
  return n;
}

byte* backend::bytes_of(const at::Tensor& t) {
  return static_cast<byte*>(t.data_ptr());
}

void backend::copy_back(const at::Tensor& user, const at::Tensor& ran_on) {
  if (!user.is_same(ran_on)) user.copy_(ran_on);
}

std::vector<at::Tensor> backend::flattened(const std::vector<at::Tensor>& list) {
  std::vector<at::Tensor> out;
  for (const auto& t : list) out.push_back(t.contiguous().view(-1));
  return out;
}

void backend::check_list(const std::vector<at::Tensor>& tensors, const char* what,
                         const char* argument) {
  TORCH_CHECK(!tensors.empty(), "tcoll: ", what, ": rank ", rank_, ": ", argument, " is empty");
  for (const auto& t : tensors) check_cpu(t, what, argument, rank_);
}

void backend::check_pairs(const std::vector<at::Tensor>& outputs,
                          const std::vector<at::Tensor>& inputs, const char* what) {
  TORCH_CHECK(!inputs.empty() && outputs.size() == inputs.size(), "tcoll: ", what, ": rank ", rank_,
              ": ", outputs.size(), " outputs for ", inputs.size(), " inputs");
}

void backend::check_list_size(const std::vector<at::Tensor>& list, const char* what,
                              const char* argument) {
  TORCH_CHECK(static_cast<int>(list.size()) == size_, "tcoll: ", what, ": rank ", rank_, ": ",
              argument, " has ", list.size(), " tensors, the group has ", size_, " ranks");
}

void backend::check_pair(const at::Tensor& output, const at::Tensor& input, const char* what) {
  check_cpu(input, what, "input", rank_);
  check_cpu(output, what, "output", rank_);
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "tcoll: ", what, ": rank ", rank_,
              ": output dtype ", output.scalar_type(), " differs from input dtype ",
              input.scalar_type());
}

void backend::check_op(const c10d::ReduceOp& op, at::ScalarType dtype) {
  (void)reduction_of(op, dtype, rank_);
}

void backend::check_like(const at::Tensor& t, const at::Tensor& like, const char* what,
                         const char* argument) {
  check_cpu(t, what, argument, rank_);
  TORCH_CHECK(t.scalar_type() == like.scalar_type() && t.numel() == like.numel(), "tcoll: ", what,
              ": rank ", rank_, ": ", argument, " (", t.scalar_type(), ", ", t.numel(),
              " elements) does not match (", like.scalar_type(), ", ", like.numel(), " elements)");
}

int backend::check_root(std::int64_t root, const char* what) {
  TORCH_CHECK(root >= 0 && root < size_, "tcoll: ", what, ": rank ", rank_, ": root ", root,
              " is outside [0, ", size_, ")");
  return static_cast<int>(root);
}

std::vector<std::size_t> backend::split_bytes(const at::Tensor& t,
                                              const std::vector<int64_t>& splits,
                                              const char* argument) {
  const std::int64_t rows = t.dim() > 0 ? t.size(0) : 1;
  const std::size_t row_bytes = rows > 0 ? t.nbytes() / static_cast<std::size_t>(rows) : 0;
  std::vector<std::size_t> bytes(static_cast<std::size_t>(size_));
  if (splits.empty()) {
    TORCH_CHECK(rows % size_ == 0, "tcoll: all_to_all_single: rank ", rank_, ": dimension 0 (",
                rows, ") is not divisible by the group size ", size_, " and no ", argument,
                " was given");
    for (auto& b : bytes) b = static_cast<std::size_t>(rows / size_) * row_bytes;
    return bytes;
  }
  TORCH_CHECK(static_cast<int>(splits.size()) == size_, "tcoll: all_to_all_single: rank ", rank_,
              ": ", argument, " has ", splits.size(), " entries, the group has ", size_);
  std::int64_t total = 0;
  for (int q = 0; q < size_; ++q) {
    TORCH_CHECK(splits[q] >= 0, "tcoll: all_to_all_single: rank ", rank_, ": ", argument, "[", q,
                "] is negative");
    total += splits[q];
    bytes[q] = static_cast<std::size_t>(splits[q]) * row_bytes;
  }
  TORCH_CHECK(total == rows, "tcoll: all_to_all_single: rank ", rank_, ": ", argument, " sum to ",
              total, ", dimension 0 is ", rows);
  return bytes;
}

} // namespace tcoll_torch
