#pragma once
/// \file
/// Pairwise exchange: the all-to-all with a block of its own size for every peer (MPI's
/// `MPI_Alltoall` and `MPI_Alltoallv`, PyTorch's `all_to_all` and `all_to_all_single`). In
/// step s = 1 .. P-1 rank r sends its block for r + s and receives the block of r - s
/// (mod P), so no two ranks wait on each other in a cycle; its own block is copied. P - 1
/// steps of one send and one receive each: (P - 1) alpha + (bytes sent) beta per rank.
///
/// Small blocks (every block of this rank at most `all_posted_max_bytes`) skip the steps:
/// every receive and send is posted at once, then all are waited for, so the P - 1 latencies
/// overlap (Open MPI's basic linear all-to-all). The choice is each rank's own: both ways
/// send one message per pair in the same message space, so ranks that choose differently
/// (uneven blocks) still match.
#include <algorithm>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../core/collective_table.hpp"
#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../core/traffic.hpp"

namespace tcoll {

/// One peer's block of an all-to-all: where it is and how many bytes.
struct exchange_block {
  const void* send = nullptr; ///< what this rank sends the peer
  std::size_t send_bytes = 0;
  void* recv = nullptr; ///< where the peer's block for this rank lands
  std::size_t recv_bytes = 0;
};

/// See the file comment. The own block is copied with the reducer's `copy` (host memory with
/// the CPU reducer, device memory with a device reducer on a stream-ordered transport).
struct pairwise_exchange {
  /// Its name: its header's, and its line's in the table of algorithms (table.hpp).
  static constexpr std::string_view name = "pairwise_exchange";

  /// The busiest rank's traffic (core/traffic.hpp) as an all-to-all of `bytes` (one rank's
  /// P blocks, equal): P-1 full-duplex rounds of one block (the own block is a local copy).
  static constexpr rank_traffic traffic(collective, double bytes, int ranks) noexcept {
    if (ranks <= 1) return {};
    const double p = ranks, moved = (p - 1) / p * bytes;
    return {p - 1, p - 1, moved, moved, 0.0, p - 1, moved};
  }
  /// Blocks up to this size are exchanged all at once (see the file comment); 0: never.
  std::size_t all_posted_max_bytes = 16384;

  /// All-to-all of `blocks[q]` (one per rank of `t`) in the message space `tag`: sends
  /// `blocks[q].send` to rank q and receives rank q's block for this rank into
  /// `blocks[q].recv`. The sizes of a pair must agree on both sides (the transport reports
  /// a mismatch); this rank's own send and receive sizes must be equal (`invalid_argument`).
  /// Send and receive memory must not overlap, except that a block may be its own (the
  /// own block in place). `red` copies the own block. Every wait is bounded by the
  /// transport's timeout.
  template <transport Tr, reducer R>
  void exchange(Tr& t, int tag, std::span<const exchange_block> blocks, R& red) const {
    const int P = t.size(), r = t.rank();
    check_one_block_per_rank(blocks, P, r);
    const exchange_block& own = blocks[static_cast<std::size_t>(r)];
    if (own.send_bytes != own.recv_bytes)
      throw invalid_argument("all-to-all: this rank sends itself " +
                                 std::to_string(own.send_bytes) + " bytes but expects " +
                                 std::to_string(own.recv_bytes),
                             r);
    std::size_t largest = 0;
    for (const exchange_block& b : blocks)
      largest = std::max({largest, b.send_bytes, b.recv_bytes});
    exchange_each(t, tag, largest, red, [&](int q) { return blocks[static_cast<std::size_t>(q)]; });
  }

  /// All-to-all of `block_bytes` per pair (MPI_Alltoall's blocks): block q of `send` goes
  /// to rank q, rank q's block lands as block q of `recv` (P blocks each), with no
  /// allocation on the step-by-step path. `send` and `recv` must not overlap.
  template <transport Tr, reducer R>
  void exchange_equal(Tr& t, int tag, const void* send, void* recv, std::size_t block_bytes,
                      R& red) const {
    const auto* in = static_cast<const std::byte*>(send);
    auto* out = static_cast<std::byte*>(recv);
    exchange_each(t, tag, block_bytes, red, [&](int q) {
      const std::size_t at = static_cast<std::size_t>(q) * block_bytes;
      return exchange_block{in + at, block_bytes, out + at, block_bytes};
    });
  }

  /// All-to-all of `block_bytes` per pair in place (MPI_IN_PLACE): block q of `buffer` goes
  /// to rank q and rank q's block lands there (see `exchange_in_place`).
  template <transport Tr, reducer R>
  void exchange_equal_in_place(Tr& t, int tag, void* buffer, std::size_t block_bytes,
                               R& red) const {
    auto* blocks = static_cast<std::byte*>(buffer);
    in_place_each(t, tag, block_bytes, red, [&](int q) {
      return std::pair{blocks + static_cast<std::size_t>(q) * block_bytes, block_bytes};
    });
  }

