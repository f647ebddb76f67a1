// The tcoll backend's entries in torch's Flight Recorder (flight_recorder.hpp). The only
// file that includes FlightRecorderDetail.hpp: the recorder's member templates are defined
// there and exported by no torch library, so they are instantiated here, on the instance
// `getFlightRecorder` returns (libtorch_cpu's, which torch's dumps read).
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/FlightRecorderDetail.hpp>

#include <c10/util/thread_name.h>

#include <algorithm>
#include <string>
#include <thread>
#include <tuple>
#include <utility>

#include "flight_recorder.hpp"

namespace tcoll_torch {

namespace {

/// The name torch's recording hook gives a call of `type` (its `HookOpName`s, in the words
/// its dumps use), so a dump reads the same whoever recorded it.
const char* hook_name(c10d::OpType type) {
  using c10d::OpType;
  switch (type) {
  case OpType::ALLREDUCE:
    return "tcoll:all_reduce";
  case OpType::ALLREDUCE_COALESCED:
    return "tcoll:allreduce_coalesced";
  case OpType::BROADCAST:
    return "tcoll:broadcast";
  case OpType::REDUCE:
    return "tcoll:reduce";
  case OpType::ALLGATHER:
    return "tcoll:all_gather";
  case OpType::_ALLGATHER_BASE:
    return "tcoll:_all_gather_base";
  case OpType::ALLGATHER_COALESCED:
    return "tcoll:allgather_coalesced";
  case OpType::ALLGATHER_INTO_TENSOR_COALESCED:
    return "tcoll:all_gather_into_tensor_coalesced";
  case OpType::REDUCE_SCATTER:
    return "tcoll:reduce_scatter";
  case OpType::_REDUCE_SCATTER_BASE:
    return "tcoll:_reduce_scatter_base";
  case OpType::REDUCE_SCATTER_TENSOR_COALESCED:
    return "tcoll:reduce_scatter_tensor_coalesced";
  case OpType::ALLTOALL_BASE:
    return "tcoll:all_to_all_single";
  case OpType::ALLTOALL:
    return "tcoll:all_to_all";
  case OpType::GATHER:
    return "tcoll:gather";
  case OpType::SCATTER:
    return "tcoll:scatter";
  case OpType::BARRIER:
    return "tcoll:barrier";
  case OpType::SEND:
    return "tcoll:send";
  case OpType::RECV:
  case OpType::RECVANYSOURCE:
    return "tcoll:recv";
  default:
    return "tcoll:unknown";
  }
}

bool is_point_to_point(c10d::OpType type) {
  return type == c10d::OpType::SEND || type == c10d::OpType::RECV ||
         type == c10d::OpType::RECVANYSOURCE;
}

/// Numbers the groups of this process in the order they are made (the default group is 0),
/// as torch's own backends number theirs.
std::atomic<std::size_t> groups_made{0};

/// This thread's name, read once per thread: `c10::getThreadName` asks the kernel (a
/// prctl), which was half of what recording a call cost (perf, docs/torch.md). A thread
/// renamed after its first recorded call keeps its first name in the recorder.
const std::string& this_thread_name() {
  thread_local const std::string name = c10::getThreadName();
  return name;
}

/// The heap storage of the entry this thread records next: the strings and lists that the
/// entry it replaced in the recorder's ring held, handed on to the next entry (filled by
/// assignment, which keeps their capacity) instead of freed and allocated again. Once the
/// ring is full, a call's entry allocates only its stack trace.
struct spare_storage {
  std::string name;
  std::tuple<std::string, std::string> pg_name;
  std::vector<c10::ScalarType> input_dtypes, output_dtypes;
  /// Takes the storage of `e`, an entry taken out of the ring.
  void take_from(flight_recorder::Entry& e) {
    name = std::move(e.profiling_name_);
    pg_name = std::move(e.pg_name_);
    input_dtypes = std::move(e.input_dtypes_);
    output_dtypes = std::move(e.output_dtypes_);
  }
};

spare_storage& this_thread_spare() {
  thread_local spare_storage spare;
  return spare;
}

} // namespace

group_trace::group_trace(int rank, int size, std::vector<std::uint64_t> global_ranks,
                         std::chrono::milliseconds timeout)
    : rank_(rank), global_ranks_(std::move(global_ranks)), timeout_(timeout),
      recorder_(c10d::getFlightRecorder("tcoll")), pg_id_(groups_made++) {
  if (global_ranks_.empty())
    for (int q = 0; q < size; ++q) global_ranks_.push_back(static_cast<std::uint64_t>(q));
}

// What `recorder.recordWithResetEnabled(...)` (FlightRecorderDetail.hpp) does for a call
// without device events, but for three things: the thread's name is read once per thread,
// not at every call; the group's counters and status change under the recorder's lock, the
// one its dumps read them under, so one lock is taken per call, not three; and the entry
// reuses the storage of the one it replaces (`spare_storage`). Same entry, same
// place. Its fields are named, so a torch whose entry differs fails to build here instead of
// recording something else.
trace_entry group_trace::record(const c10d::Backend& b, c10d::OpType type,
                                const std::vector<at::Tensor>& inputs,
                                const std::vector<at::Tensor>& outputs, int peer) {
  trace_entry handle;
  if (!records_natively.load(std::memory_order_relaxed) || !recorder_ || !recorder_->enabled_)
    return handle;
  const bool p2p = is_point_to_point(type);
  spare_storage& spare = this_thread_spare();
  std::string& name = spare.name;
  name.assign(hook_name(type));
  if (p2p) { // as the hook names them: "send 0->1", "recv 1<-0", "recv 1<-?"
    name.append(" ").append(std::to_string(rank_));
    name.append(type == c10d::OpType::SEND ? "->" : "<-");
    name.append(peer >= 0 ? std::to_string(peer) : std::string("?"));
  }
  // the group's name and description are set after the backend is made (ProcessGroup's
  // setGroupUid), so they are read at the call
  std::tuple<std::string, std::string>& pg_name = spare.pg_name;
  std::get<0>(pg_name).assign(b.getGroupUid());
  std::get<1>(pg_name).assign(b.getGroupDesc());
  spare.input_dtypes.clear();
  spare.output_dtypes.clear();
  std::call_once(ranks_recorded_, [&] {
    // what the hook does when it is attached: the group's members, and this process's
    // world rank (it names the dump file)
    recorder_->record_pg_ranks(pg_name, global_ranks_);
    recorder_->setRank(static_cast<int>(global_ranks_.at(static_cast<std::size_t>(rank_))));
  });
  flight_recorder::Entry e{
      .id_ = 0,
      .reset_epoch_ = 0,
      .pg_id_ = pg_id_,
      .pg_name_ = std::move(pg_name),
      .collective_seq_id_ = 0,
      .p2p_seq_id_ = 0,
      .op_id_ = 0,
      .profiling_name_ = std::move(spare.name),
      .traceback_ = torch::CapturedTraceback::gather(true, true, recorder_->capture_cpp_stack_),
      .start_ = nullptr,
      .end_ = nullptr,
      .time_created_ = handle.start_ns_ = c10::getTime(),
      .timeout_ms_ = timeout_.count(),
      .isP2P_ = p2p,
      .duration_ = std::nullopt,
      .time_discovered_started_ = std::nullopt,
      .time_discovered_completed_ = std::nullopt,
      .input_dims_ = {},
      .input_dtypes_ = std::move(spare.input_dtypes),
      .output_dims_ = {},
      .output_dtypes_ = std::move(spare.output_dtypes),
      .sizes_ = {},
      .thread_id_ = std::this_thread::get_id(),
      .thread_name_ = this_thread_name(),
      .retired_ = false,
  };
  // each tensor's dtype and rank, its sizes in one flat list (inputs first); the elements
  auto note_tensors = [&e](const std::vector<at::Tensor>& tensors, auto& dtypes, auto& dims) {
    std::size_t numel = 0;
    for (const auto& t : tensors) {
      const c10::IntArrayRef sizes = t.sizes();
      dtypes.push_back(t.scalar_type());
      dims.push_back(static_cast<std::int64_t>(sizes.size()));
      e.sizes_.insert(e.sizes_.end(), sizes.begin(), sizes.end());
      numel += static_cast<std::size_t>(t.numel());
    }
    return numel;
  };
  const std::size_t numel_in = note_tensors(inputs, e.input_dtypes_, e.input_dims_);
  const std::size_t numel_out = note_tensors(outputs, e.output_dtypes_, e.output_dims_);
  flight_recorder& r = *recorder_;
  {
    std::lock_guard lock(r.mutex_);
    (p2p ? point_to_point_ : collectives_) += 1;
    e.collective_seq_id_ = collectives_;
    e.p2p_seq_id_ = point_to_point_;
    e.op_id_ = ops_++;
    status_->lastEnqueuedSeq = static_cast<std::int64_t>(e.op_id_);
    status_->lastEnqueuedWorkName = hook_name(type);
    status_->lastEnqueuedNumelIn = numel_in;
    status_->lastEnqueuedNumelOut = numel_out;
    if (!r.all_pg_status_.contains(pg_id_)) r.all_pg_status_[pg_id_] = status_;
    TORCH_CHECK(r.reset_epoch_start_idx_.contains(r.reset_epoch_));
    e.id_ = r.id_++;
    e.reset_epoch_ = r.reset_epoch_;
    handle.id_ = {e.id_, e.reset_epoch_};
    handle.op_id_ = static_cast<std::int64_t>(e.op_id_);
    const std::size_t next = r.next_++;
    if (r.entries_.size() < r.max_entries_)
      r.entries_.emplace_back(std::move(e));
    else // `e` becomes the ring's oldest entry, taken apart after the lock is let go
      std::swap(r.entries_[next], e);
    if (r.next_ == r.max_entries_) r.next_ = 0;
  }
  spare.take_from(e); // its stack trace is freed with `e`, outside the lock
  handle.group_ = shared_from_this();
  return handle;
}

// What `recorder.retire_completed(...)` does, and the group's status under the same lock.
void trace_entry::retire(bool succeeded) noexcept {
  if (!group_) return;
  auto group = std::move(group_);
  if (!succeeded) return;
  const auto now = c10::getTime();
  const float took_ms = static_cast<float>(now - start_ns_) / 1e6f;
  flight_recorder& r = *group->recorder_;
  try {
    std::lock_guard lock(r.mutex_);
    // calls may finish out of order (a small one in the caller's thread beside a queued one)
    auto& status = *group->status_;
    status.lastCompletedSeq = std::max(status.lastCompletedSeq, op_id_);
    flight_recorder::Entry& e = r.entries_.at(r.getIdxFromId(*id_.id, *id_.reset_epoch));
    if (e.id_ != *id_.id || e.reset_epoch_ != *id_.reset_epoch) return; // overwritten since
    if (!e.time_discovered_started_) e.time_discovered_started_ = now;
    if (!e.time_discovered_completed_) e.time_discovered_completed_ = now;
    e.duration_ = took_ms;
    e.retired_ = true;
  } catch (...) { // an entry the recorder has dropped (reset_fr_trace): nothing to mark
  }
}

} // namespace tcoll_torch
