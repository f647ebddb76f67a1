// The `torch.distributed` backend "tcoll" for CPU tensors (docs/torch.md).
//
// One `tcoll_torch::backend` per process group. On one node its transport is tcoll's
// shm_transport, built through the c10d::Store that PyTorch hands the backend
// (store_bootstrap), so no MPI is needed. Across nodes, allreduce is hierarchical (shared
// memory inside each node, internode_transport between nodes: MPI under an MPI launcher,
// otherwise Gloo's send/recv) and the other collectives run on internode_transport over
// every rank. Calls of at most 64 KiB per rank run at once in the caller's thread; larger
// ones queue on the transport's communication engine (one thread per transport, calls in
// call order, MPI's rule). Either way the call returns a `work` whose future carries the
// output tensors, so DDP comm hooks chain on it. Point-to-point send/recv are posted on the
// transport at once and complete in wait().
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/extension.h>

#include <pybind11/chrono.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <tcoll/algorithm/hierarchical.hpp>
#include <tcoll/algorithm/pairwise_exchange.hpp>
#include <tcoll/collectives.hpp>
#include <tcoll/schedule/collective_tasks.hpp>
#include <tcoll/schedule/engine.hpp>
#include <tcoll/transport/shm.hpp>

#include "backend_access.hpp"
#include "internode_transport.hpp"
#include "mpi_link.hpp"

namespace tcoll_torch {

using c10d::OpType;
using byte = std::uint8_t;

/// The Work of one call: completed by the engine thread or, for a small call, by the
/// caller's (`complete`). Its future carries the output tensors; it is made on the first
/// `getFuture()` (most calls are only waited), completed at once if the work already is.
class work final : public c10d::Work {
public:
  work(int rank, OpType type, std::vector<at::Tensor> outputs)
      : c10d::Work(rank, type), outputs_(std::move(outputs)) {}

  std::vector<at::Tensor> result() override { return outputs_; }

  /// `drain()` runs the engine's queue in the calling thread when that is the engine's own
  /// (a callback chained on an earlier call), so a wait there cannot wait for itself.
  void set_drain(std::function<void()> drain) { drain_ = std::move(drain); }
  bool wait(std::chrono::milliseconds timeout) override {
    if (drain_ && !isCompleted()) drain_();
    return c10d::Work::wait(timeout);
  }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    if (drain_ && !isCompleted()) drain_(); // the future may be waited on next
    std::unique_lock lock(future_mutex_);
    if (!future_) {
      static const c10::TypePtr list_of_tensors = c10::ListType::create(c10::TensorType::get());
      future_ = c10::make_intrusive<c10::ivalue::Future>(list_of_tensors);
      if (settled_) {
        lock.unlock();
        settle_future(future_);
      }
    }
    return future_;
  }

  /// Marks the call finished (`error` null: succeeded); wakes wait() and runs the future's
  /// callbacks on this thread.
  void complete(std::exception_ptr error) {
    finish(error);
    c10::intrusive_ptr<c10::ivalue::Future> future;
    {
      std::lock_guard lock(future_mutex_);
      settled_ = true;
      future = future_;
    }
    if (future) settle_future(future);
  }

private:
  void settle_future(const c10::intrusive_ptr<c10::ivalue::Future>& future) {
    if (exception_)
      future->setError(exception_);
    else
      future->markCompleted(c10::IValue(outputs_));
  }
  std::vector<at::Tensor> outputs_;
  std::function<void()> drain_;
  std::mutex future_mutex_;
  bool settled_ = false;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

/// A point-to-point send or receive: posted at once, driven to completion by wait() or
/// isCompleted() (the transport progresses a transfer when its owner tests or waits).
template <class Tr>
class p2p_work final : public c10d::Work {
public:
  p2p_work(int rank, OpType type, Tr& t, typename Tr::request r, at::Tensor tensor, at::Tensor user,
           int peer)
      : c10d::Work(rank, type), t_(t), request_(std::move(r)), tensor_(std::move(tensor)),
        user_(std::move(user)), peer_(peer) {}

  bool isCompleted() override {
    std::lock_guard lock(progress_);
    return drive();
  }
  /// isCompleted() for the progress thread: skips the test while a waiter drives the
  /// transfer (it holds the lock for as long as it waits).
  bool poll() {
    std::unique_lock lock(progress_, std::try_to_lock);
    return lock ? drive() : false;
  }
  bool wait(std::chrono::milliseconds timeout) override {
    {
      std::lock_guard lock(progress_);
      if (!completed_) try {
          const auto limit = timeout == kNoTimeout ? t_.timeout() : std::min(timeout, t_.timeout());
          t_.wait(request_, tcoll::clock::now() + limit);
          settle(nullptr);
        } catch (...) {
          settle(std::current_exception());
        }
    }
    return c10d::Work::wait(timeout);
  }
  int sourceRank() const override { return peer_; }
  std::vector<at::Tensor> result() override { return {user_}; }

private:
  bool drive() {
    if (!completed_) try {
        if (t_.test(request_)) settle(nullptr);
      } catch (...) {
        settle(std::current_exception());
      }
    return completed_;
  }
  void settle(std::exception_ptr error) {
    if (!error && user_.defined() && !user_.is_same(tensor_)) user_.copy_(tensor_);
    finish(error);
  }
  std::mutex progress_;
  Tr& t_;
  typename Tr::request request_;
  at::Tensor tensor_, user_;
  int peer_;
};

/// The order of a group's receives from any source: per tag, the tickets of those not yet
/// matched. Only the oldest of a tag may take a message, so receives of one tag without a
/// source match in the order they were posted (MPI's rule), whichever thread drives them.
class any_source_order {
public:
  std::uint64_t enter(int tag) {
    std::lock_guard lock(mutex_);
    pending_[tag].insert(++last_);
    return last_;
  }
  bool first(int tag, std::uint64_t ticket) {
    std::lock_guard lock(mutex_);
    auto it = pending_.find(tag);
    return it != pending_.end() && *it->second.begin() == ticket;
  }
  void leave(int tag, std::uint64_t ticket) {
    std::lock_guard lock(mutex_);
    auto it = pending_.find(tag);
    if (it == pending_.end()) return;
    it->second.erase(ticket);
    if (it->second.empty()) pending_.erase(it);
  }

private:
  std::mutex mutex_;
  std::uint64_t last_ = 0;
  std::map<int, std::set<std::uint64_t>> pending_;
};

/// A receive from any source (`recv`/`irecv` without `src`): while unmatched it probes the
/// peers in turn (rank + 1, rank + 2, ... mod size) and posts an ordinary receive to the
/// first that has a message of its tag waiting; `sourceRank()` names that peer.
/// Unmatched, it has no deadline until it is waited on (an `irecv` may be posted long before
/// its sender sends); `wait` gives matching and receiving the group's timeout together.
template <class Tr>
class any_source_work final : public c10d::Work {
public:
  any_source_work(int rank, int size, Tr& t, int tag, at::Tensor tensor, at::Tensor user,
                  std::shared_ptr<any_source_order> order)
      : c10d::Work(rank, OpType::RECVANYSOURCE), rank_(rank), size_(size), t_(t), tag_(tag),
        tensor_(std::move(tensor)), user_(std::move(user)), order_(std::move(order)),
        ticket_(order_->enter(tag)) {}
  ~any_source_work() override { leave_order(); }

