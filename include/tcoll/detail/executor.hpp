#pragma once
/// \file
/// Runs the steps an algorithm describes on any transport and reducer. Receive-and-reduce
/// goes through `irecv_consume`, so a zero-copy transport reduces straight from the sender's
/// memory while a staging transport receives into a staging slice first; the algorithm
/// does not know which.
#include <array>
#include <cstddef>
#include <deque>
#include <memory_resource>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "collective_scope.hpp"
#include "schedule.hpp"

namespace tcoll::detail {

/// Host scratch a thread lends to one collective at a time, so a repeated collective
/// allocates nothing: on shared memory a small allreduce's two aligned allocations were a
/// third of tcoll's per-call overhead, and from 128 KiB up glibc maps and unmaps each
/// allocation, so a call whose scratch is written (in-place recursive doubling, a reduce's
/// leaf) paid a page fault per 4 KiB every time (256 KiB `MPI_Reduce` on 2 processes: 41-46
/// us, against 24-31 us with the allocations kept). Grows to the largest call seen, up to
/// `max_bytes` (kept until the thread ends); calls needing more, or a second executor while
/// one holds it, allocate as before.
struct thread_workspace {
  static constexpr std::size_t max_bytes = 16 * 1024 * 1024;
  void* data = nullptr;
  std::size_t bytes = 0;
  bool in_use = false;
  ~thread_workspace() {
    if (data) ::operator delete (data, std::align_val_t{64});
  }
  /// At least `n` bytes, or null when lent out already or `n` is too large.
  void* borrow(std::size_t n) {
    if (in_use || n > max_bytes) return nullptr;
    if (n > bytes) {
      void* fresh = ::operator new (n, std::align_val_t{64});
      if (data) ::operator delete (data, std::align_val_t{64});
      data = fresh;
      bytes = n;
    }
    in_use = true;
    return data;
  }
  static thread_workspace& mine() {
    thread_local thread_workspace w;
    return w;
  }
};

/// Does reducer `R` keep its scratch in host memory?
template <class R>
constexpr bool reducer_uses_host_memory() {
  if constexpr (requires { R::host_memory; })
    return R::host_memory;
  else
    return false;
}

/// One pending receive-and-reduce of an executor, type-erased: the executor's consumer
/// casts it back. One type for every executor, so that the arena's deque of them is
/// instantiated once per program instead of once per transport, reducer, element type and
/// op (it was 8% of the test and benchmark objects' functions).
struct reduce_slot {
  void* owner = nullptr; ///< the executor
  void* dst = nullptr;
  const void* local = nullptr;
  std::size_t n = 0;
  bool remote_first = false;
};

/// Runs one collective's steps. `tag` is the collective's message space (every message of
/// one call shares it and is matched in posting order, which every transport guarantees per
/// pair of ranks); see `begin_collective`.
template <transport Tr, reducer R, class T, class Op>
class executor : public sink_base<executor<Tr, R, T, Op>> {
public:
  executor(Tr& t, R& r, const Op& op, const T* input, std::size_t input_count, T* output,
           std::size_t output_count, int tag)
      : t_(t), r_(r), op_(op), input_(input), input_count_(input_count), output_(output),
        output_count_(output_count), tag_(tag) {
    // the typical round has a handful of transfers: reserve once instead of regrowing
    sends_.reserve(8);
    recvs_.reserve(8);
    locals_.reserve(8);
  }

  /// Lends the executor scratch and staging space (in elements) that outlives it, so that
  /// `reserve` allocates nothing when they are large enough (prepared collectives).
  void use_workspace(T* scratch, std::size_t scratch_count, T* staging,
                     std::size_t staging_count) noexcept {
    scratch_ptr_ = scratch;
    scratch_cap_ = scratch_count;
    staging_ptr_ = staging;
    staging_cap_ = staging_count;
  }

  ~executor() {
    if (borrowed_) thread_workspace::mine().in_use = false;
  }

