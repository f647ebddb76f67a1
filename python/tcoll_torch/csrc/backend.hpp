#pragma once
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
//
// This header declares the class and what more than one of its files needs; its member
// functions are defined by job in backend_setup.cpp (group set-up and bootstrap),
// backend_collectives.cpp and backend_p2p.cpp (point-to-point and coalescing); work.hpp
// holds the Work objects, flight_recorder.cpp the calls' entries in torch's Flight Recorder,
// module.cpp the Python module. Only module.cpp includes pybind11
// and torch/extension.h: each file is a translation unit that parses torch's headers again,
// and its Python bindings are most of them (25 s to parse on the 2-core VM, c10d's 8 s).
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <ATen/ATen.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <tcoll/algorithm/hierarchical.hpp>
#include <tcoll/collectives.hpp>
#include <tcoll/transport/shm.hpp>

#include "backend_access.hpp"
#include "flight_recorder.hpp"
#include "internode_transport.hpp"
#include "work.hpp"

namespace tcoll_torch {

using byte = std::uint8_t;

/// Throws (a Python RuntimeError naming `what`, `argument` and `rank`) unless `t` is a
/// defined, strided CPU tensor.
inline void check_cpu(const at::Tensor& t, const char* what, const char* argument, int rank) {
  TORCH_CHECK(t.defined(), "tcoll: ", what, ": rank ", rank, ": ", argument, " is undefined");
  TORCH_CHECK(t.device().is_cpu(), "tcoll: ", what, ": rank ", rank, ": ", argument, " is on ",
              t.device(),
              "; the tcoll backend takes CPU tensors (use "
              "init_process_group(\"cpu:tcoll,cuda:nccl\") for both)");
  TORCH_CHECK(t.layout() == at::kStrided, "tcoll: ", what, ": rank ", rank, ": ", argument,
              " is not dense (", t.layout(), ")");
}

/// A contiguous tensor to run on: `t` itself or a contiguous copy (copied back at the end).
inline at::Tensor dense(const at::Tensor& t) {
  return t.is_contiguous() ? t : t.contiguous();
}

/// TCOLL_DEBUG set and not "0" (read once per process).
inline bool debug_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("TCOLL_DEBUG");
    return v && *v && std::strcmp(v, "0") != 0;
  }();
  return on;
}

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

  // Group set-up and bootstrap: backend_setup.cpp.

  /// `layout`: from `node_layout_of`. Across nodes the messages between nodes travel over
  /// MPI when `mpi_ranks` (every rank's MPI_COMM_WORLD rank, from mpi_link::world_ranks)
  /// is not empty, otherwise over two Gloo process groups: `flat_group` (every rank of the
  /// group) and `inter_group` (the ranks of this local index on every node; null for local
  /// ranks >= shards). The flat collectives run over every rank, the inter-node level of the
  /// hierarchical allreduce over the ranks of one local index. Python makes the Gloo groups
  /// (tcoll_torch/__init__.py): torch's wheel ships no Gloo headers to build them here.
  /// `global_ranks`: the world rank of every rank of the group (empty: 0..size-1), which
  /// its Flight Recorder entries name.
  backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
          std::chrono::milliseconds timeout, node_layout layout,
          c10::intrusive_ptr<c10d::Backend> flat_group,
          c10::intrusive_ptr<c10d::Backend> inter_group, const std::vector<int>& mpi_ranks,
          std::vector<std::uint64_t> global_ranks = {});

  ~backend() override;

  /// Collective: the layout of the group from every rank's node identity (host name and
  /// boot id, exchanged through the store; see bootstrap::node_identity()).
  static node_layout node_layout_of(c10d::Store& store, int rank, int size);

  const std::string getBackendName() const override { return "tcoll"; }

  /// `dist.split_group`: each rank of `ranks` (ranks of this group) gets a new tcoll group of
  /// those ranks, in their order, made as `init_process_group` makes one (tcoll_torch's
  /// `_create`, through `store`, which ProcessGroup::splitGroup gives every split its own
  /// prefix in); nullptr for a rank outside `ranks`, as Gloo's split does.
  bool supportsSplitting() const override { return true; }
  c10::intrusive_ptr<Options> getBackendOptions() override;
  c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store>& store,
                                          const std::vector<int>& ranks,
                                          const c10::intrusive_ptr<Options>& opts) override;

  /// What carries the messages between nodes: "mpi", "gloo", or "none" on one node.
  std::string internode() const { return flat_ ? std::string(flat_->engine()) : "none"; }

  std::uint64_t registered_messages() const { return shm_->registered_messages(); }
  /// Calls this rank has run on the two-level machine across nodes (tests).
  std::uint64_t machine_calls() const { return machine_calls_.load(std::memory_order_relaxed); }

  /// Its communicators (backend_access.hpp): the DistributedDataParallel reducer runs on them.
  backend_communicators communicators() const {
    return {shm_.get(), machine_.get(), rank_, size_, flat_.get()};
  }

  /// This rank's place: (node, nodes, local_rank, local_size, shards).
  std::tuple<int, int, int, int, int> layout() const {
    return {layout_.node, layout_.nodes, layout_.local_rank, layout_.local_size, layout_.shards};
  }

  /// Calls made on this group so far (PyTorch's ProcessGroupWrapper, which
  /// TORCH_DISTRIBUTED_DEBUG=DETAIL puts around the backend, compares them across ranks).
  void setSequenceNumberForGroup() override { sequence_ = 0; }
  uint64_t getSequenceNumberForGroup() override { return sequence_; }

  // Collectives: backend_collectives.cpp.

  /// `tcoll_torch.all_reduce`: an allreduce of one dense CPU tensor in place that returns
  /// when it is done, called straight from Python (a `direct_handle`), not through torch's
  /// dispatcher, its Work or the Flight Recorder (DeepSpeed's `inference_all_reduce` is
  /// such a call). The same path as a blocking `dist.all_reduce`: at once in this thread
  /// when nothing is queued on the engine, otherwise after what is.
  void all_reduce_now(const at::Tensor& tensor, c10d::ReduceOp::RedOpType op);

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;

  c10::intrusive_ptr<c10d::Work> allreduce_sparse(std::vector<at::Tensor>& tensors,
                                                  const c10d::AllreduceOptions& opts) override;

  c10::intrusive_ptr<c10d::Work>
  allreduce_coalesced(std::vector<at::Tensor>& tensors,
                      const c10d::AllreduceCoalescedOptions& opts) override;

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;

  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;

  /// `all_gather_coalesced` (deprecated in torch, still Gloo's): one allgather per input,
  /// outputs[q][i] gets rank q's inputs[i]; one work.
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;

  /// Several all_gather_into_tensor calls as one (torch's `_coalescing_manager` fast path,
  /// FSDP): one work, the pairs in list order.
  c10::intrusive_ptr<c10d::Work>
  all_gather_single_coalesced(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                              const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work>
  allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                  const c10d::AllgatherOptions& opts) override;

  /// Several reduce_scatter_tensor calls as one (see all_gather_single_coalesced).
  c10::intrusive_ptr<c10d::Work>
  reduce_scatter_single_coalesced(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                  const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work>
  reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                  const c10d::ReduceScatterOptions& opts) override;

  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;

  c10::intrusive_ptr<c10d::Work>
  _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                       const c10d::ReduceScatterOptions& opts) override;

  /// `all_to_all_single`: blocks of one size (even splits, or splits all alike) run the
  /// library's choice by size, Bruck or the pairwise exchange (`alltoall_by_size`); uneven
  /// ones the pairwise exchange.
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override;

  /// `all_to_all` (lists): inputs[q] goes to rank q, outputs[q] comes from rank q; the
  /// tensors may differ in size per peer (as Gloo's), the dtypes must agree.
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;

  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;

  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  /// `monitored_barrier`, as Gloo's: every rank reports to rank 0 and waits for its
  /// answer; rank 0 names the ranks that did not report within the timeout (all of them
  /// with `wait_all_ranks`, else the first), in Gloo's words. It runs after the calls still
  /// queued on the engine, as a barrier does (at once in the caller's thread when none is),
  /// in a message space of the collectives, so user tags are untouched. A failure leaves
  /// the group broken.
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override;

  /// Collective: seconds per call of `iters` blocking float-sum allreduces of `bytes` on
  /// this group's transport straight from C++ (no Python, no Work), after a warm-up: the
  /// baseline of the Python-visible overhead in bench/torch/collectives_perf.py.
  double time_raw_allreduce(std::size_t bytes, int iters);

  // Point-to-point and coalescing: backend_p2p.cpp.

  /// Coalescing (torch's `batch_isend_irecv`, `_coalescing_manager` with a device): the
  /// calls between start and end run as usual; `endCoalescing` returns one work over them.
  bool supportsCoalescing() const override { return true; }
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;

  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;

  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;

  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;

