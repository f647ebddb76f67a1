#pragma once
/// \file
/// `shm_options`, the tuning knobs of `shm_transport`, and the check every rank makes of its
/// own before the team compares them (`shm_transport` construction).
#include <chrono>
#include <cstddef>
#include <string>

#include "../../core/error.hpp"

namespace tcoll {

/// Tuning knobs of `shm_transport`.
struct shm_options {
  /// Longest any blocking wait may take before it throws `timeout_error`.
  std::chrono::milliseconds timeout = std::chrono::seconds(60);
  /// Messages in flight at once from one rank to another.
  std::size_t lanes = 4;
  /// Pipeline depth of a lane.
  std::size_t slots = 2;
  /// Fragment size (a multiple of 64). Fragments are reduced straight from shared memory.
  std::size_t slot_bytes = 32 * 1024;
  /// Messages of at least this many bytes (and longer than `slot_bytes`) go single-copy:
  /// the receiver reads the sender's buffer with Linux cross-memory attach
  /// (`process_vm_readv`) instead of both copying through the slots. Used only where every
  /// rank of the team could read every other at construction (ptrace permission), else
  /// the slots carry everything. `SIZE_MAX` turns it off.
  std::size_t single_copy_min_bytes = 64 * 1024;
  /// The same for a message sent with `isend_for_irecv` (its receiver copies it out whole:
  /// all-to-all, gather, scatter), from this size on whatever `slot_bytes`: a plain receive
  /// gains from one copy at smaller sizes than one that reduces, which the slots serve
  /// without staging (docs/benchmarks.md, "Single copy for plain receives"). At least 64.
  std::size_t single_copy_irecv_min_bytes = 8 * 1024;
  /// Piece a single-copy receive-and-reduce reads before reducing it (kept cache-sized:
  /// the piece, the local operand and the result fit in L2). 256 KiB measured 4-5 % faster
  /// than 64 KiB at 2-8 MiB on 2 processes and 1 MiB 10-15 % slower (docs/benchmarks.md).
  std::size_t single_copy_piece_bytes = 256 * 1024;
  /// Failed polls before a waiting rank starts yielding the CPU (0: yield at once). With
  /// more ranks on the node than cores, waits always yield at once.
  int spins_before_yield = 2000;
  /// A wait that has yielded for this long sleeps `idle_sleep` between polls from then on,
  /// leaving its core to computation that runs beside it (with more threads than cores, a
  /// yielding thread still takes its share of a core: a communication thread waiting for a
  /// peer that is still computing slows that computation down). Zero, the default: waits
  /// only yield.
  std::chrono::microseconds sleep_after{0};
  /// The sleep between two polls of such a wait: the latency it may add to the wait.
  std::chrono::microseconds idle_sleep{50};
  /// The collective area (`shm_segment_area`, transport/shm/area.hpp), where the in-segment
  /// collectives (`in_segment`) run: lines of the flag-per-line protocol per rank and
  /// area (48 bytes of data each, so the default 4 lines carry 192 bytes), and the bytes of the
  /// bulk buffer each rank copies larger data into (a multiple of 64; larger calls go through it in
  /// pieces). Every rank holds two areas, so the segment grows by about 2 * (64 * area_lines +
  /// area_bulk_bytes) per rank.
  std::size_t area_lines = 4;
  std::size_t area_bulk_bytes = 256 * 1024;
};

namespace detail::shm {

/// Throws `invalid_argument` naming the first option of `o` out of its range.
inline void check_options(const shm_options& o, int rank) {
  if (o.timeout.count() <= 0)
    throw invalid_argument("shm_transport: options.timeout must be positive", rank);
  if (o.lanes < 1 || o.lanes > 64)
    throw invalid_argument(
        "shm_transport: options.lanes must be in [1, 64], got " + std::to_string(o.lanes), rank);
  if (o.slots < 1 || o.slots > 64)
    throw invalid_argument(
        "shm_transport: options.slots must be in [1, 64], got " + std::to_string(o.slots), rank);
  if (o.slot_bytes < 64 || o.slot_bytes > (std::size_t{1} << 30) || o.slot_bytes % 64)
    throw invalid_argument(
        "shm_transport: options.slot_bytes must be a multiple of 64 in [64, 2^30], got " +
            std::to_string(o.slot_bytes),
        rank);
  if (o.sleep_after.count() < 0 || o.idle_sleep.count() < 1)
    throw invalid_argument("shm_transport: options.sleep_after must be >= 0 and "
                           "options.idle_sleep >= 1 us",
                           rank);
  if (o.area_lines < 1 || o.area_lines > 4096)
    throw invalid_argument("shm_transport: options.area_lines must be in [1, 4096], got " +
                               std::to_string(o.area_lines),
                           rank);
  if (o.area_bulk_bytes < 64 || o.area_bulk_bytes > (std::size_t{1} << 30) ||
      o.area_bulk_bytes % 64)
    throw invalid_argument(
        "shm_transport: options.area_bulk_bytes must be a multiple of 64 in [64, 2^30], got " +
            std::to_string(o.area_bulk_bytes),
        rank);
  if (o.single_copy_irecv_min_bytes < 64)
    throw invalid_argument("shm_transport: options.single_copy_irecv_min_bytes must be at "
                           "least 64, got " +
                               std::to_string(o.single_copy_irecv_min_bytes),
                           rank);
  if (o.single_copy_piece_bytes < 64 || o.single_copy_piece_bytes % 64)
    throw invalid_argument("shm_transport: options.single_copy_piece_bytes must be a positive "
                           "multiple of 64, got " +
                               std::to_string(o.single_copy_piece_bytes),
                           rank);
}

} // namespace detail::shm
} // namespace tcoll