  /// Makes sure of scratch (algorithm workspace) and staging (receive-and-reduce landing
  /// space, skipped on zero-copy transports), both in elements; allocates what the lent
  /// workspace does not cover (a small first request on a host reducer borrows the
  /// thread's workspace instead).
  void reserve(std::size_t scratch, std::size_t staging) {
    if constexpr (reducer_uses_host_memory<R>()) {
      if (!transport_is_zero_copy<Tr>() || scratch > 0)
        if (!borrowed_ && scratch_cap_ == 0 && staging_cap_ == 0 && (scratch || staging)) {
          const std::size_t staging_offset = (scratch * sizeof(T) + 63) / 64 * 64;
          const std::size_t staging_elems = transport_is_zero_copy<Tr>() ? 0 : staging;
          if (void* p =
                  thread_workspace::mine().borrow(staging_offset + staging_elems * sizeof(T))) {
            borrowed_ = true;
            scratch_ptr_ = static_cast<T*>(p);
            scratch_cap_ = scratch;
            staging_ptr_ = reinterpret_cast<T*>(static_cast<unsigned char*>(p) + staging_offset);
            staging_cap_ = staging_elems;
            return;
          }
        }
    }
    if (scratch > scratch_cap_) {
      scratch_ = r_.template allocate<T>(scratch);
      scratch_ptr_ = scratch_.data();
      scratch_cap_ = scratch;
    }
    if constexpr (!transport_is_zero_copy<Tr>())
      if (staging > staging_cap_) {
        staging_ = r_.template allocate<T>(staging);
        staging_ptr_ = staging_.data();
        staging_cap_ = staging;
      }
  }

  void round_begin() {
    staging_used_ = 0;
    contexts_used_ = 0; // contexts are reused, never freed: the arena does not recycle
  }

  void add(const step& s) {
    switch (s.kind) {
    case step_kind::send:
      sends_.push_back(t_.isend(s.peer, cptr(s.src), s.src.count * sizeof(T), tag_));
      break;
    case step_kind::recv:
      recvs_.push_back(t_.irecv(s.peer, ptr(s.dst), s.dst.count * sizeof(T), tag_));
      break;
    case step_kind::recv_reduce: {
      T* staging = nullptr;
      if constexpr (!transport_is_zero_copy<Tr>()) {
        if (staging_used_ + s.dst.count > staging_cap_)
          throw std::logic_error("tcoll: algorithm under-reserved its staging space");
        staging = staging_ptr_ + staging_used_;
        staging_used_ += s.dst.count;
      }
      if (contexts_used_ == contexts_.size()) contexts_.emplace_back();
      auto& c = contexts_[contexts_used_++];
      c = reduce_slot{this, ptr(s.dst), cptr(s.src), s.dst.count, s.remote_first};
      if (s.src.count != s.dst.count) throw std::logic_error("tcoll: recv_reduce size mismatch");
      recvs_.push_back(t_.irecv_consume(s.peer, s.dst.count * sizeof(T), tag_,
                                        consumer{&consume, &c, &consume_piece}, staging));
      break;
    }
    default:
      locals_.push_back(s);
    }
  }

