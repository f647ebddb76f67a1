#pragma once
/// \file
/// The uneven collectives' blocks as bytes (MPI_Alltoallv's two sides, the root's side of
/// MPI_Gatherv and MPI_Scatterv, MPI_Iallgatherv's receive side), for their blocking wrappers
/// (collectives.cpp) and their non-blocking ones (nonblocking.cpp).
#include "equal_blocks.hpp"
#include "tcoll_mpi.hpp"

#include <algorithm>
#include <cstddef>
#include <optional>
#include <span>
#include <vector>

namespace tcoll::preload {

/// The common block size of `counts[0..P)`, or -1 where they differ (or `counts` is null):
/// MPI_Reduce_scatter and MPI_Allgatherv (and their non-blocking forms) with equal blocks run
/// as their equal-block collectives.
template <class Count>
long long common_count(const Count* counts, int P) {
  if (counts == nullptr || P < 1) return -1;
  for (int q = 1; q < P; ++q)
    if (counts[q] != counts[0]) return -1;
  return counts[0];
}

/// One side of an uneven collective's blocks (MPI_Alltoallv's send or receive side, the
/// root's side of MPI_Gatherv and MPI_Scatterv), as bytes: block q is `sizes[q]` bytes at
/// `data + at[q]`. Where the datatype is predefined and contiguous the blocks are the user's
/// own, where its displacements put them (`data` is the buffer from its lowest non-empty
/// block; gaps between blocks are left alone); else (a derived or non-contiguous datatype, or
/// MPI_BOTTOM) they are packed in rank order into `packed` by `pack_side`, and `unpack_side`
/// moves them back.
struct v_side {
  std::vector<std::size_t> sizes, at;
  std::size_t total = 0; ///< bytes of every block together: this rank's part of the call
  bool direct = false;
  unsigned char* data = nullptr;
  std::vector<std::byte> packed;
};

/// Sizes `side` from `counts[0..P)` elements of `type` at `buf`, block q at `displs[q]`
/// extents of `type` (rank-local: no other rank sees these). False where a count is
/// negative, the datatype invalid or the bytes overflow: MPI judges such a call itself.
template <class Count, class Displ>
bool measure_side(v_side& side, const void* buf, const Count* counts, const Displ* displs,
                  MPI_Datatype type, int P) {
  const std::size_t contiguous = contiguous_size(type);
  const long long element =
      contiguous ? static_cast<long long>(contiguous) : signature_bytes(1, type);
  if (element < 0 || counts == nullptr || displs == nullptr) return false;
  const auto n = static_cast<std::size_t>(P);
  side.sizes.assign(n, 0);
  side.at.assign(n, 0);
  long long total = 0;
  for (std::size_t q = 0; q < n; ++q) {
    long long b = 0;
    if (counts[q] < 0 || __builtin_mul_overflow(static_cast<long long>(counts[q]), element, &b) ||
        __builtin_add_overflow(total, b, &total))
      return false;
    side.sizes[q] = static_cast<std::size_t>(b);
  }
  if (!count_fits(total)) return false;
  side.total = static_cast<std::size_t>(total);
  side.direct = contiguous != 0 && buf != nullptr; // MPI_BOTTOM: through MPI's datatype engine
  if (!side.direct) {                              // packed in rank order
    std::size_t next = 0;
    for (std::size_t q = 0; q < n; ++q) {
      side.at[q] = next;
      next += side.sizes[q];
    }
    return true;
  }
  long long lowest = 0; // the lowest displacement of a non-empty block (extents)
  bool any = false;
  for (std::size_t q = 0; q < n; ++q)
    if (side.sizes[q] != 0) {
      lowest = any ? std::min(lowest, static_cast<long long>(displs[q]))
                   : static_cast<long long>(displs[q]);
      any = true;
    }
  const auto step = static_cast<long long>(contiguous);
  long long base = 0;
  if (__builtin_mul_overflow(lowest, step, &base)) return false;
  for (std::size_t q = 0; q < n; ++q) {
    long long off = 0;
    if (side.sizes[q] == 0) continue; // an empty block's displacement is never used
    if (__builtin_sub_overflow(static_cast<long long>(displs[q]), lowest, &off) ||
        __builtin_mul_overflow(off, step, &off) || !count_fits(off))
      return false;
    side.at[q] = static_cast<std::size_t>(off);
  }
  side.data = static_cast<unsigned char*>(const_cast<void*>(buf)) + base;
  return true;
}

/// Where `side` is packed: makes room for its blocks and, from `buf` (as `measure_side` was
/// given it), packs every block (or only block `only`).
template <class Count, class Displ>
void pack_side(v_side& side, const void* buf, const Count* counts, const Displ* displs,
               MPI_Datatype type, int P, bool fill, int only = -1) {
  if (side.direct) return;
  side.packed.resize(side.total);
  side.data = reinterpret_cast<unsigned char*>(side.packed.data());
  if (!fill) return;
  MPI_Aint lb = 0, extent = 0;
  PMPI_Type_get_extent(type, &lb, &extent);
  for (int q = 0; q < P; ++q) {
    const auto k = static_cast<std::size_t>(q);
    if (side.sizes[k] == 0 || (only >= 0 && q != only)) continue;
    pack_local(static_cast<const char*>(buf) + static_cast<MPI_Aint>(displs[q]) * extent, counts[q],
               type, side.packed.data() + side.at[k], side.sizes[k]);
  }
}

/// Where `side` is packed: unpacks its blocks (but block `skip`) into `buf`.
template <class Count, class Displ>
void unpack_side(const v_side& side, void* buf, const Count* counts, const Displ* displs,
                 MPI_Datatype type, int P, int skip = -1) {
  if (side.direct) return;
  MPI_Aint lb = 0, extent = 0;
  PMPI_Type_get_extent(type, &lb, &extent);
  for (int q = 0; q < P; ++q) {
    const auto k = static_cast<std::size_t>(q);
    if (side.sizes[k] == 0 || q == skip) continue;
    unpack_local(side.packed.data() + side.at[k], side.sizes[k],
                 static_cast<char*>(buf) + static_cast<MPI_Aint>(displs[q]) * extent, counts[q],
                 type);
  }
}

inline std::span<const std::size_t> sizes_of(const v_side& side) {
  return side.sizes;
}
inline std::span<const std::size_t> places_of(const v_side& side) {
  return side.at;
}

/// The checks and sizes of a rooted call with uneven blocks (gatherv, scatterv), blocking or
/// not (`args_ok`: what the wrapper checked of its own arguments): this rank's block is `count` x
/// `type` (unless `in_place`, at the root only); the root's side (`root_counts`, `displs`,
/// `root_type` at `root_buf`) is measured into `root_side` and must hold a block of the same size
/// for the root. `why` set where MPI judges the call.
struct rooted_v_call : rooted_rank {
  std::size_t block = 0; ///< this rank's block's signature bytes
  std::size_t bytes = 0; ///< this rank's part of the call: its block, at the root every block
  /// Whether this rank's block is `buf` itself (given, of a predefined contiguous type), or
  /// in place.
  bool rank_direct(const void* buf) const noexcept {
    return in_place || (size != 0 && buf != nullptr);
  }
};
template <class Count, class Displ>
rooted_v_call measure_rooted_v_call(Count count, MPI_Datatype type, v_side& root_side,
                                    const void* root_buf, const Count root_counts[],
                                    const Displ displs[], MPI_Datatype root_type, bool in_place,
                                    int root, MPI_Comm comm, bool args_ok) {
  rooted_v_call m;
  if (!measure_rooted_rank(m, count, type, in_place, root, comm, args_ok)) return m;
  if (!in_place) {
    if (m.signature < 0 || !count_fits(m.signature)) {
      m.why = fallback::arguments;
      return m;
    }
    m.block = static_cast<std::size_t>(m.signature);
  }
  m.bytes = m.block;
  if (!m.is_root) return m;
  if (!measure_side(root_side, root_buf, root_counts, displs, root_type, m.P)) {
    m.why = fallback::arguments;
    return m;
  }
  const std::size_t own = root_side.sizes[static_cast<std::size_t>(root)];
  if (!in_place && own != m.block) {
    m.why = fallback::arguments; // the mismatch
    return m;
  }
  m.block = own;
  m.bytes = root_side.total;
  return m;
}

/// A gatherv's input as bytes: this rank's block, or in place the root's own block at its
/// place on the root's side; the root's side is packed where its type is (in place with the
/// root's own block, which the others do not overwrite), and a packed send type is packed
/// into `send_packed`. `recv` is the root's side measured by `measure_rooted_v_call`.
template <class Count, class Displ>
const unsigned char*
gatherv_input(const void* sendbuf, Count sendcount, MPI_Datatype sendtype, v_side& recv,
              void* recvbuf, const Count recvcounts[], const Displ displs[], MPI_Datatype recvtype,
              const rooted_v_call& m, int root, std::vector<std::byte>& send_packed) {
  const auto* in = static_cast<const unsigned char*>(sendbuf);
  if (m.is_root) {
    pack_side(recv, recvbuf, recvcounts, displs, recvtype, m.P, m.in_place, root);
    if (m.in_place) in = recv.data + recv.at[static_cast<std::size_t>(root)];
  }
  if (!m.rank_direct(sendbuf)) {
    send_packed.resize(m.block);
    pack_local(sendbuf, sendcount, sendtype, send_packed.data(), m.block);
    in = reinterpret_cast<const unsigned char*>(send_packed.data());
  }
  return in;
}

/// A scatterv's output as bytes: this rank's block, received into recvbuf, into
/// `recv_packed` where the receive type is packed (to unpack from), or in place the root's
/// own block where it is on the root's side (tcoll's in-place form: only read). The root's
/// side `send` is packed where its type is.
template <class Count, class Displ>
unsigned char* scatterv_output(const void* sendbuf, const Count sendcounts[], const Displ displs[],
                               MPI_Datatype sendtype, v_side& send, void* recvbuf,
                               const rooted_v_call& m, int root,
                               std::vector<std::byte>& recv_packed) {
  auto* out = static_cast<unsigned char*>(recvbuf);
  if (m.is_root) {
    pack_side(send, sendbuf, sendcounts, displs, sendtype, m.P, true);
    if (m.in_place) out = send.data + send.at[static_cast<std::size_t>(root)];
  }
  if (!m.rank_direct(recvbuf)) {
    recv_packed.resize(m.block);
    out = reinterpret_cast<unsigned char*>(recv_packed.data());
  }
  return out;
}

} // namespace tcoll::preload
