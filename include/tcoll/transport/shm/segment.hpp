#pragma once
/// \file
/// The node's shared segment of `shm_transport`: its layout (the control lines, each rank's
/// identity line and inbox of lanes and slots, every header on a cache line of its own),
/// the POSIX shared-memory files behind it and their mapping by every rank of the team.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../../core/error.hpp"
#include "../bootstrap.hpp"
#include "options.hpp"

namespace tcoll {

namespace detail::shm {

inline constexpr std::size_t line = 64;

inline std::size_t round_up(std::size_t n, std::size_t to) {
  return (n + to - 1) / to * to;
}

/// The first lines of the segment: the team-wide abort flag, then the barrier's counter
/// and generation on a line of their own (everybody writes them).
struct alignas(line) control {
  std::atomic<std::uint32_t> aborted{0};
  std::atomic<std::int32_t> aborted_by{-1};
  alignas(line) std::atomic<std::uint32_t> arrived{0};
  std::atomic<std::uint32_t> generation{0};
};
static_assert(sizeof(control) <= 4096, "the control block fits in the segment's first page");

/// A lane's header: which message occupies it (0: free; else the sender's message number
/// for this pair, counting from 1), its tag and size. Written by the sender before `message`
/// is published; `message` is reset to 0 by the receiver once it drained the lane.
/// How a lane carries its message.
enum class lane_mode : std::uint32_t {
  slots,       ///< in fragments through the lane's slots
  single_copy, ///< the receiver reads `bytes` at `address` in the sender's process, then
               ///< frees the lane, which completes the send
  inline_data, ///< in the header's own cache line (`inline_bytes` or fewer)
  one_slot,    ///< whole in the payload of the lane's first slot, published with the header
               ///< (the slot's flag is not used)
  registered,  ///< the receiver reads `bytes` at offset `address` of the sender's registered
               ///< region `region` (mapped by every rank), then frees the lane
};
inline constexpr std::size_t inline_bytes = 32;

struct alignas(line) lane_header {
  std::atomic<std::uint64_t> message{0};
  std::uint64_t bytes = 0;
  std::int32_t tag = 0;
  lane_mode mode = lane_mode::slots;
  std::uint64_t address = 0;
  union {
    /// A tiny message travels here, so its receiver touches one line written by the sender
    /// instead of three (header, slot flag, payload).
    alignas(inline_bytes) unsigned char data[inline_bytes];
    /// `lane_mode::registered`: which of the sender's registered regions.
    std::uint64_t region;
  };
};
static_assert(sizeof(lane_header) == line, "a lane header is one cache line");

/// A rank's identity line, for cross-memory attach: its process and the address of a
/// probe word every other rank tries to read at construction.
struct alignas(line) identity {
  std::int64_t pid = 0;
  std::uint64_t probe_address = 0;
};

/// A slot's flag: 0 empty, k + 1 when it holds fragment k of the lane's message.
struct alignas(line) slot_header {
  std::atomic<std::uint64_t> fragment{0};
  std::uint64_t bytes = 0;
};

/// The collective area (transport/shm/area.hpp). One line of the flag-per-line protocol:
/// `line_payload` bytes of data, the signature of the call (its size and element size, so
/// ranks that disagree fail at once) and the ordinal of the in-segment collective that
/// wrote them, in one cache line, so a reader that sees the ordinal has the data in the
/// same transfer (NCCL's LL128 idea on a CPU: x86 keeps the stores of one core in order).
inline constexpr std::size_t line_payload = 48;
struct alignas(line) flagged_line {
  unsigned char data[line_payload];
  std::uint64_t signature = 0;
  std::atomic<std::uint64_t> ordinal{0};
};
static_assert(sizeof(flagged_line) == line, "a flagged line is one cache line");
/// A flag of the area on a line of its own: the ordinal of the last collective that set it
/// and that call's signature.
struct alignas(line) area_flag {
  std::atomic<std::uint64_t> ordinal{0};
  std::uint64_t signature = 0;
};

static_assert(std::atomic<std::uint64_t>::is_always_lock_free &&
                  std::atomic<std::uint32_t>::is_always_lock_free,
              "shm_transport needs lock-free atomics to share them between processes");

/// Byte offsets inside the segment.
struct layout {
  int ranks = 0;
  std::size_t lanes = 0, slots = 0, slot_bytes = 0;
  std::size_t slot_stride = 0, lane_stride = 0, inbox_stride = 0, inboxes = 0, total = 0;
  /// The collective area: after the inboxes, one block per rank holding its `done` flag and
  /// two areas, each of `area_lines` flagged lines, a `ready` and a `reduced` flag and
  /// `area_bulk_bytes` of bulk buffer.
  std::size_t area_lines = 0, area_bulk_bytes = 0;
  std::size_t areas = 0, area_stride = 0, area_rank_stride = 0;