  void round_end() {
    if (!recvs_.empty() || !sends_.empty()) {
      const deadline when = clock::now() + t_.timeout();
      for (auto& q : recvs_) t_.wait(q, when);
      for (auto& q : sends_) t_.wait(q, when);
      recvs_.clear();
      sends_.clear();
    }
    for (const step& s : locals_) run_local(s);
    locals_.clear();
    // A stream-ordered transport orders the next round's transfers after this round's
    // kernels on the same stream, so the host need not wait for the GPU here: the whole
    // collective is enqueued without a host synchronization (and can be captured in a CUDA
    // graph). Other transports read and write the data from the host next round.
    if constexpr (!transport_is_stream_ordered<Tr>()) r_.synchronize();
  }

private:
  /// Reduces the `n` elements of `remote` that land at element `first` of slot `c`.
  static void reduce_into(const reduce_slot& c, std::size_t first, const T* remote, std::size_t n) {
    auto& self = *static_cast<executor*>(c.owner);
    T* dst = static_cast<T*>(c.dst) + first;
    const T* local = static_cast<const T*>(c.local) + first;
    if (c.remote_first)
      self.r_.reduce(self.op_, dst, remote, local, n);
    else
      self.r_.reduce(self.op_, dst, local, remote, n);
  }
  static void consume(void* ctx, const void* data, std::size_t) {
    const auto& c = *static_cast<const reduce_slot*>(ctx);
    reduce_into(c, 0, static_cast<const T*>(data), c.n);
  }
  static void consume_piece(void* ctx, std::size_t offset, const void* data, std::size_t bytes) {
    const auto& c = *static_cast<const reduce_slot*>(ctx);
    if (offset % sizeof(T) || bytes % sizeof(T) || (offset + bytes) / sizeof(T) > c.n)
      throw std::logic_error("tcoll: transport delivered a piece outside the message");
    reduce_into(c, offset / sizeof(T), static_cast<const T*>(data), bytes / sizeof(T));
  }

  void run_local(const step& s) {
    switch (s.kind) {
    case step_kind::copy:
      r_.copy(ptr(s.dst), cptr(s.src), s.dst.count);
      break;
    case step_kind::reduce_local:
      if (s.src.count != s.dst.count || s.src2.count != s.dst.count)
        throw std::logic_error("tcoll: reduce_local size mismatch");
      r_.reduce(op_, ptr(s.dst), cptr(s.src), cptr(s.src2), s.dst.count);
      break;
    case step_kind::finalize:
      r_.finalize(op_, ptr(s.dst), s.dst.count, t_.size());
      break;
    default:
      throw std::logic_error("tcoll: transfer step in the local list");
    }
  }

  std::size_t capacity(buffer_id b) const {
    return b == buffer_id::input    ? input_count_
           : b == buffer_id::output ? output_count_
                                    : scratch_cap_;
  }
  const T* base(buffer_id b) const {
    return b == buffer_id::input ? input_ : b == buffer_id::output ? output_ : scratch_ptr_;
  }
  void check(const region& g) const {
    if (g.offset + g.count > capacity(g.buf))
      throw std::logic_error("tcoll: algorithm step outside its buffer (rank " +
                             std::to_string(t_.rank()) + ")");
  }
  const T* cptr(const region& g) const {
    check(g);
    return base(g.buf) + g.offset;
  }
  T* ptr(const region& g) {
    check(g);
    if (g.buf == buffer_id::input && static_cast<const void*>(input_) != output_)
      throw std::logic_error("tcoll: algorithm tried to write its input");
    return const_cast<T*>(base(g.buf)) + g.offset;
  }

  Tr& t_;
  R& r_;
  const Op& op_;
  const T* input_;
  std::size_t input_count_;
  T* output_;
  std::size_t output_count_;
  int tag_;
  typename R::template buffer<T> scratch_{};
  typename R::template buffer<T> staging_{};
  bool borrowed_ = false; ///< scratch and staging are the thread's workspace
  T* scratch_ptr_ = nullptr;
  std::size_t scratch_cap_ = 0;
  T* staging_ptr_ = nullptr;
  std::size_t staging_cap_ = 0;
  std::size_t staging_used_ = 0;
  // Small collectives are latency-bound: the bookkeeping of a call lives in an inline arena
  // (falling back to the heap only for rounds with many segments), so a call allocates
  // nothing but its scratch. Declared before the containers that draw on it.
  alignas(std::max_align_t) std::array<std::byte, 4096> arena_bytes_;
  std::pmr::monotonic_buffer_resource arena_{arena_bytes_.data(), arena_bytes_.size()};
  std::pmr::vector<typename Tr::request> sends_{&arena_}, recvs_{&arena_};
  std::pmr::vector<step> locals_{&arena_};
  std::pmr::deque<reduce_slot> contexts_{&arena_}; // stable addresses for consumers
  std::size_t contexts_used_ = 0;
};

} // namespace tcoll::detail
