#pragma once
/// \file
/// The equal-block collectives' blocks as bytes (MPI_Allgather, MPI_Alltoall, MPI_Gather,
/// MPI_Scatter and their non-blocking and persistent forms): the checks and sizes every rank
/// derives from its arguments, and where the blocks sit, packed where a datatype is derived or
/// not contiguous. One set for the blocking wrappers (collectives.cpp) and the non-blocking
/// ones (nonblocking.cpp), so the two decide and move alike.
#include "tcoll_mpi.hpp"

#include <cstddef>
#include <optional>

namespace tcoll::preload {

/// The checks and sizes of a call with a send and a receive side of P blocks (allgather,
/// alltoall): `why` set where MPI judges the call.
struct block_call {
  std::optional<fallback> why;
  std::size_t ssize = 0, rsize = 0; ///< bytes per element of a predefined contiguous type, or 0
  std::size_t block = 0, bytes = 0; ///< one block's signature bytes, and P blocks'
  int P = 0;
  bool in_place = false; ///< sendbuf is MPI_IN_PLACE
  /// Whether the received blocks are the user's buffer itself (else packed and unpacked).
  bool recv_direct() const noexcept { return rsize != 0; }
  /// Whether the sent blocks are the user's buffer itself, or in place.
  bool send_direct() const noexcept { return in_place || ssize != 0; }
};

/// Measures a call with a send and a receive side of P blocks (`args_ok`: what the wrapper
/// checked of its own arguments). The block is recvcount x recvtype's signature bytes, which
/// every rank of a matching call shares whatever datatypes each passes.
template <class Count>
block_call measure_block_call(const void* sendbuf, Count sendcount, MPI_Datatype sendtype,
                              const void* recvbuf, Count recvcount, MPI_Datatype recvtype,
                              MPI_Comm comm, bool args_ok) {
  block_call m;
  if (!mpi_active()) return m; // the caller's prologue counts it
  m.in_place = sendbuf == MPI_IN_PLACE;
  m.why = communicator_fallback(comm, args_ok && recvcount >= 0 && recvbuf && sendbuf &&
                                          (m.in_place || sendcount >= 0));
  if (m.why) return m;
  // a predefined contiguous type costs the same queries as before packing existed
  m.rsize = contiguous_size(recvtype);
  m.ssize = m.in_place ? m.rsize : contiguous_size(sendtype);
  const long long block =
      m.rsize ? static_cast<long long>(m.rsize) * recvcount : signature_bytes(recvcount, recvtype);
  const long long send = m.in_place ? block
                         : m.ssize  ? static_cast<long long>(m.ssize) * sendcount
                                    : signature_bytes(sendcount, sendtype);
  m.P = comm_size(comm);
  if (block < 0 || send != block || !count_fits(block, m.P)) {
    m.why = fallback::arguments; // MPI reports the bad type, the mismatch or the overflow
    return m;
  }
  m.block = static_cast<std::size_t>(block);
  m.bytes = m.block * static_cast<std::size_t>(m.P);
  return m;
}

/// What every rooted call (gather, scatter and their uneven forms) measures alike on its
/// rank: the communicator's fallback, its size, the root's range, whether this rank is the
/// root, `in_place` at the root only, and this rank's block (`count` x `type`, unless in
/// place). `why` set where MPI judges the call.
struct rooted_rank {
  std::optional<fallback> why;
  std::size_t size = 0;    ///< element size of this rank's predefined contiguous type, or 0
  long long signature = 0; ///< this rank's block's signature bytes (negative: a bad type)
  int P = 0;
  bool is_root = false;
  bool in_place = false;
};
/// Measures `m`'s part of a rooted call (`args_ok`: what the wrapper checked of its own
/// arguments); true where the caller goes on measuring (MPI active, no fallback yet).
template <class Count>
bool measure_rooted_rank(rooted_rank& m, Count count, MPI_Datatype type, bool in_place, int root,
                         MPI_Comm comm, bool args_ok) {
  if (!mpi_active()) return false; // the caller's prologue counts it
  m.in_place = in_place;
  m.why = communicator_fallback(comm, args_ok);
  if (m.why) return false;
  m.P = comm_size(comm);
  m.is_root = root >= 0 && root < m.P && comm_rank(comm) == root;
  if (root < 0 || root >= m.P || (in_place && !m.is_root)) {
    m.why = fallback::arguments;
    return false;
  }
  if (!in_place) {
    m.size = contiguous_size(type);
    m.signature = m.size ? static_cast<long long>(m.size) * count : signature_bytes(count, type);
  }
  return true;
}

/// The checks and sizes of a rooted call with `count` elements of `type` per rank on every
/// rank and P blocks at the root (gather, scatter): the root's `root_count` x `root_type`
/// (its receive side for a gather, its send side for a scatter) must carry the same signature
/// bytes; `in_place` at the root only. `why` set where MPI judges the call.
struct rooted_call : rooted_rank {
  std::size_t root_size = 0;        ///< element size of the root's predefined contiguous type
  std::size_t block = 0, bytes = 0; ///< one block's signature bytes, and P blocks'
  /// Whether this rank's own block is the user's buffer itself, or in place.
  bool rank_direct() const noexcept { return in_place || size != 0; }
  /// Whether the root's P blocks are the user's buffer itself (true off the root).
  bool root_direct() const noexcept { return !is_root || root_size != 0; }
};

/// Measures a rooted call (`args_ok`: what the wrapper checked of its own arguments).
template <class Count>
rooted_call measure_rooted_call(const void* buf, Count count, MPI_Datatype type,
                                const void* root_buf, Count root_count, MPI_Datatype root_type,
                                bool in_place, int root, MPI_Comm comm, bool args_ok) {
  rooted_call m;
  if (!measure_rooted_rank(m, count, type, in_place, root, comm, args_ok)) return m;
  long long signature = m.signature; // of the block every rank moves
  if (m.is_root) {                   // the root's P-block arguments are significant there only
    m.root_size = contiguous_size(root_type);
    const long long root_signature = m.root_size ? static_cast<long long>(m.root_size) * root_count
                                                 : signature_bytes(root_count, root_type);
    if (root_signature < 0 || (!in_place && root_signature != signature)) {
      m.why = fallback::arguments; // MPI reports the bad type or the mismatch
      return m;
    }
    signature = root_signature;
  }
  if (signature < 0 || !count_fits(signature, m.P)) {
    m.why = fallback::arguments;
    return m;
  }
  m.block = static_cast<std::size_t>(signature);
  if (m.block != 0 && ((!in_place && buf == nullptr) || (m.is_root && root_buf == nullptr))) {
    m.why = fallback::arguments;
    return m;
  }
  m.bytes = m.block * static_cast<std::size_t>(m.P);
  return m;
}

/// The address of block `q` of a typed buffer (`count` elements of `type` per block).
template <class Count>
char* block_of(const void* buf, Count count, MPI_Datatype type, int q) {
  MPI_Aint lb = 0, extent = 0;
  PMPI_Type_get_extent(type, &lb, &extent);
  return static_cast<char*>(const_cast<void*>(buf)) +
         static_cast<MPI_Aint>(q) * static_cast<MPI_Aint>(count) * extent;
}

/// Packs `blocks` blocks of a typed buffer (block q at q x `count` extents of `type`) into
/// `out`, `block` bytes each, in rank order; block by block, since count x P may exceed an
/// int.
template <class Count>
void pack_blocks(const void* buf, Count count, MPI_Datatype type, int blocks, std::size_t block,
                 std::byte* out) {
  for (int q = 0; q < blocks; ++q)
    pack_local(block_of(buf, count, type, q), count, type,
               out + static_cast<std::size_t>(q) * block, block);
}
/// The inverse of `pack_blocks`.
template <class Count>
void unpack_blocks(const std::byte* in, int blocks, std::size_t block, void* buf, Count count,
                   MPI_Datatype type) {
  for (int q = 0; q < blocks; ++q)
    unpack_local(in + static_cast<std::size_t>(q) * block, block, block_of(buf, count, type, q),
                 count, type);
}

/// An allgather's input on `rank`, whose P gathered blocks land in `out` (contiguous: the
/// user's buffer where `m.recv_direct()`, else space to unpack from): in place, this rank's
/// block of recvbuf (packed into its place in `out` where the receive type is packed); else
/// sendbuf itself, or sendbuf packed straight into its place in `out`.
template <class Count>
const unsigned char* allgather_input(const void* sendbuf, Count sendcount, MPI_Datatype sendtype,
                                     const void* recvbuf, Count recvcount, MPI_Datatype recvtype,
                                     const block_call& m, int rank, unsigned char* out) {
  unsigned char* own = out + static_cast<std::size_t>(rank) * m.block;
  auto* own_bytes = reinterpret_cast<std::byte*>(own);
  if (m.in_place) {
    if (!m.recv_direct())
      pack_local(block_of(recvbuf, recvcount, recvtype, rank), recvcount, recvtype, own_bytes,
                 m.block);
    return own;
  }
  if (m.send_direct()) return static_cast<const unsigned char*>(sendbuf);
  pack_local(sendbuf, sendcount, sendtype, own_bytes, m.block);
  return own;
}

/// An all-to-all's input, whose P received blocks land in `out` (as for `allgather_input`):
/// `out` itself in place (the blocks of recvbuf packed into it where its type is packed) or
/// where the send type is packed (packed into it, then exchanged in place there); else
/// sendbuf. The exchange is in place where the input is `out`.
template <class Count>
const unsigned char* alltoall_input(const void* sendbuf, Count sendcount, MPI_Datatype sendtype,
                                    const void* recvbuf, Count recvcount, MPI_Datatype recvtype,
                                    const block_call& m, unsigned char* out) {
  auto* out_bytes = reinterpret_cast<std::byte*>(out);
  if (m.in_place) {
    if (!m.recv_direct()) pack_blocks(recvbuf, recvcount, recvtype, m.P, m.block, out_bytes);
    return out;
  }
  if (m.send_direct()) return static_cast<const unsigned char*>(sendbuf);
  pack_blocks(sendbuf, sendcount, sendtype, m.P, m.block, out_bytes);
  return out;
}

/// Where a gather's or scatter's blocks sit as bytes: `in` what this rank sends (its block,
/// or the root's P blocks of a scatter), `out` what it receives (the root's P blocks of a
/// gather, or its block of a scatter).
struct rooted_bytes {
  const unsigned char* in = nullptr;
  unsigned char* out = nullptr;
};

/// A gather's bytes: at the root, `root_out` holds the P gathered blocks (the user's buffer
/// where `m.root_direct()`, else space to unpack from), and its own block is read from its
/// place there in place (packed into it where the receive type is packed) or packed into it
/// from sendbuf; elsewhere the block is sendbuf, or packed into `scratch(block)` (which
/// returns `std::byte*`).
template <class Count, class Scratch>
rooted_bytes gather_bytes(const void* sendbuf, Count sendcount, MPI_Datatype sendtype,
                          const void* recvbuf, Count recvcount, MPI_Datatype recvtype,
                          const rooted_call& m, int root, unsigned char* root_out,
                          Scratch&& scratch) {
  rooted_bytes b{.in = static_cast<const unsigned char*>(sendbuf)};
  if (m.is_root) {
    b.out = root_out;
    unsigned char* own = root_out + static_cast<std::size_t>(root) * m.block;
    auto* own_bytes = reinterpret_cast<std::byte*>(own);
    if (m.in_place) { // the root's block sits in recvbuf at its place, as recvtype
      if (!m.root_direct())
        pack_local(block_of(recvbuf, recvcount, recvtype, root), recvcount, recvtype, own_bytes,
                   m.block);
      b.in = own;
    } else if (!m.rank_direct()) { // packed straight into its place: tcoll's in-place form
      pack_local(sendbuf, sendcount, sendtype, own_bytes, m.block);
      b.in = own;
    }
  } else if (!m.rank_direct()) {
    std::byte* packed = scratch(m.block);
    pack_local(sendbuf, sendcount, sendtype, packed, m.block);
    b.in = reinterpret_cast<const unsigned char*>(packed);
  }
  return b;
}

/// A scatter's bytes: at the root, the P blocks are sendbuf, or packed in rank order into
/// `scratch(P blocks)`; in place, or where the receive type is packed, the root's own block
/// stays where it is among them (tcoll's in-place form: linear and the group leaders only
/// read it). Elsewhere the block is received into recvbuf, or into `scratch(block)` to
/// unpack from where the receive type is packed.
template <class Count, class Scratch>
rooted_bytes scatter_bytes(const void* sendbuf, Count sendcount, MPI_Datatype sendtype,
                           void* recvbuf, const rooted_call& m, int root, Scratch&& scratch) {
  rooted_bytes b{.out = static_cast<unsigned char*>(recvbuf)};
  if (m.is_root) {
    b.in = static_cast<const unsigned char*>(sendbuf);
    if (!m.root_direct()) {
      std::byte* packed = scratch(m.bytes);
      pack_blocks(sendbuf, sendcount, sendtype, m.P, m.block, packed);
      b.in = reinterpret_cast<const unsigned char*>(packed);
    }
    if (m.in_place || !m.rank_direct())
      b.out = const_cast<unsigned char*>(b.in) + static_cast<std::size_t>(root) * m.block;
  } else if (!m.rank_direct()) {
    b.out = reinterpret_cast<unsigned char*>(scratch(m.block));
  }
  return b;
}

} // namespace tcoll::preload