  layout(int p, const shm_options& o)
      : ranks(p), lanes(o.lanes), slots(o.slots), slot_bytes(o.slot_bytes),
        area_lines(o.area_lines), area_bulk_bytes(o.area_bulk_bytes) {
    slot_stride = sizeof(slot_header) + round_up(slot_bytes, line);
    lane_stride = sizeof(lane_header) + slots * slot_stride;
    inbox_stride = round_up(static_cast<std::size_t>(p) * lanes * lane_stride, 4096);
    inboxes = 4096 + round_up(static_cast<std::size_t>(p) * sizeof(identity), 4096);
    areas = inboxes + static_cast<std::size_t>(p) * inbox_stride;
    area_stride =
        area_lines * sizeof(flagged_line) + 2 * sizeof(area_flag) + round_up(area_bulk_bytes, line);
    area_rank_stride = round_up(sizeof(area_flag) + 2 * area_stride, 4096);
    total = areas + static_cast<std::size_t>(p) * area_rank_stride;
  }
  /// Rank `r`'s `done` flag: the last in-segment collective it finished.
  std::size_t area_done_offset(int r) const {
    return areas + static_cast<std::size_t>(r) * area_rank_stride;
  }
  /// Rank `r`'s area `a` (0 or 1): its flagged lines, then `ready`, `reduced`, the bulk.
  std::size_t area_offset(int r, std::size_t a) const {
    return area_done_offset(r) + sizeof(area_flag) + a * area_stride;
  }
  std::size_t identity_offset(int r) const {
    return 4096 + static_cast<std::size_t>(r) * sizeof(identity);
  }
  std::size_t lane_offset(int receiver, int sender, std::size_t lane) const {
    return inboxes + static_cast<std::size_t>(receiver) * inbox_stride +
           (static_cast<std::size_t>(sender) * lanes + lane) * lane_stride;
  }
  std::size_t slot_offset(int receiver, int sender, std::size_t lane, std::size_t slot) const {
    return lane_offset(receiver, sender, lane) + sizeof(lane_header) + slot * slot_stride;
  }
};

/// One rank's registered region as mapped in this process; unmapped with its last owner.
struct mapping {
  unsigned char* base = nullptr;
  std::size_t bytes = 0;
  mapping(unsigned char* b, std::size_t n) : base(b), bytes(n) {}
  mapping(const mapping&) = delete;
  mapping& operator=(const mapping&) = delete;
  ~mapping() {
    if (base) munmap(base, bytes);
  }
};

/// Creates a POSIX shared-memory file of `bytes` under a fresh name written to `name`
/// ("/tcoll-shm-<pid>-<kind><random>"). Its memory is allocated now, so a full /dev/shm fails
/// here and not later with SIGBUS. On failure nothing is left and `name` is empty.
inline void create_file(char (&name)[64], std::size_t bytes, const char* kind) {
  std::random_device rd;
  std::snprintf(name, sizeof name, "/tcoll-shm-%d-%s%08x", static_cast<int>(getpid()), kind,
                static_cast<unsigned>(rd()));
  const int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
  const bool ok = fd >= 0 && ftruncate(fd, static_cast<off_t>(bytes)) == 0 &&
                  posix_fallocate(fd, 0, static_cast<off_t>(bytes)) == 0;
  if (fd >= 0) close(fd);
  if (!ok) {
    if (fd >= 0) shm_unlink(name);
    name[0] = 0;
  }
}

/// Maps `bytes` of the shared-memory file `name` read-write; null when it cannot.
inline unsigned char* map_file(const char* name, std::size_t bytes) {
  const int fd = shm_open(name, O_RDWR, 0600);
  void* p = fd >= 0 ? mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
  if (fd >= 0) close(fd);
  return p == MAP_FAILED ? nullptr : static_cast<unsigned char*>(p);
}

/// Collective over `boot`: rank 0 creates the node's segment of `bytes`, every rank maps it,
/// and once all have (or failed) its name goes, so nothing stays in /dev/shm. Returns this
/// rank's mapping; throws `transport_error` on every rank when any rank could not map it.
inline unsigned char* map_team_segment(tcoll::bootstrap& boot, std::size_t bytes) {
  const int rank = boot.rank();
  char name[64] = {};
  if (rank == 0) create_file(name, bytes, ""); // empty: it failed
  {
    const std::vector<std::uint8_t> root = detail::bootstrap::broadcast(
        boot, {reinterpret_cast<const std::uint8_t*>(name), sizeof name}, 0);
    std::memcpy(name, root.data(), sizeof name);
    name[sizeof name - 1] = 0;
  }
  if (!name[0])
    throw transport_error("shm_transport: cannot create a shared segment of " +
                              std::to_string(bytes) +
                              " bytes in /dev/shm (too small? lower options.lanes, slots "
                              "or slot_bytes)",
                          rank, 0);
  unsigned char* base = map_file(name, bytes);
  const bool mapped = base != nullptr;
  bool all_mapped = false;
  try {
    all_mapped = detail::bootstrap::all_of(boot, mapped);
  } catch (...) {
    if (rank == 0) shm_unlink(name);
    if (base) munmap(base, bytes);
    throw;
  }
  // Everyone has it mapped (or failed): the name can go.
  if (rank == 0) shm_unlink(name);
  if (!all_mapped) {
    if (base) munmap(base, bytes);
    throw transport_error(std::string("shm_transport: mapping the shared segment failed") +
                              (mapped ? " on another rank" : " here"),
                          rank);
  }
  return base;
}

} // namespace detail::shm
} // namespace tcoll