  /// All-to-all in place with a block of its own size per pair (MPI_Alltoallv with
  /// MPI_IN_PLACE): `blocks[q]` is where the block for rank q lies and where rank q's block
  /// lands, so its `send` and `recv` must be one place of one size (`invalid_argument`
  /// otherwise); blocks must not overlap. The own block stays. A block is copied aside only
  /// where its place receives before the block has left: in step s the place of r - s
  /// receives and that of r + s sends, so the block for r + k leaves at step k and is
  /// overwritten at step P - k, and only the blocks with k >= P - k (about half of them) are
  /// copied; all P - 1 where every message is posted at once. (Copying the whole buffer
  /// first moves P + 1 blocks through memory where this moves about P / 2.)
  template <transport Tr, reducer R>
  void exchange_in_place(Tr& t, int tag, std::span<const exchange_block> blocks, R& red) const {
    const int P = t.size(), r = t.rank();
    check_one_block_per_rank(blocks, P, r);
    std::size_t largest = 0;
    for (std::size_t q = 0; q < blocks.size(); ++q) {
      const exchange_block& b = blocks[q];
      if (b.send != b.recv || b.send_bytes != b.recv_bytes)
        throw invalid_argument("pairwise_exchange in place: the block for rank " +
                                   std::to_string(q) + " is sent from another place or size " +
                                   "than rank " + std::to_string(q) + "'s block lands in",
                               r, static_cast<int>(q));
      largest = std::max(largest, b.send_bytes);
    }
    in_place_each(t, tag, largest, red, [&](int q) {
      const exchange_block& b = blocks[static_cast<std::size_t>(q)];
      return std::pair{static_cast<std::byte*>(b.recv), b.recv_bytes};
    });
  }

private:
  /// `invalid_argument` unless `blocks` has one block per rank of a group of `P`.
  static void check_one_block_per_rank(std::span<const exchange_block> blocks, int P, int r) {
    if (static_cast<int>(blocks.size()) != P)
      throw invalid_argument("pairwise_exchange: " + std::to_string(blocks.size()) +
                                 " blocks for a group of " + std::to_string(P) + " ranks",
                             r);
  }

  /// Whether a rank of `P` whose largest block is `largest` posts every message at once.
  bool posts_all(int P, std::size_t largest) const noexcept {
    return P > 2 && largest <= all_posted_max_bytes;
  }

  /// The in-place exchange of `exchange_in_place`, `place_of(q)` the place and size of the
  /// block for and from rank q, `largest` the largest of them.
  template <transport Tr, reducer R, class PlaceOf>
  void in_place_each(Tr& t, int tag, std::size_t largest, R& red, const PlaceOf& place_of) const {
    const int P = t.size(), r = t.rank();
    const int first_aside = posts_all(P, largest) ? 1 : (P + 1) / 2; // k >= P - k
    // the block for r + k goes aside at offset[k - first_aside]
    std::vector<std::size_t> offset(static_cast<std::size_t>(P - first_aside) + 1, 0);
    for (int k = first_aside; k < P; ++k)
      offset[static_cast<std::size_t>(k - first_aside) + 1] =
          offset[static_cast<std::size_t>(k - first_aside)] + place_of((r + k) % P).second;
    auto copies = red.template allocate<std::byte>(offset.back());
    for (int k = first_aside; k < P; ++k) {
      const auto [place, bytes] = place_of((r + k) % P);
      red.copy(copies.data() + offset[static_cast<std::size_t>(k - first_aside)], place, bytes);
    }
    exchange_each(t, tag, largest, red, [&](int q) {
      const int k = (q - r + P) % P;
      const auto [place, bytes] = place_of(q);
      const std::byte* send =
          k >= first_aside ? copies.data() + offset[static_cast<std::size_t>(k - first_aside)]
                           : place;
      return exchange_block{send, bytes, place, bytes};
    });
  }

  /// The exchange of `block_of(q)` for every rank q, `largest` the largest of this rank's
  /// blocks (which decides between the two ways of the file comment).
  template <transport Tr, reducer R, class BlockOf>
  void exchange_each(Tr& t, int tag, std::size_t largest, R& red, const BlockOf& block_of) const {
    const int P = t.size(), r = t.rank();
    const exchange_block own = block_of(r);
    if (own.send_bytes && own.send != own.recv)
      red.copy(static_cast<std::byte*>(own.recv), static_cast<const std::byte*>(own.send),
               own.send_bytes);
    if (posts_all(P, largest)) {
      std::vector<typename Tr::request> recvs, sends;
      recvs.reserve(static_cast<std::size_t>(P));
      sends.reserve(static_cast<std::size_t>(P));
      for (int s = 1; s < P; ++s) {
        const int from = (r - s + P) % P;
        const exchange_block in = block_of(from);
        recvs.push_back(t.irecv(from, in.recv, in.recv_bytes, tag));
      }
      for (int s = 1; s < P; ++s) {
        const int to = (r + s) % P;
        const exchange_block out = block_of(to);
        sends.push_back(isend_for_irecv(t, to, out.send, out.send_bytes, tag));
      }
      const auto until = clock::now() + t.timeout();
      for (auto& q : recvs) t.wait(q, until);
      for (auto& q : sends) t.wait(q, until);
      return;
    }
    for (int s = 1; s < P; ++s) {
      const int to = (r + s) % P, from = (r - s + P) % P;
      const exchange_block out = block_of(to);
      const exchange_block in = block_of(from);
      auto rr = t.irecv(from, in.recv, in.recv_bytes, tag);
      auto sr = isend_for_irecv(t, to, out.send, out.send_bytes, tag);
      // the receive first: on a transport where a send completes only when its receiver
      // drives the copy (threads: the receiver reads the sender's memory), each rank waiting
      // for its own send would wait for a peer that waits for its send too
      const auto until = clock::now() + t.timeout();
      t.wait(rr, until);
      t.wait(sr, until);
    }
  }
};

} // namespace tcoll
