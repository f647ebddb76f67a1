#pragma once
/// \file
/// `shm_segment_area`: the collective area of `shm_transport`'s segment, where the
/// in-segment collectives (algorithm/in_segment.hpp) run without messages: every rank
/// copies its data into its own part of the area once and the others read it there.
///
/// Layout (segment.hpp): every rank owns a `done` flag and two areas; an area holds
/// `area_lines` flagged lines (48 data bytes, the call's signature and an ordinal in one cache
/// line: the flag-per-line protocol), a `ready` and a `reduced` flag on lines of their own, and a
/// bulk buffer of `area_bulk_bytes`.
///
/// Protocol:
///  - Every in-segment collective of the transport takes the next **ordinal** n (1, 2, ...)
///    and uses area n % 2 of every rank. Ordinals agree on every rank because every rank
///    runs the same in-segment collectives in the same order, on one thread at a time: a
///    transport with a communication engine runs them on the engine thread only (the
///    engine runs its queue in start order), and a call from another thread falls back to
///    point-to-point messages (`usable_here`), on every rank alike since the engine exists
///    on every rank from the same non-blocking call on.
///  - Data is published with its ordinal: flagged lines carry it in the same cache line
///    (a reader polls the line and has the data when the ordinal matches), the bulk buffer
///    through `ready` / `reduced`. Nothing is acknowledged per message.
///  - Reuse: a rank writes area n % 2 only when every peer has finished collective n - 2.
///    A rank finishes n - 1 before it publishes anything of n, so any ordinal m seen from a
///    peer says it finished m - 1 (`seen`); only when that is not enough (a peer that
///    published nothing since, a broadcast's readers) does the writer read the peer's
///    `done` flag, which every rank sets when it finishes a collective.
///  - Every wait has the transport's timeout and checks its team-wide abort flag.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "../../core/collective_context.hpp"
#include "../../core/concepts.hpp"
#include "../../core/error.hpp"
#include "options.hpp"
#include "segment.hpp"
#include "single_copy.hpp"

namespace tcoll {

/// The collective area of a `shm_transport` (see the file comment). Made by the transport
/// (`shm_transport::segment_area()`); used by the in-segment algorithms.
class shm_segment_area {
public:
  shm_segment_area(unsigned char* base, const detail::shm::layout& layout,
                   const shm_options& options, int rank, int size, bool spin,
                   collective_context& context)
      : base_(base), layout_(&layout), options_(&options), rank_(rank), size_(size), spin_(spin),
        context_(&context), seen_(static_cast<std::size_t>(size), 0) {
    new (base_ + layout.area_done_offset(rank)) detail::shm::area_flag();
    for (std::size_t a = 0; a < 2; ++a) {
      for (std::size_t l = 0; l < layout.area_lines; ++l)
        new (lines(rank, a) + l) detail::shm::flagged_line();
      new (&flag(rank, a, ready)) detail::shm::area_flag();
      new (&flag(rank, a, reduced)) detail::shm::area_flag();
    }
  }

  /// Data bytes of one flagged line.
  static constexpr std::size_t line_bytes = detail::shm::line_payload;

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  /// Bytes the flagged lines of one rank's area carry.
  std::size_t line_capacity() const noexcept {
    return layout_->area_lines * detail::shm::line_payload;
  }
  /// Bytes of one rank's bulk buffer in an area.
  std::size_t bulk_capacity() const noexcept { return layout_->area_bulk_bytes; }
  /// Whether every rank of the node may have a CPU of its own (no more ranks than the node
  /// has CPUs): waits spin before they yield. The same on every rank of the node.
  bool ranks_have_cpus() const noexcept { return spin_; }
  /// Whether a collective may read a peer's memory straight from its process
  /// (`read_peer`): the transport's single copy, the same on every rank.
  bool single_copy() const noexcept { return !pids_.empty(); }
  /// `bytes` at `address` in rank `q`'s process into `dst` (cross-memory attach; only where
  /// `single_copy()`); `transport_error` naming the peer when the kernel refuses.
  void read_peer(int q, void* dst, std::uint64_t address, std::size_t bytes) {
    detail::shm::read_process(pids_[static_cast<std::size_t>(q)], dst, address, bytes, rank_, q);
    ++peer_reads_;
  }
  /// `read_peer` calls so far (the tests check which way a collective went).
  std::uint64_t peer_reads() const noexcept { return peer_reads_; }
  /// Lets `read_peer` read the ranks' processes, `pids` by rank (the transport, once every
  /// rank agreed that it may).
  void allow_single_copy(std::vector<pid_t> pids) { pids_ = std::move(pids); }

