#pragma once
/// \file
/// The two policy concepts every algorithm is written against:
///  - `transport`: moves byte ranges between ranks (post send/recv, wait with a deadline,
///    abort); knows nothing about algorithms.
///  - `reducer`: combines `dst = op(a, b)` over n elements where the data lives (host loop,
///    CUDA kernel, Thrust), copies, and allocates scratch in the same memory space.
/// `check_transport<T>()` / `check_reducer<R>()` static_assert one requirement at a time so
/// a policy that misses a member gets an error naming that member.
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "ops.hpp"
#include "types.hpp"

namespace tcoll {

/// Clock used for every deadline in tcoll.
using clock = std::chrono::steady_clock;
/// Absolute point in time after which a blocking wait throws `timeout_error`.
using deadline = clock::time_point;

/// Callback a transport invokes with the bytes of a completed receive. A zero-copy transport
/// passes the sender's own memory (valid only during the call); a staging transport passes
/// the staging buffer it received into. Function pointer + context keeps it allocation-free.
struct consumer {
  void (*fn)(void* context, const void* data, std::size_t bytes) = nullptr;
  void* context = nullptr;
  /// Optional: takes the message piece by piece as it arrives (bytes [offset, offset +
  /// bytes), in order, the pieces covering the message exactly once), so a transport that
  /// receives in fragments can consume each while it is still in cache instead of staging
  /// the whole message first. When set, a transport calls either `fn` once or `piece` for
  /// every piece. Offsets are multiples of 64 bytes, so every element type stays aligned.
  void (*piece)(void* context, std::size_t offset, const void* data, std::size_t bytes) = nullptr;
  void operator()(const void* data, std::size_t bytes) const { fn(context, data, bytes); }
  void operator()(std::size_t offset, const void* data, std::size_t bytes) const {
    piece(context, offset, data, bytes);
  }
};

// clang-format off
/// A transport moves byte ranges between the ranks of one group.
///  - `isend`/`irecv` post non-blocking transfers; the buffers must stay valid and unmodified
///    (send) or untouched (recv) until the request completes.
///  - `irecv_consume` delivers the incoming bytes to a `consumer` instead of a buffer; the
///    transport may use `staging` (at least `bytes` large, in the data's memory space) or
///    skip it and hand over the sender's memory directly (zero copy).
///  - `wait` blocks until completion or throws `timeout_error` at the deadline; `test` polls.
///  - `abort` makes every pending and future wait of every rank throw instead of hanging.
/// Messages between one pair of ranks with the same tag are matched in posting order.
template <class T>
concept transport = requires(T& t, const T& ct, int peer, int tag, const void* src, void* dst,
                             std::size_t bytes, typename T::request& req, deadline when,
                             consumer use) {
  typename T::request;
  { ct.rank() } -> std::convertible_to<int>;
  { ct.size() } -> std::convertible_to<int>;
  { ct.timeout() } -> std::convertible_to<std::chrono::milliseconds>;
  { t.isend(peer, src, bytes, tag) } -> std::same_as<typename T::request>;
  { t.irecv(peer, dst, bytes, tag) } -> std::same_as<typename T::request>;
  { t.irecv_consume(peer, bytes, tag, use, dst) } -> std::same_as<typename T::request>;
  { t.test(req) } -> std::same_as<bool>;
  { t.wait(req, when) };
  { t.abort() } noexcept;
};

/// A reducer combines and copies elements where they live and allocates scratch there.
template <class R>
concept reducer = requires(R& r, float* dst, const float* a, const float* b, std::size_t n) {
  typename R::template buffer<float>;
  { r.reduce(sum_op{}, dst, a, b, n) };
  { r.copy(dst, a, n) };
  { r.finalize(avg_op{}, dst, n, 2) };
  { r.template allocate<float>(n).data() } -> std::convertible_to<float*>;
  { r.synchronize() };
};
// clang-format on

/// Capability: reducer `R` keeps its buffers in device memory and copies host data in and
/// out (`copy_from_host(dst, host_src, n)`, `copy_to_host(host_dst, src, n)`, ordered with
/// its other work; `synchronize()` waits for them). Small host-made records that must
/// travel over a device-only transport (NCCL) go through these.
template <class R>
concept host_device_copies = requires(const R& r, std::uint64_t* d, const std::uint64_t* s,
                                      std::size_t n) {
  r.copy_from_host(d, s, n);
  r.copy_to_host(d, s, n);
};

/// Capability trait: does reducer `R` implement `Op` on element type `T`? A reducer states
/// it with `template <class Op, class T> static constexpr bool supports`; absent, all are.
template <class R, class Op, class T>
constexpr bool reducer_supports() {
  if constexpr (requires { R::template supports<Op, T>; })
    return R::template supports<Op, T>;
  else
    return true;
}

/// Does transport `T` hand the sender's memory to consumers (no staging buffer needed)?
template <class T>
constexpr bool transport_is_zero_copy() {
  if constexpr (requires { T::zero_copy; })
    return T::zero_copy;
  else
    return false;
}

/// Does transport `T` move messages between processes through shared memory (`shm_transport`),
/// where copies cost what the memory bus gives and `automatic` has a choice of its own
/// (`automatic::shared_memory`)?
template <class T>
constexpr bool transport_is_shared_memory() {
  if constexpr (requires { T::shared_memory; })
    return T::shared_memory;
  else
    return false;
}

/// Is transport `T` stream-ordered: does a completed request mean only that its transfer
/// (and a receive's consumer) is *enqueued* on the transport's device stream, ordered before
/// anything enqueued on that stream later? Such a transport needs no host synchronization
/// between rounds: the executor enqueues every round and returns, and the caller orders its
/// own work on the same stream (`device_team`, `nccl`). A host reading the results waits on
/// the stream itself.
template <class T>
constexpr bool transport_is_stream_ordered() {
  if constexpr (requires { T::stream_ordered; })
    return T::stream_ordered;
  else
    return false;
}

/// Capability: transport `T` takes the hint that a message's receiver copies it out whole
/// (posts `irecv`, not `irecv_consume`): `isend_for_irecv(peer, data, bytes, tag)`, otherwise
/// `isend`. It may then move the message another way (`shm_transport`: the receiver reads
/// the sender's buffer itself from a smaller size on, where a receiver that reduces is better
/// served by the slots). Only the speed depends on the hint: either kind of receive takes a
/// message sent either way.
template <class T>
concept takes_irecv_hint = requires(T& t, const void* p) {
  { t.isend_for_irecv(0, p, std::size_t{}, 0) } -> std::same_as<typename T::request>;
};

/// Sends a message whose receiver posts `irecv` for it: `t.isend_for_irecv` where transport
/// `T` takes the hint (`takes_irecv_hint`), `t.isend` elsewhere. The algorithms whose
/// receivers only copy (all-to-all, gather, scatter) send through this.
template <class T>
typename T::request isend_for_irecv(T& t, int peer, const void* data, std::size_t bytes, int tag) {
  if constexpr (takes_irecv_hint<T>)
    return t.isend_for_irecv(peer, data, bytes, tag);
  else
    return t.isend(peer, data, bytes, tag);
}

/// static_asserts each transport requirement separately, naming the missing member.
template <class T>
constexpr bool check_transport() {
  static_assert(
      requires { typename T::request; }, "transport needs a nested type `request`");
  static_assert(
      requires(const T& t) {
        { t.rank() } -> std::convertible_to<int>;
      },
      "transport needs `int rank() const`");
  static_assert(
      requires(const T& t) {
        { t.size() } -> std::convertible_to<int>;
      },
      "transport needs `int size() const`");
  static_assert(
      requires(const T& t) {
        { t.timeout() } -> std::convertible_to<std::chrono::milliseconds>;
      },
      "transport needs `std::chrono::milliseconds timeout() const`");
  static_assert(
      requires(T & t, const void* p) { t.isend(0, p, std::size_t{}, 0); },
      "transport needs `request isend(int peer, const void*, size_t bytes, int tag)`");
  static_assert(
      requires(T & t, void* p) { t.irecv(0, p, std::size_t{}, 0); },
      "transport needs `request irecv(int peer, void*, size_t bytes, int tag)`");
  static_assert(
      requires(T & t, void* p, consumer c) { t.irecv_consume(0, std::size_t{}, 0, c, p); },
      "transport needs `request irecv_consume(int peer, size_t bytes, int tag, consumer, void* "
      "staging)`");
  static_assert(
      requires(T & t, typename T::request & r) {
        { t.test(r) } -> std::same_as<bool>;
      },
      "transport needs `bool test(request&)`");
  static_assert(
      requires(T & t, typename T::request & r, deadline d) { t.wait(r, d); },
      "transport needs `void wait(request&, deadline)`");
  static_assert(
      requires(T & t) {
        { t.abort() }
        noexcept;
      },
      "transport needs `void abort() noexcept`");
  return transport<T>;
}

/// static_asserts each reducer requirement separately, naming the missing member.
template <class R>
constexpr bool check_reducer() {
  static_assert(
      requires { typename R::template buffer<float>; },
      "reducer needs a member alias template `buffer<T>` (owning scratch type)");
  static_assert(
      requires(R & r, float* d, const float* s) { r.reduce(sum_op{}, d, s, s, std::size_t{}); },
      "reducer needs `reduce(Op, T* dst, const T* a, const T* b, size_t n)`");
  static_assert(
      requires(R & r, float* d, const float* s) { r.copy(d, s, std::size_t{}); },
      "reducer needs `copy(T* dst, const T* src, size_t n)`");
  static_assert(
      requires(R & r, float* d) { r.finalize(avg_op{}, d, std::size_t{}, 2); },
      "reducer needs `finalize(Op, T* dst, size_t n, int nranks)`");
  static_assert(
      requires(R & r) { r.template allocate<float>(std::size_t{}).data(); },
      "reducer needs `allocate<T>(size_t n)` returning an owner with `data()`");
  static_assert(
      requires(R & r) { r.synchronize(); }, "reducer needs `synchronize()`");
  return reducer<R>;
}

} // namespace tcoll
