#pragma once
/// \file
/// `counting<Transport>`: a decorator that forwards every call to another transport and
/// counts, per rank, the messages and bytes it posts. Tests use it to check an algorithm's
/// traffic against its closed-form cost; benchmarks can use it to report bytes on the wire.
/// Transfers are counted when they are posted (a zero-byte transfer counts as a message),
/// so the numbers are what the algorithm asked for, independent of how the transport
/// progresses them.
#include <chrono>
#include <cstddef>
#include <string_view>

#include "../core/collective_context.hpp"
#include "../core/concepts.hpp"

namespace tcoll {

/// Per-rank traffic recorded by `counting`.
struct traffic {
  std::size_t messages_sent = 0;
  std::size_t bytes_sent = 0;
  std::size_t messages_received = 0;
  std::size_t bytes_received = 0;
  /// Calls forwarded to the inner transport's vendor allreduce (its traffic is unknown).
  std::size_t native_allreduce_calls = 0;
  friend constexpr bool operator==(const traffic&, const traffic&) = default;
};

/// Counts the traffic of the wrapped transport `Inner` (held by reference) and otherwise
/// behaves exactly like it: same rank, size, timeout, requests, zero-copy and stream-ordered
/// properties, and
/// `native_allreduce` / `barrier` where `Inner` has them.
template <transport Inner>
class counting {
public:
  using request = typename Inner::request;
  using inner_type = Inner;
  static constexpr bool zero_copy = transport_is_zero_copy<Inner>();
  static constexpr bool stream_ordered = transport_is_stream_ordered<Inner>();
  static constexpr bool shared_memory = transport_is_shared_memory<Inner>();
  static constexpr std::string_view name = "counting";

  explicit counting(Inner& inner) noexcept : inner_(&inner) {}

  int rank() const { return inner_->rank(); }
  int size() const { return inner_->size(); }
  std::chrono::milliseconds timeout() const { return inner_->timeout(); }

  request isend(int peer, const void* data, std::size_t bytes, int tag) {
    request r = inner_->isend(peer, data, bytes, tag);
    ++counts_.messages_sent;
    counts_.bytes_sent += bytes;
    return r;
  }
  /// `isend` of a message whose receiver posts `irecv` for it, forwarded where `Inner` takes
  /// that hint (`takes_irecv_hint`); counted as a send.
  request isend_for_irecv(int peer, const void* data, std::size_t bytes,
                          int tag) requires takes_irecv_hint<Inner> {
    request r = inner_->isend_for_irecv(peer, data, bytes, tag);
    ++counts_.messages_sent;
    counts_.bytes_sent += bytes;
    return r;
  }
  request irecv(int peer, void* dst, std::size_t bytes, int tag) {
    request r = inner_->irecv(peer, dst, bytes, tag);
    ++counts_.messages_received;
    counts_.bytes_received += bytes;
    return r;
  }
  request irecv_consume(int peer, std::size_t bytes, int tag, consumer use, void* staging) {
    request r = inner_->irecv_consume(peer, bytes, tag, use, staging);
    ++counts_.messages_received;
    counts_.bytes_received += bytes;
    return r;
  }
  bool test(request& r) { return inner_->test(r); }
  void wait(request& r, deadline when) { inner_->wait(r, when); }
  void abort() noexcept { inner_->abort(); }

  /// The inner transport's collective context (same ranks, same message spaces).
  collective_context& collectives() noexcept requires has_collective_context<Inner> {
    return inner_->collectives();
  }
  /// Forwards the inner transport's check that it may be driven from the engine thread.
  void check_concurrent_use() const requires requires(const Inner& i) { i.check_concurrent_use(); }
  { inner_->check_concurrent_use(); }

  /// Forwarded only when `Inner` offers a vendor allreduce (keeps `passthrough` usable).
  template <class T, class Op>
  requires requires(Inner& i, const T* s, T* d, std::size_t n, const Op& op) {
    i.native_allreduce(s, d, n, op);
  }
  void native_allreduce(const T* sendbuf, T* recvbuf, std::size_t count, const Op& op) {
    ++counts_.native_allreduce_calls;
    inner_->native_allreduce(sendbuf, recvbuf, count, op);
  }

  /// Forwarded only when `Inner` has a barrier.
  void barrier() requires requires(Inner& i) { i.barrier(); }
  { inner_->barrier(); }

  /// Traffic since construction or the last `reset()`.
  const traffic& counts() const noexcept { return counts_; }
  void reset() noexcept { counts_ = {}; }
  Inner& inner() noexcept { return *inner_; }

private:
  Inner* inner_;
  traffic counts_{};
};

} // namespace tcoll