  /// Ordinals this rank has taken: one per in-segment collective, one per piece of a call
  /// larger than the bulk buffer or, for the broadcast, than its piece (the tests check
  /// that the area was used).
  std::uint64_t collectives() const noexcept { return ordinal_; }

  /// Whether an in-segment collective may run on the calling thread: the transport has no
  /// communication engine, or this is its engine's thread. The same answer on every rank
  /// for the same call (see the file comment); where false, callers take point-to-point
  /// messages instead.
  bool usable_here() const {
    if (callers_order_.load(std::memory_order_relaxed)) return false;
    const collective_context::attachment* engine = context_->attached();
    return !engine || engine->runs_on_calling_thread();
  }
  /// From now on only calls that order themselves (`in_segment::caller_orders`) use the
  /// area, and `usable_here` is false everywhere else: an integration that runs its
  /// in-segment collectives in its callers' threads by rules every rank shares (the PyTorch
  /// backend) calls it on every rank, so that no engine thread enters the area beside them.
  void order_by_callers() noexcept { callers_order_.store(true, std::memory_order_relaxed); }

  /// The two flags of an area besides its lines.
  enum flag_kind : std::size_t { ready = 0, reduced = 1 };

  /// One in-segment collective on this rank, from `begin` to `end`, possibly of several
  /// ordinals (`next`). Refuses a second thread of this rank while one is inside.
  class session {
  public:
    explicit session(shm_segment_area& area) : area_(&area) {
      const std::thread::id none{};
      std::thread::id expected = none;
      if (!area.owner_.compare_exchange_strong(expected, std::this_thread::get_id()))
        throw invalid_argument("in-segment collective: another thread of this rank is inside "
                               "one on the same shm_transport; collectives of one transport "
                               "run on one thread at a time, or through its engine",
                               area.rank_);
    }
    session(const session&) = delete;
    session& operator=(const session&) = delete;
    ~session() {
      // A failed collective leaves its transport broken: it is not marked finished.
      if (n_ && std::uncaught_exceptions() == exceptions_) area_->finish(n_);
      area_->owner_.store(std::thread::id{});
    }
    /// Takes the next ordinal; where this rank will write its area for it (`writes`), first
    /// waits until every peer has finished the collective that used that area before.
    std::uint64_t next(bool writes = true) {
      if (n_) area_->finish(n_);
      n_ = area_->claim(writes);
      return n_;
    }

  private:
    shm_segment_area* area_;
    std::uint64_t n_ = 0;
    int exceptions_ = std::uncaught_exceptions();
  };

  /// Rank `r`'s flagged lines of the area of ordinal `n`.
  detail::shm::flagged_line* lines(int r, std::uint64_t n) const {
    return std::launder(
        reinterpret_cast<detail::shm::flagged_line*>(base_ + layout_->area_offset(r, n & 1)));
  }
  /// Rank `r`'s bulk buffer in the area of ordinal `n`.
  unsigned char* bulk(int r, std::uint64_t n) const {
    return base_ + layout_->area_offset(r, n & 1) +
           layout_->area_lines * sizeof(detail::shm::flagged_line) +
           2 * sizeof(detail::shm::area_flag);
  }

