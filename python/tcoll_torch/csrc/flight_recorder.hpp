#pragma once
// The tcoll backend's own entries in torch's Flight Recorder (docs/torch.md, "The Flight
// Recorder").
//
// torch attaches a recording hook (c10d::FlightRecorderHook) to every group whose backend
// does not record itself; around each call it copies the call's tensors into the hook's
// arguments, runs two callbacks and keeps a map of calls in flight: about 2 us per call on
// the 2-core VM, more than the collective. A backend that records itself, as Gloo and NCCL
// do, is spared the hook. tcoll_torch/__init__.py tells torch that tcoll is such a backend
// (it adds the name to `distributed_c10d._FR_SELF_RECORDING_BACKENDS`, the list torch's
// own NCCL registration keeps) and then sets `records_natively`; from then on every group
// records each call into the recorder instance the hook would have used
// (`c10d::getFlightRecorder("tcoll")`), with the hook's names, sequence numbers, sizes and
// stack trace, so dumps read as before. Unlike the hook's, an entry is retired when its call
// has finished (the hook retired at issue, as tcoll had no completion hook): a dump reads
// "completed" with the call's duration, and a call that never finished reads "scheduled".
#include <torch/csrc/distributed/c10d/FlightRecorder.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <ATen/ATen.h>
#include <c10/util/ApproximateClock.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace c10d {
class Backend;
}

namespace tcoll_torch {

using flight_recorder = c10d::FlightRecorder<c10::Event>;

/// Whether tcoll's groups record into torch's Flight Recorder themselves (see the file
/// comment): set once torch has been told not to hook them, never otherwise, so a call is
/// recorded once (by the hook or here), not twice and not never.
inline std::atomic<bool> records_natively{false};

class group_trace;

/// One call's entry in the recorder, or none (recording off). `retire(true)` when the call
/// has succeeded marks it completed; a failed call's entry is left as it is.
class trace_entry {
public:
  trace_entry() = default;
  /// Now is when the call started to run (queued calls start after the earlier ones; one
  /// that runs at once started when it was recorded): its duration runs from here to
  /// `retire`.
  void started() noexcept { start_ns_ = c10::getTime(); }
  /// Retires the entry of a call that `succeeded` (once; later calls do nothing).
  void retire(bool succeeded) noexcept;

private:
  friend class group_trace;
  std::shared_ptr<group_trace> group_;
  flight_recorder::TraceIdentifier id_;
  std::int64_t op_id_ = -1;
  /// On torch's recorder clock (`c10::getTime`), so a call reads the clock twice when it
  /// runs at once: clock_gettime was an eighth of the recording's cost on the 2-core VM.
  c10::time_t start_ns_ = 0;
};

/// What one group records: its recorder, its place in it (id, name, ranks) and the status
/// torch's dumps report for it (last call enqueued and completed).
class group_trace : public std::enable_shared_from_this<group_trace> {
public:
  /// `global_ranks`: the world rank of every rank of the group (empty: 0..size-1).
  group_trace(int rank, int size, std::vector<std::uint64_t> global_ranks,
              std::chrono::milliseconds timeout);

  /// An entry for a call of `type` on backend `b` that reads `inputs` and writes `outputs`
  /// (`peer`: the other rank of a send or receive, -1 for a receive from any source); an
  /// empty one when recording is off. Called in the caller's thread, in call order.
  trace_entry record(const c10d::Backend& b, c10d::OpType type,
                     const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs,
                     int peer = -1);

  /// The world ranks of the group.
  const std::vector<std::uint64_t>& global_ranks() const { return global_ranks_; }

private:
  friend class trace_entry;

  int rank_;
  std::vector<std::uint64_t> global_ranks_;
  std::chrono::milliseconds timeout_;
  flight_recorder* recorder_;
  std::size_t pg_id_;
  std::once_flag ranks_recorded_;
  /// Calls recorded so far (under the recorder's lock).
  std::size_t collectives_ = 0, point_to_point_ = 0, ops_ = 0;
  std::shared_ptr<c10d::ProcessGroupStatus> status_ = std::make_shared<c10d::ProcessGroupStatus>();
};

} // namespace tcoll_torch