private:
  // What more than one of the files uses.

  /// `w`, handed to the progress thread unless it is complete already.
  template <class W>
  c10::intrusive_ptr<W> progressed(c10::intrusive_ptr<W> w) {
    if (!w->isCompleted()) progress_->add(w, [p = w.get()] { return p->poll(); });
    return w;
  }

  /// `w`, also kept for `endCoalescing` while coalescing.
  template <class W>
  c10::intrusive_ptr<W> recorded(c10::intrusive_ptr<W> w) {
    // most calls come outside any batch: no lock for them (a batch is started and its
    // calls made in one thread, torch's coalescing manager's)
    if (!coalescing_now_.load(std::memory_order_acquire)) return w;
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

  // Set-up.

  /// Collective (the group's ranks, all on one node): the registered staging buffers of
  /// `staged_allreduce`, `TCOLL_TORCH_STAGING_BYTES` each (default 4 MiB; 0: none), on a
  /// group of two ranks. The ranks agree on the smallest value asked, so all of them stage
  /// the same calls. Measured on the 2-core VM (docs/torch.md): staged recursive doubling
  /// is 1.4-1.6x plain recursive doubling from 128 KiB to 2 MiB and faster than plain
  /// halving-doubling, the unstaged choice there; on 4 ranks (oversubscribed) staging
  /// changed nothing measurable, so larger groups do not stage.
  void make_staging(c10d::Store& store, int rank, int size);

  // Collectives.

  /// Queues `body(t, tag)` on the engine of the flat transport `t` (or runs it at once when
  /// the call moves at most `inline_max_bytes_` per rank); the returned work completes when
  /// it has run (or failed: a failure breaks the group, and every later call fails at once).
  /// The call goes into torch's Flight Recorder (`trace_`) as reading `inputs` and writing
  /// `outputs`, unless its override said otherwise (`waited_call`).
  template <class Body>
  c10::intrusive_ptr<c10d::Work> enqueue(OpType type, std::vector<at::Tensor> outputs,
                                         const std::vector<at::Tensor>& inputs, const char* what,
                                         std::size_t bytes, Body body);

  /// `body(tags)` on communicator `c` (a transport or the hierarchy): queued on its engine,
  /// or run at once (see below); the message spaces are drawn now either way.
  template <class Comm, class Body>
  c10::intrusive_ptr<c10d::Work> enqueue_on(Comm& c, OpType type, std::vector<at::Tensor> outputs,
                                            const std::vector<at::Tensor>& inputs, const char* what,
                                            std::size_t bytes, Body body);

  /// Whether a call of collective `C` whose selection rules measure `rule_bytes` (the
  /// table's size measure) runs on the two-level machine: across nodes, where the first
  /// rule of `C`'s variable (TCOLL_BCAST_ALGO, ...) that covers it names `hierarchical`, as
  /// under the preload (allreduce runs there always).
  template <tcoll::collective C>
  bool on_machine(std::size_t rule_bytes) const;

  /// The call size a body is given on the machine (`enqueue_by_rule`): past every inline
  /// bound, so no rank takes the collective area there.
  static constexpr std::size_t machine_bytes = SIZE_MAX;

  /// `run(c, tags, call_bytes)`, a call of collective `C` moving `bytes` (its selection
  /// rules' size measure too): on the two-level machine where `on_machine<C>(bytes)`
  /// (`call_bytes` = `machine_bytes`), else on the flat transport (`enqueue`; `call_bytes` =
  /// `bytes`), so one body serves both.
  template <tcoll::collective C, class Run>
  c10::intrusive_ptr<c10d::Work> enqueue_by_rule(OpType type, std::vector<at::Tensor> outputs,
                                                 const std::vector<at::Tensor>& inputs,
                                                 const char* what, std::size_t bytes, Run run);

  /// The calls handed to an engine other than `engine`'s (a communicator's address) that
  /// have not finished: across nodes, what a call on the other engine waits for first.
  std::vector<c10::intrusive_ptr<work>> pending_elsewhere(const void* engine);

  /// allreduce and allreduce_coalesced: each tensor in place, one after another.
  c10::intrusive_ptr<c10d::Work> reduce_all(std::vector<at::Tensor>& tensors,
                                            const c10d::ReduceOp& op, OpType type,
                                            const char* what);

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
                        const tcoll::runtime_op& op);

  /// allreduce of one sparse COO tensor, as Gloo's (SUM; AVG too for floating point): every
  /// rank's coalesced indices and values are gathered, padded to the largest count, and
  /// summed in rank order into a coalesced tensor (the same bits on every rank) that
  /// replaces the tensor's contents. The ranks' shapes and dtypes are checked first.
  c10::intrusive_ptr<c10d::Work> sparse_allreduce(std::vector<at::Tensor>& tensors,
                                                  const c10d::ReduceOp& op);

  /// The allgather of `in` into `out` on `t`: in the collective area where the call
  /// moving `call_bytes` (agreed by every rank) runs in the caller's thread and
  /// `shared_memory_choice` takes the area for its size (see `inline_choice_`), the ring
  /// otherwise. `call_bytes` = SIZE_MAX: always the ring.
  /// On the two-level machine (`t` is `*machine_`, `tag` its tags, `call_bytes`
  /// `machine_bytes`) the machine's own.
  template <class Comm, class Tags>
  void run_allgather(Comm& t, const Tags& tag, const at::Tensor& in, const at::Tensor& out,
                     std::size_t call_bytes);

  /// The reduce-scatter of `in` into `out` on `t`, in the collective area or by the ring as
  /// `run_allgather`.
  template <class Comm, class Tags>
  void run_reduce_scatter(Comm& t, const Tags& tag, const at::Tensor& in, const at::Tensor& out,
                          std::size_t call_bytes, const c10d::ReduceOp& op);

  static std::size_t total_bytes(const std::vector<at::Tensor>& tensors);

  static byte* bytes_of(const at::Tensor& t);

  static void copy_back(const at::Tensor& user, const at::Tensor& ran_on);

  static std::vector<at::Tensor> flattened(const std::vector<at::Tensor>& list);

  void check_list(const std::vector<at::Tensor>& tensors, const char* what, const char* argument);
  /// Coalesced calls: as many outputs as inputs, and at least one.
  void check_pairs(const std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& inputs,
                   const char* what);
  void check_list_size(const std::vector<at::Tensor>& list, const char* what, const char* argument);
  /// Both tensors usable here, and of one dtype (the single-tensor collectives).
  void check_pair(const at::Tensor& output, const at::Tensor& input, const char* what);
  /// Throws at the call (not in wait()) for an op this dtype does not support.
  void check_op(const c10d::ReduceOp& op, at::ScalarType dtype);
  void check_like(const at::Tensor& t, const at::Tensor& like, const char* what,
                  const char* argument);
  int check_root(std::int64_t root, const char* what);

  std::vector<std::size_t> split_bytes(const at::Tensor& t, const std::vector<int64_t>& splits,
                                       const char* argument);

  // Point-to-point.

  void check_peer(int peer, const char* what, const char* argument);
  /// The transport's tag of user tag `tag`, which may be any non-negative int (as on Gloo):
  /// tags below 1024 as they are; higher ones where no collective's message goes (tags.hpp):
  /// on shared memory the negative tags, which carry every int; across nodes the range above
  /// the collectives' (MPI allows no negative tag, so the top 2^18 - 1024 ints are refused).
  int check_tag(int tag, const char* what);

  /// int64 slots of a sparse tensor's description (dimensions, dtype, count, sizes).
  static constexpr std::int64_t sparse_meta_slots = 32;

  c10::intrusive_ptr<c10d::Store> store_;
  node_layout layout_;
  std::unique_ptr<tcoll::shm_transport> shm_; ///< this node's ranks (all of them on one node)
  c10::intrusive_ptr<c10d::Backend> flat_group_, inter_group_; ///< across nodes only
  std::unique_ptr<internode_transport> flat_, inter_;
  std::shared_ptr<any_source_order> any_source_order_ = std::make_shared<any_source_order>();
  std::unique_ptr<tcoll::hierarchical<tcoll::shm_transport, internode_transport>> machine_;
  std::atomic<std::uint64_t> machine_calls_{0};
  std::atomic<std::uint64_t> sequence_{0};
  std::chrono::milliseconds timeout_;  ///< the group's: every wait of the backend is bounded
  std::shared_ptr<group_trace> trace_; ///< its entries in torch's Flight Recorder
  std::mutex queued_mutex_;
  /// A call handed to an engine, and which engine's communicator (the machine's or a
  /// transport's) it went to.
  struct queued_call {
    c10::weak_intrusive_ptr<work> call;
    const void* engine;
  };
  /// The calls handed to an engine, not yet released by their holders (a barrier waits
  /// for those unfinished; a call on the other engine, for those there).
  std::vector<queued_call> queued_;
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
  /// The allreduce choice of a call that runs in the caller's thread whatever the engine
  /// does (at most `inline_max_bytes_`, agreed by every rank of a one-node group): the
  /// in-segment allreduce may run there, the calls being in call order on every rank
  /// (`in_segment::caller_orders`). Every other call (queued, or inline only because the
  /// engine happened to be idle: a choice the ranks do not share) takes `queued_choice_`,
  /// which never picks it, so the ranks never split between the area and messages. The
  /// group's transport is told so (`shm_segment_area::order_by_callers`): what else runs on
  /// its engine (tcoll_torch.DistributedDataParallel's buckets) takes messages.
  tcoll::automatic inline_choice_ = [] {
    tcoll::automatic a;
    a.in_segment_knobs.caller_orders = true;
    return a;
  }();
  tcoll::automatic queued_choice_ = [] {
    tcoll::automatic a;
    a.shared_memory.in_segment_up_to_bytes = 0;
    a.shared_memory.in_segment_up_to_bytes_many = 0;
    return a;
  }();
  /// The allreduce choice of a call moving `bytes` per rank (see `inline_choice_`).
  const tcoll::automatic& allreduce_choice(std::size_t bytes) const {
    return bytes <= inline_max_bytes_ ? inline_choice_ : queued_choice_;
  }
  std::mutex coalescing_mutex_;
  /// The works of the calls since startCoalescing (empty optional: not coalescing).
  std::optional<std::vector<c10::intrusive_ptr<c10d::Work>>> coalescing_;
  /// Whether `coalescing_` holds a batch (set and cleared under `coalescing_mutex_`).
  std::atomic<bool> coalescing_now_{false};
  /// Calls moving at most this many bytes per rank run in the caller's thread
  /// (TCOLL_TORCH_INLINE_BYTES, default 64 KiB; 0 queues every asynchronous call on the
  /// engine; the ranks of a one-node group agree on the smallest value asked, since it
  /// decides where the in-segment collectives may run), and so does every call its caller
  /// waits for at once (`caller_waits`).
  std::size_t inline_max_bytes_ = [] {
    const char* v = std::getenv("TCOLL_TORCH_INLINE_BYTES");
    return v ? static_cast<std::size_t>(std::strtoull(v, nullptr, 10)) : std::size_t{64} << 10;
  }();
};

/// The layout of a group as Python sees it: (node, nodes, local_rank, local_size, shards,
/// the node of every rank).
using layout_tuple = std::tuple<int, int, int, int, int, std::vector<int>>;

/// The layout of a group (collective over its ranks).
layout_tuple node_layout(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size);

/// Makes the backend of one group (tcoll_torch/__init__.py calls it for
/// `torch.distributed.Backend.register_backend`).
c10::intrusive_ptr<c10d::Backend>
create_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
               const std::chrono::duration<float>& timeout, layout_tuple layout,
               c10::intrusive_ptr<c10d::Backend> flat_group,
               c10::intrusive_ptr<c10d::Backend> inter_group, const std::vector<int>& mpi_ranks,
               std::vector<std::uint64_t> global_ranks);

/// A new tcoll group of `size` ranks, this one `rank`, whose world ranks are `global_ranks`,
/// made by tcoll_torch's `_create` (as `init_process_group` makes one) through a clone of
/// `store`, under the GIL (module.cpp: backend::split's part that runs Python).
c10::intrusive_ptr<c10d::Backend>
create_through_python(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                      std::chrono::milliseconds timeout,
                      const std::vector<std::uint64_t>& global_ranks);

} // namespace tcoll_torch