  /// The signature of a call: its bytes, element size and kind (allreduce, broadcast...),
  /// published with every line and flag, so ranks that disagree fail at once.
  static constexpr std::uint64_t signature(std::size_t bytes, std::size_t element_bytes,
                                           unsigned kind) noexcept {
    return (static_cast<std::uint64_t>(bytes) << 16) | ((element_bytes & 0xff) << 8) |
           (kind & 0xff);
  }

  /// Copies `bytes` (at most `line_capacity()`) into this rank's lines for ordinal `n`,
  /// each line published with the ordinal and the call's signature `sig`.
  void publish_lines(std::uint64_t n, std::uint64_t sig, const void* src, std::size_t bytes) {
    detail::shm::flagged_line* l = lines(rank_, n);
    const auto* s = static_cast<const unsigned char*>(src);
    for (std::size_t off = 0; off < bytes; off += line_bytes, ++l) {
      std::memcpy(l->data, s + off, std::min(line_bytes, bytes - off));
      l->signature = sig;
      l->ordinal.store(n, std::memory_order_release);
    }
  }
  /// Copies rank `q`'s `bytes` of ordinal `n` out of its lines, waiting for each line.
  void read_lines(int q, std::uint64_t n, std::uint64_t sig, void* dst, std::size_t bytes) {
    auto* d = static_cast<unsigned char*>(dst);
    for (std::size_t off = 0, j = 0; off < bytes; off += line_bytes, ++j)
      std::memcpy(d + off, line(q, n, sig, j), std::min(line_bytes, bytes - off));
  }
  /// Rank `q`'s line `j` of ordinal `n` (its `line_bytes` of data), once it is there.
  const unsigned char* line(int q, std::uint64_t n, std::uint64_t sig, std::size_t j) {
    const detail::shm::flagged_line* l = lines(q, n) + j;
    if (l->ordinal.load(std::memory_order_acquire) != n)
      wait(q, n, sig, "a flagged line",
           [&] { return l->ordinal.load(std::memory_order_acquire) == n; });
    if (l->signature != sig) mismatch(q, sig, l->signature);
    seen(q, n);
    return l->data;
  }
  /// Sets this rank's flag `k` of ordinal `n` (after its bulk data for `k` is written).
  void publish(flag_kind k, std::uint64_t n, std::uint64_t sig) {
    auto& f = flag(rank_, n, k);
    f.signature = sig;
    f.ordinal.store(n, std::memory_order_release);
  }
  /// Waits until rank `q` has set its flag `k` for ordinal `n`.
  void wait_for(int q, flag_kind k, std::uint64_t n, std::uint64_t sig) {
    const auto& f = flag(q, n, k);
    if (f.ordinal.load(std::memory_order_acquire) != n)
      wait(q, n, sig, k == ready ? "its ready flag" : "its reduced flag",
           [&] { return f.ordinal.load(std::memory_order_acquire) == n; });
    if (f.signature != sig) mismatch(q, sig, f.signature);
    seen(q, n);
  }

private:
  detail::shm::area_flag& flag(int r, std::uint64_t n, flag_kind k) const {
    return *std::launder(reinterpret_cast<detail::shm::area_flag*>(
        base_ + layout_->area_offset(r, n & 1) +
        layout_->area_lines * sizeof(detail::shm::flagged_line) +
        k * sizeof(detail::shm::area_flag)));
  }
  detail::shm::area_flag& done(int r) const {
    return *std::launder(
        reinterpret_cast<detail::shm::area_flag*>(base_ + layout_->area_done_offset(r)));
  }
  const detail::shm::control& control() const {
    return *std::launder(reinterpret_cast<const detail::shm::control*>(base_));
  }

  /// A peer that published ordinal m has finished m - 1.
  void seen(int q, std::uint64_t m) noexcept {
    auto& s = seen_[static_cast<std::size_t>(q)];
    s = std::max(s, m - 1);
  }
  std::uint64_t claim(bool writes) {
    const std::uint64_t n = ordinal_ + 1;
    if (writes && n > 2)
      for (int q = 0; q < size_; ++q) {
        if (q == rank_ || seen_[static_cast<std::size_t>(q)] >= n - 2) continue;
        const auto& d = done(q).ordinal;
        wait(q, n, 0, "to finish the collective that used the area before",
             [&] { return d.load(std::memory_order_acquire) >= n - 2; });
        seen_[static_cast<std::size_t>(q)] =
            std::max(seen_[static_cast<std::size_t>(q)], d.load(std::memory_order_acquire));
      }
    ordinal_ = n;
    return n;
  }
  void finish(std::uint64_t n) noexcept { done(rank_).ordinal.store(n, std::memory_order_release); }

