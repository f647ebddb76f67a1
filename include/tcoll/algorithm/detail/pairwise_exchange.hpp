#pragma once
/// \file
/// Pairwise exchange: the all-to-all with a block of its own size for every peer (MPI's
/// `MPI_Alltoallv`, PyTorch's `all_to_all` and `all_to_all_single`). In step s = 1 .. P-1
/// rank r sends its block for r + s and receives the block of r - s (mod P), so no two
/// ranks wait on each other in a cycle; its own block is copied. P - 1 steps of one send and
/// one receive each: (P - 1) alpha + (bytes sent) beta per rank.
///
/// Until the table of collectives (issue 49) lists all-to-all with its algorithms, this is
/// the one implementation; the PyTorch backend's all-to-all calls run on it.
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <span>
#include <string>

#include "../../core/concepts.hpp"
#include "../../core/error.hpp"

namespace tcoll::detail {

/// One peer's block: where it is and how many bytes.
struct exchange_block {
  const void* send = nullptr;
  std::size_t send_bytes = 0;
  void* recv = nullptr;
  std::size_t recv_bytes = 0;
};

/// All-to-all of `blocks[q]` (one per rank of `t`) on message tag `tag`: sends
/// `blocks[q].send` to rank q and receives rank q's block for this rank into
/// `blocks[q].recv`. The sizes of a pair must agree on both sides (the transport reports a
/// mismatch); this rank's own send and receive sizes must be equal (`invalid_argument`).
/// Every wait is bounded by the transport's timeout.
template <transport Tr>
void pairwise_exchange(Tr& t, int tag, std::span<const exchange_block> blocks) {
  const int P = t.size(), r = t.rank();
  if (static_cast<int>(blocks.size()) != P)
    throw invalid_argument("pairwise_exchange: " + std::to_string(blocks.size()) +
                               " blocks for a group of " + std::to_string(P) + " ranks",
                           r);
  const exchange_block& own = blocks[static_cast<std::size_t>(r)];
  if (own.send_bytes != own.recv_bytes)
    throw invalid_argument("all-to-all: this rank sends itself " + std::to_string(own.send_bytes) +
                               " bytes but expects " + std::to_string(own.recv_bytes),
                           r);
  if (own.send_bytes && own.send != own.recv) std::memmove(own.recv, own.send, own.send_bytes);
  for (int s = 1; s < P; ++s) {
    const int to = (r + s) % P, from = (r - s + P) % P;
    const exchange_block& out = blocks[static_cast<std::size_t>(to)];
    const exchange_block& in = blocks[static_cast<std::size_t>(from)];
    auto rr = t.irecv(from, in.recv, in.recv_bytes, tag);
    auto sr = t.isend(to, out.send, out.send_bytes, tag);
    const auto until = clock::now() + t.timeout();
    t.wait(sr, until);
    t.wait(rr, until);
  }
}

} // namespace tcoll::detail