  bool isCompleted() override {
    std::lock_guard lock(progress_);
    return drive();
  }
  /// isCompleted() for the progress thread (see p2p_work::poll).
  bool poll() {
    std::unique_lock lock(progress_, std::try_to_lock);
    return lock ? drive() : false;
  }
  bool wait(std::chrono::milliseconds timeout) override {
    {
      std::lock_guard lock(progress_);
      const auto limit = timeout == kNoTimeout ? t_.timeout() : std::min(timeout, t_.timeout());
      const auto until = tcoll::clock::now() + limit;
      while (!drive() && !request_) {
        if (tcoll::clock::now() >= until) {
          settle(std::make_exception_ptr(tcoll::timeout_error(
              "recv from any source (tag " + std::to_string(tag_) + ", " +
                  std::to_string(tensor_.nbytes()) + " bytes): no peer sent a message within " +
                  std::to_string(limit.count()) + " ms",
              rank_)));
          break;
        }
        std::this_thread::yield();
      }
      if (!completed_) try {
          t_.wait(*request_, until);
          settle(nullptr);
        } catch (...) {
          settle(std::current_exception());
        }
    }
    return c10d::Work::wait(timeout);
  }
  /// The peer the message came from; -1 while none has been matched.
  int sourceRank() const override { return source_.load(std::memory_order_acquire); }
  std::vector<at::Tensor> result() override { return {user_}; }

private:
  bool drive() {
    if (!completed_) try {
        if (!request_ && !match()) return false;
        if (t_.test(*request_)) settle(nullptr);
      } catch (...) {
        settle(std::current_exception());
      }
    return completed_;
  }
  bool match() {
    if (!order_->first(tag_, ticket_)) return false;
    for (int k = 1; k < size_; ++k) {
      const int q = (rank_ + k) % size_;
      if (!t_.probe(q, tag_)) continue;
      request_.emplace(t_.irecv(q, tensor_.data_ptr(), tensor_.nbytes(), tag_));
      source_.store(q, std::memory_order_release);
      leave_order();
      return true;
    }
    return false;
  }
  void leave_order() {
    if (in_order_) order_->leave(tag_, ticket_);
    in_order_ = false;
  }
  void settle(std::exception_ptr error) {
    leave_order();
    if (!error && user_.defined() && !user_.is_same(tensor_)) user_.copy_(tensor_);
    finish(error);
  }
  std::mutex progress_;
  int rank_, size_;
  Tr& t_;
  int tag_;
  at::Tensor tensor_, user_;
  std::shared_ptr<any_source_order> order_;
  std::uint64_t ticket_;
  bool in_order_ = true;
  std::optional<typename Tr::request> request_;
  std::atomic<int> source_{-1};
};

/// What `endCoalescing` returns: the works of every call made since `startCoalescing`, in
/// call order (each call ran or was posted when it was made: coalescing here groups the
/// waiting, which is what `batch_isend_irecv` and `_coalescing_manager` need).
class coalesced_work final : public c10d::Work {
public:
  coalesced_work(int rank, std::vector<c10::intrusive_ptr<c10d::Work>> works)
      : c10d::Work(rank, OpType::COALESCED), works_(std::move(works)) {}

  bool isCompleted() override {
    return std::all_of(works_.begin(), works_.end(), [](auto& w) { return w->isCompleted(); });
  }
  /// Waits for every work, then rethrows the first failure.
  bool wait(std::chrono::milliseconds timeout) override {
    std::exception_ptr first;
    for (auto& w : works_) try {
        w->wait(timeout);
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    if (first) std::rethrow_exception(first);
    return true;
  }
  std::vector<at::Tensor> result() override {
    std::vector<at::Tensor> all;
    for (auto& w : works_)
      for (auto& t : w->result()) all.push_back(t);
    return all;
  }

private:
  std::vector<c10::intrusive_ptr<c10d::Work>> works_;
};

/// Drives posted sends and receives to completion in the background, as Gloo's threads do:
/// a transfer on shared memory moves only while someone tests or waits for it, and the
/// rank that posted it may block elsewhere next (in another group's collective, say) while
/// its peer waits for the data. One thread per group; it polls the works it holds (with a
/// backoff up to 1 ms while none moves) and sleeps while it holds none. Each work is held
/// until it completes, so an `isend` whose work is dropped still completes.
class p2p_progress {
public:
  p2p_progress() : thread_([this] { loop(); }) {}
  ~p2p_progress() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  p2p_progress(const p2p_progress&) = delete;
  p2p_progress& operator=(const p2p_progress&) = delete;

  /// `poll()` drives the transfer of `w` and says whether it is complete.
  void add(c10::intrusive_ptr<c10d::Work> w, std::function<bool()> poll) {
    {
      std::lock_guard lock(mutex_);
      works_.push_back({std::move(w), std::move(poll)});
    }
    cv_.notify_one();
  }

private:
  void loop() {
    auto pause = std::chrono::microseconds(20);
    std::unique_lock lock(mutex_);
    for (;;) {
      cv_.wait(lock, [&] { return stopping_ || !works_.empty(); });
      if (stopping_) return;
      // (only this thread erases, and `add` appends: the first entries stay `held`'s)
      const auto held = works_;
      lock.unlock();
      std::vector<char> complete(held.size());
      std::size_t done = 0;
      for (std::size_t i = 0; i < held.size(); ++i)
        done += complete[i] = held[i].poll(); // drives the transfer; a failure completes it
      lock.lock();
      std::size_t i = 0;
      std::erase_if(works_, [&](const entry&) { return i < complete.size() && complete[i++]; });
      if (works_.empty()) continue;
      pause = done ? std::chrono::microseconds(20)
                   : std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(1));
      cv_.wait_for(lock, pause, [&] { return stopping_; });
    }
  }
  std::mutex mutex_;
  std::condition_variable cv_;
  struct entry {
    c10::intrusive_ptr<c10d::Work> work; ///< kept alive until complete
    std::function<bool()> poll;
  };
  std::vector<entry> works_;
  bool stopping_ = false;
  std::thread thread_; // last: starts after the rest is built
};

namespace {

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

void check_cpu(const at::Tensor& t, const char* what, const char* argument, int rank) {
  TORCH_CHECK(t.defined(), "tcoll: ", what, ": rank ", rank, ": ", argument, " is undefined");
  TORCH_CHECK(t.device().is_cpu(), "tcoll: ", what, ": rank ", rank, ": ", argument, " is on ",
              t.device(),
              "; the tcoll backend takes CPU tensors (use "
              "init_process_group(\"cpu:tcoll,cuda:nccl\") for both)");
  TORCH_CHECK(t.layout() == at::kStrided, "tcoll: ", what, ": rank ", rank, ": ", argument,
              " is not dense (", t.layout(), ")");
}

/// A contiguous tensor to run on: `t` itself or a contiguous copy (copied back at the end).
at::Tensor dense(const at::Tensor& t) {
  return t.is_contiguous() ? t : t.contiguous();
}

bool debug_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("TCOLL_DEBUG");
    return v && *v && std::strcmp(v, "0") != 0;
  }();
  return on;
}

} // namespace

/// Whether the collective being started on this thread is waited on at once by its caller
/// (torch's `asyncOp` false: `dist.all_reduce(x)` without `async_op=True`). Such a call
/// runs in the caller's thread whatever its size: handing it to the engine thread would
/// only add a wake-up to a wait that begins at once.
inline thread_local bool caller_waits = false;

/// Sets `caller_waits` for the collective that an override of `c10d::Backend` starts.
struct waited_call {
  explicit waited_call(bool async_op) noexcept { caller_waits = !async_op; }
  ~waited_call() { caller_waits = false; }
  waited_call(const waited_call&) = delete;
  waited_call& operator=(const waited_call&) = delete;
};

/// The process group backend (see the file comment).
class backend final : public c10d::Backend {
public:
  /// Where this rank sits: `node` of `nodes`, `local_rank` of the `local_size` ranks on it;
  /// `shards` is the smallest node's size (hierarchy_shape::shards).
  struct node_layout {
    int node = 0, nodes = 1, local_rank = 0, local_size = 1, shards = 1;
    std::vector<int> node_of{}; ///< the node of every rank of the group

    /// The group ranks on node `n`, in local-rank order.
    std::vector<int> members(int n) const {
      std::vector<int> m;
      for (std::size_t q = 0; q < node_of.size(); ++q)
        if (node_of[q] == n) m.push_back(static_cast<int>(q));
      return m;
    }
  };