  [[noreturn]] void mismatch(int q, std::uint64_t mine, std::uint64_t theirs) const {
    auto describe = [](std::uint64_t sig) {
      return std::to_string(sig >> 16) + " bytes of " + std::to_string((sig >> 8) & 0xff) +
             "-byte elements (call kind " + std::to_string(sig & 0xff) + ")";
    };
    throw transport_error("in-segment collective: rank " + std::to_string(q) + " passed " +
                              describe(theirs) + ", this rank " + describe(mine) +
                              " (every rank must pass the same count and type)",
                          rank_, q);
  }
  /// While waiting for rank `q` at ordinal `n`: whether it published `n` another way (its
  /// first line or its ready flag) with another signature, a call that disagrees.
  void check_peer(int q, std::uint64_t n, std::uint64_t sig) const {
    const detail::shm::flagged_line& l = *lines(q, n);
    if (l.ordinal.load(std::memory_order_acquire) == n && l.signature != sig)
      mismatch(q, sig, l.signature);
    const auto& f = flag(q, n, ready);
    if (f.ordinal.load(std::memory_order_acquire) == n && f.signature != sig)
      mismatch(q, sig, f.signature);
  }

  /// Polls `ready` until true: spins, then yields (as the transport's waits), checking the
  /// abort flag and (`sig` non-zero) a peer's disagreeing call; throws `timeout_error`
  /// naming the peer after the timeout.
  template <class Ready>
  void wait(int peer, std::uint64_t n, std::uint64_t sig, const char* what, Ready&& is_ready) {
    const auto when = clock::now() + options_->timeout;
    clock::time_point yielding_since{};
    for (int polls = 1; !is_ready(); ++polls) {
      if (sig && (polls & 1023) == 0) check_peer(peer, n, sig);
      if (control().aborted.load(std::memory_order_acquire))
        throw aborted_error(
            "in-segment collective aborted because rank " +
                std::to_string(control().aborted_by.load(std::memory_order_relaxed)) +
                " of the shared-memory team failed",
            rank_, peer);
      if ((polls & 63) == 0 && clock::now() >= when)
        throw timeout_error("in-segment collective " + std::to_string(n) + " timed out after " +
                                std::to_string(options_->timeout.count()) +
                                " ms waiting for rank " + std::to_string(peer) + " (" + what +
                                "; its last finished in-segment collective is " +
                                std::to_string(done(peer).ordinal.load()) + ")",
                            rank_, peer);
      if (spin_ && polls <= options_->spins_before_yield) continue;
      if (options_->sleep_after.count() > 0) {
        const auto now = clock::now();
        if (yielding_since == clock::time_point{}) yielding_since = now;
        if (now - yielding_since >= options_->sleep_after) {
          std::this_thread::sleep_for(options_->idle_sleep);
          continue;
        }
      }
      std::this_thread::yield();
    }
  }

  unsigned char* base_;
  const detail::shm::layout* layout_;
  const shm_options* options_;
  int rank_, size_;
  bool spin_;
  collective_context* context_;
  std::uint64_t ordinal_ = 0;       ///< the last ordinal this rank took
  std::vector<std::uint64_t> seen_; ///< per peer: an ordinal it is known to have finished
  std::atomic<std::thread::id> owner_{};
  std::atomic<bool> callers_order_{false};
  std::vector<pid_t> pids_; ///< by rank, where single copy is allowed (`allow_single_copy`)
  std::uint64_t peer_reads_ = 0;
};

} // namespace tcoll
