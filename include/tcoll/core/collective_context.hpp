#pragma once
/// \file
/// `collective_context`: what every transport keeps for tcoll's collectives, apart from the
/// bytes it moves.
///  - **Message spaces.** Every collective draws the next sequence number of its transport
///    when it starts and uses the tag `first_tag + sequence % tag_count` for all of its
///    messages, so any number of collectives may be in flight on one transport at once.
///    The rule is MPI's: every rank starts the collectives of one transport in the same
///    order (then the k-th collective has the same tag on every rank).
///  - **Broken state.** A collective that fails (timeout, transport error, abort) marks its
///    transport broken with the exception that caused it; every later collective throws at
///    once (an error of the cause's class saying the transport is broken, with the cause's
///    text) instead of matching stale messages of the failed one.
///  - **Attachments.** Layers above (the communication engine of `schedule/`) hang their
///    per-transport state here, so it lives and dies with the transport.
/// A transport owns one and exposes it as `collective_context& collectives() noexcept`;
/// decorators over the same ranks (`counting`, `shaped`) forward their inner transport's.
#include <atomic>
#include <concepts>
#include <cstdint>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <string>

#include "error.hpp"
#include "tags.hpp"

namespace tcoll {

/// Per-transport state of tcoll's collectives (see the file comment). Thread-safe.
class collective_context {
public:
  /// Something a higher layer keeps per transport (the communication engine). Destroyed
  /// with the context, before the transport's own resources.
  struct attachment {
    virtual ~attachment() = default;
    /// Whether the calling thread is the attachment's own (the engine's thread): collectives
    /// that must run one at a time in start order on a rank (the in-segment ones) run there.
    virtual bool runs_on_calling_thread() const noexcept { return false; }
  };

  /// Tags of collectives are `first_tag + sequence % tag_count`. The defaults leave tags
  /// below 1024 to point-to-point users and fit below the 65536 tag shift of `subgroup`
  /// (the tag map: `core/tags.hpp`).
  static constexpr int default_first_tag = tags::collectives_first;
  static constexpr int default_tag_count = tags::collectives_count;

  /// `first_sequence` offsets the sequence (MPI transports start each communicator at a
  /// different point, so stale messages of a freed communicator whose context id MPI
  /// reuses are unlikely to match a new collective).
  explicit collective_context(int first_tag = default_first_tag, int tag_count = default_tag_count,
                              std::uint64_t first_sequence = 0)
      : first_tag_(first_tag), tag_count_(tag_count), first_sequence_(first_sequence),
        sequence_(first_sequence) {
    if (first_tag < 0 || tag_count < 1 ||
        first_tag > std::numeric_limits<int>::max() - (tag_count - 1))
      throw invalid_argument("collective_context: tags [" + std::to_string(first_tag) + ", " +
                             std::to_string(first_tag) + " + " + std::to_string(tag_count) +
                             ") do not fit in an int");
  }
  collective_context(const collective_context&) = delete;
  collective_context& operator=(const collective_context&) = delete;
  ~collective_context() { detach(); }

  /// Starts a collective on rank `rank`: throws if the transport is broken,
  /// otherwise returns the tag of the collective's message space.
  int begin(int rank) {
    throw_if_broken(rank);
    const std::uint64_t s = sequence_.fetch_add(1, std::memory_order_relaxed);
    return first_tag_ + static_cast<int>(s % static_cast<std::uint64_t>(tag_count_));
  }

  /// Number of collectives started so far.
  std::uint64_t started() const noexcept {
    return sequence_.load(std::memory_order_relaxed) - first_sequence_;
  }
  int first_tag() const noexcept { return first_tag_; }
  /// The tag the next collective started here will use.
  int next_tag() const noexcept {
    return first_tag_ + static_cast<int>(sequence_.load(std::memory_order_relaxed) %
                                         static_cast<std::uint64_t>(tag_count_));
  }
  int tag_count() const noexcept { return tag_count_; }

  /// Marks the transport broken by `cause` (the first cause wins).
  void fail(std::exception_ptr cause) noexcept {
    std::lock_guard lock(mutex_);
    if (!cause_) cause_ = cause;
    broken_.store(true, std::memory_order_release);
  }
  bool broken() const noexcept { return broken_.load(std::memory_order_acquire); }
  /// The exception that broke the transport (null while it is healthy).
  std::exception_ptr cause() const {
    std::lock_guard lock(mutex_);
    return cause_;
  }
  /// Throws if the transport is broken: an error of the cause's class (a tcoll error keeps
  /// its class, rank and peer; anything else becomes an `aborted_error`) whose message says
  /// the transport is broken and quotes the cause, so a caller can tell a later call that
  /// failed at once from the failure itself.
  void throw_if_broken(int rank) const {
    if (!broken()) return;
    static constexpr const char* broken_by = "the transport is broken by an earlier failure";
    const std::exception_ptr c = cause();
    if (!c) throw aborted_error(broken_by, rank);
    try {
      std::rethrow_exception(c);
    } catch (const error& e) {
      detail::throw_like(e, std::string(broken_by) + " (" + e.message() + ")",
                         e.rank() >= 0 ? e.rank() : rank, e.peer());
    } catch (const std::exception& e) {
      throw aborted_error(std::string(broken_by) + " (" + e.what() + ")", rank);
    } catch (...) {
      throw aborted_error(broken_by, rank);
    }
  }

  /// The attachment of type `A`, created by `make()` on first use.
  template <class A, class Make>
  A& attach(Make&& make) {
    std::lock_guard lock(mutex_);
    if (!attached_) attached_ = make();
    return static_cast<A&>(*attached_);
  }
  /// The attachment, or null if none was made.
  attachment* attached() const noexcept {
    std::lock_guard lock(mutex_);
    return attached_.get();
  }
  /// Destroys the attachment (the transport calls it first thing in its destructor, so an
  /// engine thread stops before the resources it uses go away).
  void detach() noexcept {
    std::unique_ptr<attachment> gone;
    {
      std::lock_guard lock(mutex_);
      gone = std::move(attached_);
    }
  }

private:
  int first_tag_;
  int tag_count_;
  std::uint64_t first_sequence_;
  std::atomic<std::uint64_t> sequence_;
  std::atomic<bool> broken_{false};
  mutable std::mutex mutex_;
  std::exception_ptr cause_;
  std::unique_ptr<attachment> attached_;
};

/// Does transport `T` keep a `collective_context` (message spaces, broken state)?
template <class T>
concept has_collective_context = requires(T& t) {
  { t.collectives() } -> std::same_as<collective_context&>;
};

} // namespace tcoll