  /// `layout`: from `node_layout_of`. Across nodes the messages between nodes travel over
  /// MPI when `mpi_ranks` (every rank's MPI_COMM_WORLD rank, from mpi_link::world_ranks)
  /// is not empty, otherwise over two Gloo process groups: `flat_group` (every rank of the
  /// group) and `inter_group` (the ranks of this local index on every node; null for local
  /// ranks >= shards). The flat collectives run over every rank, the inter-node level of the
  /// hierarchical allreduce over the ranks of one local index. Python makes the Gloo groups
  /// (tcoll_torch/__init__.py): torch's wheel ships no Gloo headers to build them here.
  backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
          std::chrono::milliseconds timeout, node_layout layout,
          c10::intrusive_ptr<c10d::Backend> flat_group,
          c10::intrusive_ptr<c10d::Backend> inter_group, const std::vector<int>& mpi_ranks)
      : c10d::Backend(rank, size), store_(store), layout_(layout),
        flat_group_(std::move(flat_group)), inter_group_(std::move(inter_group)),
        timeout_(timeout) {
    init(); // c10d's per-backend set-up (logging), as its own backends do
    tcoll::shm_options options;
    options.timeout = timeout;
    // TCOLL_TORCH_SLEEP_AFTER_US: a wait on shared memory that has yielded this long sleeps
    // between polls (shm_options::sleep_after), leaving the cores to backward when DDP's
    // buckets wait for a slower peer. Unset or 0: waits only yield.
    if (const char* v = std::getenv("TCOLL_TORCH_SLEEP_AFTER_US")) {
      char* end = nullptr;
      const long long us = std::strtoll(v, &end, 10);
      TORCH_CHECK(end != v && *end == '\0' && us >= 0, "tcoll: rank ", rank,
                  ": TCOLL_TORCH_SLEEP_AFTER_US is \"", v,
                  "\"; expected a number of microseconds >= 0");
      options.sleep_after = std::chrono::microseconds(us);
    }
    // shared memory among the ranks of this node (the whole group on one node)
    shm_ = std::make_unique<tcoll::shm_transport>(
        std::make_unique<tcoll::store_bootstrap<c10d::Store>>(
            *store_, layout_.local_rank, layout_.local_size,
            "tcoll/shm/node" + std::to_string(layout_.node)),
        options);
    if (layout_.nodes == 1) make_staging(*store_, rank, size);
    if (layout_.nodes > 1 && !mpi_ranks.empty()) {
      auto links =
          mpi_link::connect(mpi_ranks, rank, layout_.node,
                            layout_.local_rank < layout_.shards ? layout_.local_rank : -1, timeout);
      flat_ = std::move(links.flat);
      inter_ = std::move(links.inter);
    } else if (layout_.nodes > 1) {
      TORCH_CHECK(flat_group_ && (inter_group_ || layout_.local_rank >= layout_.shards),
                  "tcoll: rank ", rank, ": a group across ", layout_.nodes,
                  " nodes needs its Gloo groups");
      flat_ = std::make_unique<internode_transport>(
          std::make_unique<c10d_transport>(flat_group_, timeout));
      if (inter_group_)
        inter_ = std::make_unique<internode_transport>(
            std::make_unique<c10d_transport>(inter_group_, timeout));
    }
    if (layout_.nodes > 1) {
      // the group rank of every rank of both levels, so that errors name group ranks: the
      // ranks of this node, and the ranks of this local index on every node
      tcoll::hierarchy_shape shape{rank, size, layout_.shards};
      shape.intra_world_ranks = layout_.members(layout_.node);
      if (inter_)
        for (int n = 0; n < layout_.nodes; ++n)
          shape.inter_world_ranks.push_back(
              layout_.members(n).at(static_cast<std::size_t>(layout_.local_rank)));
      for (int n = 0; n < layout_.nodes; ++n) shape.groups.push_back(layout_.members(n));
      machine_ = std::make_unique<tcoll::hierarchical<tcoll::shm_transport, internode_transport>>(
          *shm_, inter_.get(), std::move(shape));
    }
    if (debug_enabled() && rank == 0)
      std::fprintf(stderr,
                   "[tcoll] group of %d ranks on %d node(s): shm_transport inside a node (single "
                   "copy %s)%s%s%s\n",
                   size, layout_.nodes, shm_->single_copy() ? "on" : "off",
                   layout_.nodes > 1 ? ", " : "", layout_.nodes > 1 ? internode().c_str() : "",
                   layout_.nodes > 1 ? " send/recv across nodes (hierarchical allreduce)" : "");
  }
  ~backend() override {
    progress_.reset(); // before the transports its works use
    // the engines stop with their transports: queued calls fail, a running one finishes
    machine_.reset();
    inter_.reset();
    flat_.reset();
    shm_.reset();
  }

  /// Collective: the layout of the group from every rank's node identity (host name and
  /// boot id, exchanged through the store; see bootstrap::node_identity()).
  static node_layout node_layout_of(c10d::Store& store, int rank, int size) {
    tcoll::store_bootstrap<c10d::Store> boot(store, rank, size, "tcoll/nodes");
    const std::vector<std::string> ids = boot.node_identities();
    std::vector<std::string> distinct;
    std::vector<int> members;
    node_layout l;
    for (int q = 0; q < size; ++q) {
      const auto it = std::find(distinct.begin(), distinct.end(), ids[q]);
      const int node = static_cast<int>(it - distinct.begin());
      if (it == distinct.end()) distinct.push_back(ids[q]), members.push_back(0);
      if (q == rank) l.node = node, l.local_rank = members[node];
      ++members[node];
      l.node_of.push_back(node);
    }
    l.nodes = static_cast<int>(distinct.size());
    l.local_size = members[l.node];
    l.shards = *std::min_element(members.begin(), members.end());
    return l;
  }

  const std::string getBackendName() const override { return "tcoll"; }

  /// `dist.split_group`: each rank of `ranks` (ranks of this group) gets a new tcoll group of
  /// those ranks, in their order, made as `init_process_group` makes one (tcoll_torch's
  /// `_create`, through `store`, which ProcessGroup::splitGroup gives every split its own
  /// prefix in); nullptr for a rank outside `ranks`, as Gloo's split does.
  bool supportsSplitting() const override { return true; }
  c10::intrusive_ptr<Options> getBackendOptions() override {
    return c10::make_intrusive<Options>("tcoll", timeout_);
  }
  c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store>& store,
                                          const std::vector<int>& ranks,
                                          const c10::intrusive_ptr<Options>& opts) override {
    const auto it = std::find(ranks.begin(), ranks.end(), rank_);
    if (it == ranks.end()) return nullptr;
    for (int r : ranks)
      TORCH_CHECK(r >= 0 && r < size_, "tcoll: split_group: rank ", rank_, ": rank ", r,
                  " is outside the parent group [0, ", size_, ")");
    const auto timeout = opts && opts->timeout.count() > 0 ? opts->timeout : timeout_;
    pybind11::gil_scoped_acquire gil;
    auto made = pybind11::module_::import("tcoll_torch")
                    .attr("_create")(store->clone(), static_cast<int>(it - ranks.begin()),
                                     static_cast<int>(ranks.size()), timeout);
    return made.cast<c10::intrusive_ptr<c10d::Backend>>();
  }

  /// `tcoll_torch.all_reduce`: an allreduce of one dense CPU tensor in place that returns
  /// when it is done, called straight from Python (a `direct_handle`), not through torch's
  /// dispatcher, its Work or the Flight Recorder (DeepSpeed's `inference_all_reduce` is
  /// such a call). The same path as a blocking `dist.all_reduce`: at once in this thread
  /// when nothing is queued on the engine, otherwise after what is.
  void all_reduce_now(const at::Tensor& tensor, c10d::ReduceOp::RedOpType op) {
    TORCH_CHECK(tensor.defined() && tensor.layout() == at::kStrided && tensor.is_cpu(),
                "tcoll_torch.all_reduce: rank ", rank_, ": needs a dense CPU tensor");
    const waited_call waited(false);
    std::vector<at::Tensor> tensors{tensor};
    const auto work = reduce_all(tensors, c10d::ReduceOp(op), OpType::ALLREDUCE, "all_reduce");
    work->wait();
  }

  /// What carries the messages between nodes: "mpi", "gloo", or "none" on one node.
  std::string internode() const { return flat_ ? std::string(flat_->engine()) : "none"; }

  std::uint64_t registered_messages() const { return shm_->registered_messages(); }

  /// Its communicators (backend_access.hpp): the DistributedDataParallel reducer runs on them.
  backend_communicators communicators() const {
    return {shm_.get(), machine_.get(), rank_, size_, flat_.get()};
  }

  /// Calls made on this group so far (PyTorch's ProcessGroupWrapper, which
  /// TORCH_DISTRIBUTED_DEBUG=DETAIL puts around the backend, compares them across ranks).
  void setSequenceNumberForGroup() override { sequence_ = 0; }
  uint64_t getSequenceNumberForGroup() override { return sequence_; }

  /// Coalescing (torch's `batch_isend_irecv`, `_coalescing_manager` with a device): the
  /// calls between start and end run as usual; `endCoalescing` returns one work over them.
  bool supportsCoalescing() const override { return true; }
  void startCoalescing() override {
    std::lock_guard lock(coalescing_mutex_);
    // torch's coalescing manager calls endCoalescing only when every call in between
    // succeeded: after a failed batch (a bad peer, say) the next batch starts afresh, and
    // the works of the failed one are dropped (their calls ran or were posted as usual)
    coalescing_.emplace();
  }
  c10::intrusive_ptr<c10d::Work> endCoalescing() override {
    std::lock_guard lock(coalescing_mutex_);
    TORCH_CHECK(coalescing_, "tcoll: endCoalescing: rank ", rank_,
                ": startCoalescing was not called");
    auto works = std::move(*coalescing_);
    coalescing_.reset();
    return c10::make_intrusive<coalesced_work>(rank_, std::move(works));
  }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override {
    const waited_call waited(opts.asyncOp);
    // torch routes sparse CPU tensors here (its dispatcher's SparseCPU key), as to Gloo
    if (!tensors.empty() && tensors[0].defined() && tensors[0].layout() == at::kSparse)
      return sparse_allreduce(tensors, opts.reduceOp);
    return reduce_all(tensors, opts.reduceOp, OpType::ALLREDUCE, "allreduce");
  }

  c10::intrusive_ptr<c10d::Work> allreduce_sparse(std::vector<at::Tensor>& tensors,
                                                  const c10d::AllreduceOptions& opts) override {
    const waited_call waited(opts.asyncOp);
    return sparse_allreduce(tensors, opts.reduceOp);
  }

  c10::intrusive_ptr<c10d::Work>
  allreduce_coalesced(std::vector<at::Tensor>& tensors,
                      const c10d::AllreduceCoalescedOptions& opts) override {
    const waited_call waited(opts.asyncOp);
    return reduce_all(tensors, opts.reduceOp, OpType::ALLREDUCE_COALESCED, "allreduce_coalesced");
  }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override {
    const waited_call waited(opts.asyncOp);
    check_list(tensors, "broadcast", "tensors");
    const int root = check_root(opts.rootRank, "broadcast");
    return enqueue(
        OpType::BROADCAST, tensors, "broadcast", total_bytes(tensors), [=, this](auto& t, int tag) {
          for (std::size_t i = 0; i < tensors.size(); ++i) {
            const at::Tensor b = dense(tensors[i]); // when it runs: after earlier calls
            tcoll::cpu_reducer red;
            tcoll::broadcast_in(t, tag, bytes_of(b), b.nbytes(), root, tcoll::binomial_tree{}, red);
            copy_back(tensors[i], b);
          }
        });
  }

  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override {
    const waited_call waited(opts.asyncOp);
    check_list(tensors, "reduce", "tensors");
    TORCH_CHECK(tensors.size() == 1, "tcoll: reduce: rank ", rank_, ": takes one tensor");
    const int root = check_root(opts.rootRank, "reduce");
    const reduction r = reduction_of(opts.reduceOp, tensors[0].scalar_type(), rank_);
    return enqueue(
        OpType::REDUCE, tensors, "reduce", tensors[0].nbytes(), [=, this](auto& t, int tag) {
          const at::Tensor buffer = dense(tensors[0]); // when it runs: after earlier calls
          const std::size_t n = r.count(buffer);
          with_reduction(r, [&]<class E>(const tcoll::runtime_op& o) {
            tcoll::cpu_reducer red;
            E* data = reinterpret_cast<E*>(buffer.data_ptr());
            tcoll::reduce_in(t, tag, static_cast<const E*>(data), rank_ == root ? data : nullptr, n,
                             root, o, tcoll::binomial_tree{}, red);
          });
          if (rank_ == root) r.finalize(buffer.data_ptr(), n, size_);
          copy_back(tensors[0], buffer);
        });
  }

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override {
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
    return enqueue(
        OpType::ALLGATHER, list, "allgather", gathered.nbytes(), [=, this](auto& t, int tag) {
          run_allgather(t, tag, in, gathered);
          for (int q = 0; q < size_; ++q)
            out_list[q].copy_(
                gathered.narrow(0, q * in.numel(), in.numel()).view(out_list[q].sizes()));
        });
  }

  /// `all_gather_coalesced` (deprecated in torch, still Gloo's): one allgather per input,
  /// outputs[q][i] gets rank q's inputs[i]; one work.
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override {
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
    return enqueue(
        OpType::ALLGATHER_COALESCED, flat_outputs, what, bytes, [=, this](auto& t, int tag) {
          for (std::size_t i = 0; i < ins.size(); ++i) {
            run_allgather(t, tag, ins[i], gathered[i]);
            const std::int64_t n = ins[i].numel();
            for (int q = 0; q < size_; ++q)
              out_lists[q][i].copy_(gathered[i].narrow(0, q * n, n).view(out_lists[q][i].sizes()));
          }
        });
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override {
    const waited_call waited(opts.asyncOp);
    check_pair(output, input, "all_gather_into_tensor");
    TORCH_CHECK(output.numel() == input.numel() * size_, "tcoll: all_gather_into_tensor: rank ",
                rank_, ": output has ", output.numel(), " elements, expected ", size_, " x ",
                input.numel());
    at::Tensor in = dense(input), out = dense(output);
    return enqueue(OpType::_ALLGATHER_BASE, {output}, "all_gather_into_tensor", out.nbytes(),
                   [=, this](auto& t, int tag) {
                     run_allgather(t, tag, in, out);
                     copy_back(output, out);
                   });
  }

  /// Several all_gather_into_tensor calls as one (torch's `_coalescing_manager` fast path,
  /// FSDP): one work, the pairs in list order.
  c10::intrusive_ptr<c10d::Work>
  all_gather_single_coalesced(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                              const c10d::AllgatherOptions& opts) override {
    const waited_call waited(opts.asyncOp);
    const char* what = "all_gather_into_tensor (coalesced)";
    check_pairs(outputs, inputs, what);
    std::vector<at::Tensor> ins, outs;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      check_pair(outputs[i], inputs[i], what);
      TORCH_CHECK(outputs[i].numel() == inputs[i].numel() * size_, "tcoll: ", what, ": rank ",
                  rank_, ": output ", i, " has ", outputs[i].numel(), " elements, expected ", size_,
                  " x ", inputs[i].numel());
      ins.push_back(dense(inputs[i]));
      outs.push_back(dense(outputs[i]));
    }
    return enqueue(OpType::ALLGATHER_INTO_TENSOR_COALESCED, outputs, what, total_bytes(outs),
                   [=, this](auto& t, int tag) {
                     for (std::size_t i = 0; i < ins.size(); ++i) {
                       run_allgather(t, tag, ins[i], outs[i]);
                       copy_back(outputs[i], outs[i]);
                     }
                   });
  }
  c10::intrusive_ptr<c10d::Work>
  allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                  const c10d::AllgatherOptions& opts) override {
    const waited_call waited(opts.asyncOp);
    return all_gather_single_coalesced(outputs, inputs, opts);
  }

  /// Several reduce_scatter_tensor calls as one (see all_gather_single_coalesced).
  c10::intrusive_ptr<c10d::Work>
  reduce_scatter_single_coalesced(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                  const c10d::ReduceScatterOptions& opts) override {
    const waited_call waited(opts.asyncOp);
    const char* what = "reduce_scatter_tensor (coalesced)";
    check_pairs(outputs, inputs, what);
    std::vector<at::Tensor> ins, outs;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      check_pair(outputs[i], inputs[i], what);
      TORCH_CHECK(inputs[i].numel() == outputs[i].numel() * size_, "tcoll: ", what, ": rank ",
                  rank_, ": input ", i, " has ", inputs[i].numel(), " elements, expected ", size_,
                  " x ", outputs[i].numel());
      check_op(opts.reduceOp, outputs[i].scalar_type());
      ins.push_back(dense(inputs[i]));
      outs.push_back(dense(outputs[i]));
    }
    return enqueue(OpType::REDUCE_SCATTER_TENSOR_COALESCED, outputs, what, total_bytes(ins),
                   [=, this](auto& t, int tag) {
                     for (std::size_t i = 0; i < ins.size(); ++i) {
                       run_reduce_scatter(t, tag, ins[i], outs[i], opts.reduceOp);
                       copy_back(outputs[i], outs[i]);
                     }
                   });
  }
  c10::intrusive_ptr<c10d::Work>
  reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                  const c10d::ReduceScatterOptions& opts) override {
    const waited_call waited(opts.asyncOp);
    return reduce_scatter_single_coalesced(outputs, inputs, opts);
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override {
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
      TORCH_CHECK(i.scalar_type() == outputs[0].scalar_type(), "tcoll: reduce_scatter: rank ",
                  rank_, ": input tensor dtype ", i.scalar_type(), " differs from the output's ",
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
    return enqueue(OpType::REDUCE_SCATTER, outputs, "reduce_scatter", packed.nbytes(),
                   [=, this](auto& t, int tag) {
                     if (even) {
                       run_reduce_scatter(t, tag, packed, out, opts.reduceOp);
                     } else {
                       const reduction r = reduction_of(opts.reduceOp, packed.scalar_type(), rank_);
                       with_reduction(r, [&]<class E>(const tcoll::runtime_op& o) {
                         tcoll::cpu_reducer red;
                         tcoll::reduce_scatterv_in(
                             t, tag, reinterpret_cast<const E*>(packed.data_ptr()),
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
  _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                       const c10d::ReduceScatterOptions& opts) override {
    const waited_call waited(opts.asyncOp);
    check_pair(output, input, "reduce_scatter_tensor");
    TORCH_CHECK(input.numel() == output.numel() * size_, "tcoll: reduce_scatter_tensor: rank ",
                rank_, ": input has ", input.numel(), " elements, expected ", size_, " x ",
                output.numel());
    check_op(opts.reduceOp, output.scalar_type());
    at::Tensor in = dense(input), out = dense(output);
    return enqueue(OpType::_REDUCE_SCATTER_BASE, {output}, "reduce_scatter_tensor", in.nbytes(),
                   [=, this](auto& t, int tag) {
                     run_reduce_scatter(t, tag, in, out, opts.reduceOp);
                     copy_back(output, out);
                   });
  }

  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override {
    const waited_call waited(opts.asyncOp);
    check_pair(output, input, "all_to_all_single");
    const auto send_bytes = split_bytes(input, input_splits, "input_split_sizes");
    const auto recv_bytes = split_bytes(output, output_splits, "output_split_sizes");
    TORCH_CHECK(send_bytes[rank_] == recv_bytes[rank_], "tcoll: all_to_all_single: rank ", rank_,
                ": sends itself ", send_bytes[rank_], " bytes but expects ", recv_bytes[rank_]);
    at::Tensor in = dense(input), out = dense(output);
    return enqueue(OpType::ALLTOALL_BASE, {output}, "all_to_all_single",
                   std::max(in.nbytes(), out.nbytes()), [=, this](auto& t, int tag) {
                     std::vector<tcoll::exchange_block> blocks(size_);
                     std::size_t sent = 0, received = 0;
                     for (int q = 0; q < size_; ++q) {
                       blocks[q] = {bytes_of(in) + sent, send_bytes[q], bytes_of(out) + received,
                                    recv_bytes[q]};
                       sent += send_bytes[q];
                       received += recv_bytes[q];
                     }
                     tcoll::pairwise_exchange{}.exchange(
                         t, tag, std::span<const tcoll::exchange_block>(blocks));
                     copy_back(output, out);
                   });
  }

  /// `all_to_all` (lists): inputs[q] goes to rank q, outputs[q] comes from rank q; the
  /// tensors may differ in size per peer (as Gloo's), the dtypes must agree.
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override {
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
    TORCH_CHECK(inputs[rank_].nbytes() == outputs[rank_].nbytes(), "tcoll: ", what, ": rank ",
                rank_, ": sends itself ", inputs[rank_].nbytes(), " bytes but expects ",
                outputs[rank_].nbytes());
    return enqueue(OpType::ALLTOALL, outputs, what, bytes, [=, this](auto& t, int tag) {
      std::vector<tcoll::exchange_block> blocks;
      for (int q = 0; q < size_; ++q)
        blocks.push_back({bytes_of(ins[q]), ins[q].nbytes(), bytes_of(outs[q]), outs[q].nbytes()});
      tcoll::pairwise_exchange{}.exchange(t, tag, std::span<const tcoll::exchange_block>(blocks));
      for (int q = 0; q < size_; ++q) copy_back(outputs[q], outs[q]);
    });
  }

  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override {
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
    return enqueue(OpType::GATHER, list, "gather", in.nbytes() * static_cast<std::size_t>(size_),
                   [=, this](auto& t, int tag) {
                     std::vector<at::Tensor> dense_list;
                     std::vector<tcoll::root_block> blocks;
                     for (const auto& o : list) {
                       dense_list.push_back(dense(o));
                       blocks.push_back({bytes_of(dense_list.back()), dense_list.back().nbytes()});
                     }
                     tcoll::linear{}.gather(t, tag, root, bytes_of(in), in.nbytes(),
                                            std::span<const tcoll::root_block>(blocks));
                     for (std::size_t q = 0; q < list.size(); ++q)
                       copy_back(list[q], dense_list[q]);
                   });
  }

  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override {
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
    return enqueue(OpType::SCATTER, outputs, "scatter",
                   out.nbytes() * static_cast<std::size_t>(size_), [=, this](auto& t, int tag) {
                     std::vector<tcoll::root_block> blocks;
                     for (const auto& i : list) blocks.push_back({bytes_of(i), i.nbytes()});
                     tcoll::linear{}.scatter(t, tag, root, bytes_of(out), out.nbytes(),
                                             std::span<const tcoll::root_block>(blocks));
                     copy_back(outputs[0], out);
                   });
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override {
    const waited_call waited(opts.asyncOp);
    // a one-byte allreduce in the call order (a barrier is a collective like the others),
    // after every earlier call of this group has finished, as Gloo's barrier: those queued
    // on the same engine ran before it, others (the hierarchy's) are waited for
    at::Tensor token = at::zeros({1}, at::kByte);
    std::vector<c10::weak_intrusive_ptr<work>> earlier;
    {
      std::lock_guard lock(queued_mutex_);
      earlier = queued_;
    }
    return enqueue(OpType::BARRIER, {}, "barrier", 1, [=, this](auto& t, int tag) {
      for (const auto& e : earlier)
        if (auto w = e.lock()) w->wait(timeout_);
      tcoll::cpu_reducer red;
      tcoll::allreduce_in(t, tag, token.data_ptr<byte>(), token.data_ptr<byte>(), 1,
                          tcoll::max_op{}, tcoll::recursive_doubling{}, red);
    });
  }

  /// `monitored_barrier`, as Gloo's: every rank reports to rank 0 and waits for its
  /// answer; rank 0 names the ranks that did not report within the timeout (all of them
  /// with `wait_all_ranks`, else the first), in Gloo's words. It runs after the calls still
  /// queued on the engine, as a barrier does (at once in the caller's thread when none is),
  /// in a message space of the collectives, so user tags are untouched. A failure leaves
  /// the group broken.
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override {
    const waited_call waited(false); // the caller waits for it at once
    const auto limit = opts.timeout == c10d::kUnsetTimeout ? timeout_ : opts.timeout;
    const auto ms = static_cast<long long>(limit.count());
    auto w = enqueue(OpType::BARRIER, {}, "monitored_barrier", 0, [=, this](auto& t, int tag) {
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

  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override {
    TORCH_CHECK(tensors.size() == 1, "tcoll: send: rank ", rank_, ": takes one tensor");
    check_cpu(tensors[0], "send", "tensor", rank_);
    check_peer(dst, "send", "dst");
    const int t_tag = check_tag(tag, "send");
    at::Tensor data = dense(tensors[0]);
    return with_flat([&](auto& t) -> c10::intrusive_ptr<c10d::Work> {
      using Tr = std::remove_cvref_t<decltype(t)>;
      auto r = t.isend(dst, data.data_ptr(), data.nbytes(), t_tag);
      return progressed(recorded(c10::make_intrusive<p2p_work<Tr>>(
          rank_, OpType::SEND, t, std::move(r), data, at::Tensor(), dst)));
    });
  }

  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override {
    TORCH_CHECK(tensors.size() == 1, "tcoll: recv: rank ", rank_, ": takes one tensor");
    check_cpu(tensors[0], "recv", "tensor", rank_);
    check_peer(src, "recv", "src");
    const int t_tag = check_tag(tag, "recv");
    at::Tensor data = dense(tensors[0]);
    return with_flat([&](auto& t) -> c10::intrusive_ptr<c10d::Work> {
      using Tr = std::remove_cvref_t<decltype(t)>;
      auto r = t.irecv(src, data.data_ptr(), data.nbytes(), t_tag);
      return progressed(recorded(c10::make_intrusive<p2p_work<Tr>>(
          rank_, OpType::RECV, t, std::move(r), data, tensors[0], src)));
    });
  }

  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override {
    TORCH_CHECK(tensors.size() == 1, "tcoll: recv: rank ", rank_, ": takes one tensor");
    check_cpu(tensors[0], "recv", "tensor", rank_);
    const int t_tag = check_tag(tag, "recv");
    at::Tensor data = dense(tensors[0]);
    return with_flat([&](auto& t) -> c10::intrusive_ptr<c10d::Work> {
      using Tr = std::remove_cvref_t<decltype(t)>;
      return progressed(recorded(c10::make_intrusive<any_source_work<Tr>>(
          rank_, size_, t, t_tag, data, tensors[0], any_source_order_)));
    });
  }

  /// This rank's place: (node, nodes, local_rank, local_size, shards).
  std::tuple<int, int, int, int, int> layout() const {
    return {layout_.node, layout_.nodes, layout_.local_rank, layout_.local_size, layout_.shards};
  }

  /// Collective: seconds per call of `iters` blocking float-sum allreduces of `bytes` on
  /// this group's transport straight from C++ (no Python, no Work), after a warm-up: the
  /// baseline of the Python-visible overhead in bench/torch/collectives_perf.py.
  double time_raw_allreduce(std::size_t bytes, int iters) {
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

private:
  /// `w`, handed to the progress thread unless it is complete already.
  template <class W>
  c10::intrusive_ptr<W> progressed(c10::intrusive_ptr<W> w) {
    if (!w->isCompleted()) progress_->add(w, [p = w.get()] { return p->poll(); });
    return w;
  }

  /// `w`, also kept for `endCoalescing` while coalescing.
  template <class W>
  c10::intrusive_ptr<W> recorded(c10::intrusive_ptr<W> w) {
    std::lock_guard lock(coalescing_mutex_);
    if (coalescing_) coalescing_->push_back(w);
    return w;
  }

  /// `f(t)` with the transport of the flat collectives: shared memory on one node, Gloo's
  /// send/recv across nodes.
  template <class F>
  auto with_flat(F&& f) -> decltype(f(std::declval<tcoll::shm_transport&>())) {
    if (flat_) return f(*flat_);
    return f(*shm_);
  }

  /// Queues `body(t, tag)` on the engine of the flat transport `t` (or runs it at once when
  /// the call moves at most `inline_max_bytes_` per rank); the returned work completes when
  /// it has run (or failed: a failure breaks the group, and every later call fails at once).
  template <class Body>
  c10::intrusive_ptr<c10d::Work> enqueue(OpType type, std::vector<at::Tensor> outputs,
                                         const char* what, std::size_t bytes, Body body) {
    return with_flat([&](auto& t) {
      return enqueue_on(t, type, std::move(outputs), what, bytes,
                        [&t, body](int tag) mutable { body(t, tag); });
    });
  }

  /// `body(tags)` on communicator `c` (a transport or the hierarchy): queued on its engine,
  /// or run at once (see below); the message spaces are drawn now either way.
  template <class Comm, class Body>
  c10::intrusive_ptr<c10d::Work> enqueue_on(Comm& c, OpType type, std::vector<at::Tensor> outputs,
                                            const char* what, std::size_t bytes, Body body) {
    auto w = c10::make_intrusive<work>(rank_, type, std::move(outputs));
    recorded(w);
    ++sequence_;
    // A call made by a callback chained on an earlier call runs on the engine thread: the
    // calls queued before it run first, here, then it does (waiting for the engine would
    // wait for this very thread; running it before them would break the call order).
    const bool in_callback = tcoll::run_queued_here(c);
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
      std::erase_if(queued_, [](const auto& q) { return q.expired(); });
      queued_.emplace_back(w);
    }
    try {
      tcoll::queue_collective(c, std::move(body),
                              [w](std::exception_ptr error) { w->complete(error); });
    } catch (...) {
      w->complete(std::current_exception());
    }
    return w;
  }

  /// allreduce and allreduce_coalesced: each tensor in place, one after another.
  c10::intrusive_ptr<c10d::Work> reduce_all(std::vector<at::Tensor>& tensors,
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
    // calls queued on one tensor see each other's results in call order.
    auto each = [=, this](auto&& reduce_one) {
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
    if (machine_) // across nodes: shared memory inside each node, MPI or Gloo between them
      return enqueue_on(*machine_, type, tensors, what, total_bytes(tensors),
                        [=, this](const auto& tags) {
                          each([&](auto* data, std::size_t n, const auto& o) {
                            tcoll::cpu_reducer red;
                            tcoll::allreduce_in(*machine_, tags, data, data, n, o,
                                                tcoll::hierarchical_options<tcoll::ring>{}, red);
                          });
                        });
    return enqueue(type, tensors, what, total_bytes(tensors), [=, this](auto& t, int tag) {
      each([&](auto* data, std::size_t n, const auto& o) {
        using T = std::remove_pointer_t<decltype(data)>;
        if constexpr (std::is_same_v<std::remove_cvref_t<decltype(t)>, tcoll::shm_transport>)
          if (staging_bytes_ && n * sizeof(T) <= staging_bytes_)
            return staged_allreduce(t, tag, data, n, o);
        tcoll::cpu_reducer red;
        tcoll::allreduce_in(t, tag, static_cast<const T*>(data), data, n, o, tcoll::automatic{},
                            red);
      });
    });
  }

  /// Collective (the group's ranks, all on one node): the registered staging buffers of
  /// `staged_allreduce`, `TCOLL_TORCH_STAGING_BYTES` each (default 4 MiB; 0: none), on a
  /// group of two ranks. The ranks agree on the smallest value asked, so all of them stage
  /// the same calls. Measured on the 2-core VM (docs/torch.md): staged recursive doubling
  /// is 1.4-1.6x plain recursive doubling from 128 KiB to 2 MiB and faster than plain
  /// halving-doubling, the unstaged choice there; on 4 ranks (oversubscribed) staging
  /// changed nothing measurable, so larger groups do not stage.
  void make_staging(c10d::Store& store, int rank, int size) {
    // a value this rank cannot parse travels as `unparsable`, so that every rank fails
    // here naming it, instead of its peers waiting in the exchange for it
    constexpr std::uint64_t unparsable = std::numeric_limits<std::uint64_t>::max();
    const char* v = std::getenv("TCOLL_TORCH_STAGING_BYTES");
    std::uint64_t mine = std::uint64_t{4} << 20;
    std::string problem;
    if (v) try {
        mine = tcoll::parse_bytes(v);
      } catch (const std::exception& e) {
        mine = unparsable;
        problem = e.what();
      }
    tcoll::store_bootstrap<c10d::Store> boot(store, rank, size, "tcoll/staging");
    const std::vector<std::uint8_t> all =
        boot.allgather({reinterpret_cast<const std::uint8_t*>(&mine), sizeof mine});
    for (int q = 0; q < size; ++q) {
      std::uint64_t theirs;
      std::memcpy(&theirs, all.data() + static_cast<std::size_t>(q) * sizeof theirs, sizeof theirs);
      TORCH_CHECK(theirs != unparsable, "tcoll: rank ", rank,
                  ": TCOLL_TORCH_STAGING_BYTES of rank ", q, " is not a size",
                  q == rank ? " (" + problem + ")" : std::string());
      mine = std::min(mine, theirs);
    }
    staging_bytes_ = size == 2 ? mine : 0;
    if (staging_bytes_ == 0) return;
    try {
      for (auto& s : staging_) s.memory = shm_->allocate<byte>(staging_bytes_);
    } catch (const tcoll::transport_error& e) {
      // allocate throws on every rank when any rank could not make or map its buffer
      // (/dev/shm too small: 64 MiB in a default Docker container), so every rank goes on
      // unstaged and runs the same algorithms
      for (auto& s : staging_) s.memory = {};
      staging_bytes_ = 0;
      if (rank == 0)
        TORCH_WARN("tcoll: no allreduce staging buffers for this group (", e.what(),
                   "); set TCOLL_TORCH_STAGING_BYTES lower, or 0 to silence this");
      return;
    }
    // two ranks: one exchange of whole buffers, each read in place from the peer's copy
    staged_choice_.shared_memory.doubling_up_to_bytes = staging_bytes_;
  }

  /// An allreduce of `n` elements at `data` (at most `staging_bytes_`) on one node through
  /// a registered staging buffer: the tensor is copied into this rank's buffer and reduced
  /// out of place from it into the tensor, so every peer reads and reduces this rank's
  /// contribution straight from shared memory (one copy in, one read per peer: the data
  /// movement of DeepSpeed's shared-memory allreduce) instead of through the transport's
  /// slots or `process_vm_readv`. When both buffers are held by other calls (an inline call
  /// beside an engine call beside another thread's), the same algorithm runs in place:
  /// every rank must run the same one, whether it found a free buffer or not.
  template <class T>
  void staged_allreduce(tcoll::shm_transport& t, int tag, T* data, std::size_t n,
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

  /// allreduce of one sparse COO tensor, as Gloo's (SUM; AVG too for floating point): every
  /// rank's coalesced indices and values are gathered, padded to the largest count, and
  /// summed in rank order into a coalesced tensor (the same bits on every rank) that
  /// replaces the tensor's contents. The ranks' shapes and dtypes are checked first.
  c10::intrusive_ptr<c10d::Work> sparse_allreduce(std::vector<at::Tensor>& tensors,
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
    TORCH_CHECK(op.op_ == c10d::ReduceOp::SUM ||
                    (average && at::isFloatingType(user.scalar_type())),
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
    return enqueue(OpType::ALLREDUCE, tensors, what, bytes, [=, this](auto& t, int tag) {
      const int P = size_;
      at::Tensor metas = at::empty({P, sparse_meta_slots}, at::kLong);
      run_allgather(t, tag, meta, metas);
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
      if (indices.nbytes() > 0) run_allgather(t, tag, indices, all_indices);
      if (values.nbytes() > 0) run_allgather(t, tag, values, all_values);
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

  template <class Tr>
  static void run_allgather(Tr& t, int tag, const at::Tensor& in, const at::Tensor& out) {
    tcoll::cpu_reducer red;
    tcoll::allgather_in(t, tag, static_cast<const byte*>(bytes_of(in)), bytes_of(out), in.nbytes(),
                        tcoll::ring{}, red);
  }

  template <class Tr>
  void run_reduce_scatter(Tr& t, int tag, const at::Tensor& in, const at::Tensor& out,
                          const c10d::ReduceOp& op) {
    const reduction r = reduction_of(op, in.scalar_type(), rank_);
    const std::size_t n = r.count(out);
    with_reduction(r, [&]<class E>(const tcoll::runtime_op& o) {
      tcoll::cpu_reducer red;
      tcoll::reduce_scatter_in(t, tag, reinterpret_cast<const E*>(in.data_ptr()),
                               reinterpret_cast<E*>(out.data_ptr()), n, o, tcoll::ring{}, red);
    });
    r.finalize(out.data_ptr(), n, size_);
  }

  static std::size_t total_bytes(const std::vector<at::Tensor>& tensors) {
    std::size_t n = 0;
    for (const auto& t : tensors) n += t.nbytes();
    return n;
  }

  static byte* bytes_of(const at::Tensor& t) { return static_cast<byte*>(t.data_ptr()); }

  static void copy_back(const at::Tensor& user, const at::Tensor& ran_on) {
    if (!user.is_same(ran_on)) user.copy_(ran_on);
  }

  static std::vector<at::Tensor> flattened(const std::vector<at::Tensor>& list) {
    std::vector<at::Tensor> out;
    for (const auto& t : list) out.push_back(t.contiguous().view(-1));
    return out;
  }

  void check_list(const std::vector<at::Tensor>& tensors, const char* what, const char* argument) {
    TORCH_CHECK(!tensors.empty(), "tcoll: ", what, ": rank ", rank_, ": ", argument, " is empty");
    for (const auto& t : tensors) check_cpu(t, what, argument, rank_);
  }
  /// Coalesced calls: as many outputs as inputs, and at least one.
  void check_pairs(const std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& inputs,
                   const char* what) {
    TORCH_CHECK(!inputs.empty() && outputs.size() == inputs.size(), "tcoll: ", what, ": rank ",
                rank_, ": ", outputs.size(), " outputs for ", inputs.size(), " inputs");
  }
  void check_list_size(const std::vector<at::Tensor>& list, const char* what,
                       const char* argument) {
    TORCH_CHECK(static_cast<int>(list.size()) == size_, "tcoll: ", what, ": rank ", rank_, ": ",
                argument, " has ", list.size(), " tensors, the group has ", size_, " ranks");
  }
  /// Both tensors usable here, and of one dtype (the single-tensor collectives).
  void check_pair(const at::Tensor& output, const at::Tensor& input, const char* what) {
    check_cpu(input, what, "input", rank_);
    check_cpu(output, what, "output", rank_);
    TORCH_CHECK(output.scalar_type() == input.scalar_type(), "tcoll: ", what, ": rank ", rank_,
                ": output dtype ", output.scalar_type(), " differs from input dtype ",
                input.scalar_type());
  }
  /// Throws at the call (not in wait()) for an op this dtype does not support.
  void check_op(const c10d::ReduceOp& op, at::ScalarType dtype) {
    (void)reduction_of(op, dtype, rank_);
  }
  void check_like(const at::Tensor& t, const at::Tensor& like, const char* what,
                  const char* argument) {
    check_cpu(t, what, argument, rank_);
    TORCH_CHECK(t.scalar_type() == like.scalar_type() && t.numel() == like.numel(), "tcoll: ", what,
                ": rank ", rank_, ": ", argument, " (", t.scalar_type(), ", ", t.numel(),
                " elements) does not match (", like.scalar_type(), ", ", like.numel(),
                " elements)");
  }
  int check_root(std::int64_t root, const char* what) {
    TORCH_CHECK(root >= 0 && root < size_, "tcoll: ", what, ": rank ", rank_, ": root ", root,
                " is outside [0, ", size_, ")");
    return static_cast<int>(root);
  }
  void check_peer(int peer, const char* what, const char* argument) {
    TORCH_CHECK(peer >= 0 && peer < size_ && peer != rank_, "tcoll: ", what, ": rank ", rank_, ": ",
                argument, " ", peer, " is not another rank of the group of ", size_);
  }
  /// The transport's tag of user tag `tag`, which may be any non-negative int (as on Gloo):
  /// tags below 1024 as they are; higher ones where no collective's message goes (tags.hpp):
  /// on shared memory the negative tags, which carry every int; across nodes the range above
  /// the collectives' (MPI allows no negative tag, so the top 2^18 - 1024 ints are refused).
  int check_tag(int tag, const char* what) {
    constexpr int low = tcoll::tags::collectives_first;
    TORCH_CHECK(tag >= 0, "tcoll: ", what, ": rank ", rank_, ": tag ", tag,
                " is negative (tags are non-negative ints, as on Gloo)");
    if (tag < low) return tag;
    if (!flat_) return std::numeric_limits<int>::min() + (tag - low);
    constexpr int high_max = std::numeric_limits<int>::max() - tcoll::tags::user_high_first + low;
    TORCH_CHECK(tag <= high_max, "tcoll: ", what, ": rank ", rank_, ": tag ", tag,
                " is above the highest tag tcoll carries between nodes (", high_max, ")");
    return tcoll::tags::user_high_first + (tag - low);
  }
  std::vector<std::size_t> split_bytes(const at::Tensor& t, const std::vector<int64_t>& splits,
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

  /// int64 slots of a sparse tensor's description (dimensions, dtype, count, sizes).
  static constexpr std::int64_t sparse_meta_slots = 32;

  c10::intrusive_ptr<c10d::Store> store_;
  node_layout layout_;
  std::unique_ptr<tcoll::shm_transport> shm_; ///< this node's ranks (all of them on one node)
  c10::intrusive_ptr<c10d::Backend> flat_group_, inter_group_; ///< across nodes only
  std::unique_ptr<internode_transport> flat_, inter_;
  std::shared_ptr<any_source_order> any_source_order_ = std::make_shared<any_source_order>();
  std::unique_ptr<tcoll::hierarchical<tcoll::shm_transport, internode_transport>> machine_;
  std::atomic<std::uint64_t> sequence_{0};
  std::chrono::milliseconds timeout_; ///< the group's: every wait of the backend is bounded
  std::mutex queued_mutex_;
  /// The calls handed to an engine, not yet released by their holders (a barrier waits
  /// for those unfinished).
  std::vector<c10::weak_intrusive_ptr<work>> queued_;
  std::unique_ptr<p2p_progress> progress_ = std::make_unique<p2p_progress>();
  /// A registered buffer of `staged_allreduce` and who holds it.
  struct staging_buffer {
    tcoll::shm_buffer<byte> memory;
    std::mutex busy;
  };
  std::array<staging_buffer, 2> staging_;
  std::size_t staging_bytes_ = 0; ///< agreed by the ranks (make_staging); 0: no staging
  /// The algorithm choice of calls up to `staging_bytes_`, staged or not (make_staging).
  tcoll::automatic staged_choice_;
  std::mutex coalescing_mutex_;
  /// The works of the calls since startCoalescing (empty optional: not coalescing).
  std::optional<std::vector<c10::intrusive_ptr<c10d::Work>>> coalescing_;
  /// Calls moving at most this many bytes per rank run in the caller's thread
  /// (TCOLL_TORCH_INLINE_BYTES, default 64 KiB; 0 queues every asynchronous call on the
  /// engine), and so does every call its caller waits for at once (`caller_waits`).
  std::size_t inline_max_bytes_ = [] {
    const char* v = std::getenv("TCOLL_TORCH_INLINE_BYTES");
    return v ? static_cast<std::size_t>(std::strtoull(v, nullptr, 10)) : std::size_t{64} << 10;
  }();
};

/// The layout of a group as Python sees it: (node, nodes, local_rank, local_size, shards,
/// the node of every rank).
using layout_tuple = std::tuple<int, int, int, int, int, std::vector<int>>;

/// The layout of a group (collective over its ranks).
layout_tuple node_layout(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size) {
  auto l = backend::node_layout_of(*store, rank, size);
  return {l.node, l.nodes, l.local_rank, l.local_size, l.shards, std::move(l.node_of)};
}

/// Makes the backend of one group (tcoll_torch/__init__.py calls it for
/// `torch.distributed.Backend.register_backend`).
c10::intrusive_ptr<c10d::Backend>
create_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
               const std::chrono::duration<float>& timeout, layout_tuple layout,
               c10::intrusive_ptr<c10d::Backend> flat_group,
               c10::intrusive_ptr<c10d::Backend> inter_group, const std::vector<int>& mpi_ranks) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(timeout);
  auto& [node, nodes, local_rank, local_size, shards, node_of] = layout;
  TORCH_CHECK(static_cast<int>(node_of.size()) == size, "tcoll: rank ", rank,
              ": the layout names the node of ", node_of.size(), " ranks, not ", size);
  return c10::make_intrusive<backend>(
      store, rank, size, ms.count() > 0 ? ms : std::chrono::milliseconds(1800000),
      backend::node_layout{node, nodes, local_rank, local_size, shards, std::move(node_of)},
      std::move(flat_group), std::move(inter_group), mpi_ranks);
}

} // namespace tcoll_torch

namespace tcoll_torch {
/// `b` (the object `group._get_backend(torch.device("cpu"))` returns) as a tcoll backend;
/// otherwise an error naming `what`, the function asked.
backend& tcoll_backend(const c10::intrusive_ptr<c10d::Backend>& b, const char* what) {
  auto* mine = dynamic_cast<backend*>(b.get());
  TORCH_CHECK(mine, "tcoll: ", what, ": not a tcoll backend");
  return *mine;
}

/// `time_raw_allreduce` of the tcoll backend of a process group.
double time_raw_allreduce(const c10::intrusive_ptr<c10d::Backend>& b, std::size_t bytes,
                          int iters) {
  return tcoll_backend(b, "time_raw_allreduce").time_raw_allreduce(bytes, iters);
}
} // namespace tcoll_torch

namespace tcoll_torch {
backend_communicators communicators_of(const c10::intrusive_ptr<c10d::Backend>& b) {
  auto* mine = dynamic_cast<backend*>(b.get());
  if (!mine)
    throw pybind11::value_error("tcoll: the process group's CPU backend is " +
                                (b ? b->getBackendName() : std::string("missing")) +
                                ", not tcoll (init_process_group(\"tcoll\") or \"cpu:tcoll,...\")");
  return mine->communicators();
}
} // namespace tcoll_torch

namespace tcoll_torch {
namespace { // hidden, as pybind11's own types (no visibility warning for its class_)
/// A tcoll backend held for `tcoll_torch.all_reduce` (tcoll_torch/__init__.py keeps one per
/// group): the checked cast is made once, not per call.
class direct_handle {
public:
  explicit direct_handle(const c10::intrusive_ptr<c10d::Backend>& b)
      : keep_(b), backend_(dynamic_cast<backend*>(b.get())) {
    if (!backend_)
      throw pybind11::value_error("tcoll_torch.all_reduce: the group's CPU backend is " +
                                  (b ? b->getBackendName() : std::string("missing")) +
                                  ", not tcoll");
  }
  void all_reduce(const at::Tensor& tensor, c10d::ReduceOp::RedOpType op) {
    backend_->all_reduce_now(tensor, op);
  }

private:
  c10::intrusive_ptr<c10d::Backend> keep_;
  backend* backend_;
};
} // namespace
} // namespace tcoll_torch

namespace tcoll_torch {
/// What carries a tcoll backend's messages between nodes: "mpi", "gloo" or "none".
std::string internode_of(const c10::intrusive_ptr<c10d::Backend>& b) {
  return tcoll_backend(b, "internode_of").internode();
}

/// mpi_link::world_ranks with its tcoll errors as Python ValueErrors.
std::vector<int> mpi_world_ranks(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size) {
  try {
    return mpi_link::world_ranks(*store, rank, size);
  } catch (const tcoll::invalid_argument& e) {
    throw pybind11::value_error(std::string("tcoll: ") + e.what());
  }
}

} // namespace tcoll_torch

namespace tcoll_torch {
/// The layout a tcoll backend runs with (tests, TCOLL_DEBUG users).
std::tuple<int, int, int, int, int> layout_of(const c10::intrusive_ptr<c10d::Backend>& b) {
  return tcoll_backend(b, "layout_of").layout();
}
} // namespace tcoll_torch

namespace tcoll_torch {
/// Messages this rank has sent from registered memory on its node's transport (tests: the
/// staged allreduce sends from its registered buffers).
std::uint64_t registered_messages(const c10::intrusive_ptr<c10d::Backend>& b) {
  return tcoll_backend(b, "registered_messages").registered_messages();
}
} // namespace tcoll_torch

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "tcoll's torch.distributed backend (docs/torch.md)";
  m.def("registered_messages", &tcoll_torch::registered_messages,
        "messages sent from registered shared memory by this rank (tests)");
  // the collective set-up calls wait for the other ranks through the store: without the
  // GIL, so that the process's other Python threads (their collectives included) go on
  using no_gil = pybind11::call_guard<pybind11::gil_scoped_release>;
  m.def("node_layout", &tcoll_torch::node_layout,
        "(node, nodes, local_rank, local_size, shards) of a group (collective)", no_gil());
  m.def("create_backend", &tcoll_torch::create_backend, "the creator of a tcoll process group",
        no_gil(), pybind11::arg("store"), pybind11::arg("rank"), pybind11::arg("size"),
        pybind11::arg("timeout"), pybind11::arg("layout"), pybind11::arg("flat_group") = nullptr,
        pybind11::arg("inter_group") = nullptr, pybind11::arg("mpi_ranks") = std::vector<int>{});
  m.def("mpi_world_ranks", &tcoll_torch::mpi_world_ranks, no_gil(),
        "every rank's MPI_COMM_WORLD rank when MPI is to carry the group's messages between "
        "nodes, else [] (collective through the store; TCOLL_TORCH_INTERNODE)");
  m.def("mpi_finalize", &tcoll_torch::mpi_link::finalize_if_initialised_here,
        "MPI_Finalize, if this extension initialised MPI");
  m.def(
      "mpi_initialised_here", [] { return tcoll_torch::mpi_link::initialised_here(); },
      "whether this extension called MPI_Init_thread");
  m.def("internode_of", &tcoll_torch::internode_of,
        "what carries a tcoll backend's messages between nodes: mpi, gloo or none");
  m.attr("built_with_mpi") = tcoll_torch::mpi_link::built_with_mpi();
  // the GIL is let go while the call runs: a future callback of an earlier call (a DDP comm
  // hook) may need it on the engine thread before this call can start
  pybind11::class_<tcoll_torch::direct_handle>(m, "DirectHandle")
      .def(pybind11::init<const c10::intrusive_ptr<c10d::Backend>&>())
      .def("all_reduce", &tcoll_torch::direct_handle::all_reduce,
           pybind11::call_guard<pybind11::gil_scoped_release>(),
           "allreduce of one CPU tensor in place, returning when done");
  m.def("layout_of", &tcoll_torch::layout_of,
        "(node, nodes, local_rank, local_size, shards) of a tcoll backend");
  m.def("time_raw_allreduce", &tcoll_torch::time_raw_allreduce,
        "seconds per blocking allreduce straight from C++ (collective; benchmarks only)");
  tcoll_torch::register_ddp(m);
}
