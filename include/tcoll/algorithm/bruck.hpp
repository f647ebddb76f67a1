#pragma once
/// \file
/// Bruck's all-to-all (Bruck, Ho, Kipnis, Upfal and Weathersby 1997; MPICH's choice for
/// blocks of up to 256 bytes on 8 ranks or more, Thakur, Rabenseifner and Gropp 2005,
/// Sec. 4.5): ceil(log2 P) steps instead of the pairwise exchange's P - 1, for blocks of
/// equal size.
/// 1. Rotate: slot i of a staging buffer holds this rank's block for rank r + i (mod P).
/// 2. In step k = 1, 2, 4, ... < P, send the slots whose index has bit k set (packed) to
///    r + k and receive the same slots from r - k. A block in slot i travels the bits of i,
///    so after the last step the block that rank s wrote into slot i sits at rank s + i,
///    its destination.
/// 3. Unrotate: the block in slot i came from rank r - i.
/// Every step sends about P/2 blocks: ceil(log2 P) alpha + about (P/2) log2 P block-bytes
/// beta per rank, against (P - 1) alpha + (P - 1) block-bytes beta for the pairwise
/// exchange, so it pays for short blocks on many ranks only (`alltoall_by_size`,
/// algorithm/select.hpp). Any P. The staging buffers and every local move come from the
/// reducer (`allocate`, `copy`): host memory with the CPU reducer, device memory with a
/// device reducer on a stream-ordered transport (one small copy per block and step there).
#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>

#include "../core/collective_table.hpp"
#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../core/traffic.hpp"

namespace tcoll {

/// See the file comment.
struct bruck {
  /// Its name: its header's, and its line's in the table of algorithms (table.hpp).
  static constexpr std::string_view name = "bruck";

  /// The number of slots (of P) that step `k` (a power of two) moves: those whose index
  /// has bit k set. Equal on every rank, so the two sides of a step agree on the size.
  static constexpr std::size_t slots_moved(int ranks, int k) noexcept {
    std::size_t n = 0;
    for (int i = 1; i < ranks; ++i)
      if (i & k) ++n;
    return n;
  }

  /// The busiest rank's traffic (core/traffic.hpp) as an all-to-all of `bytes` (one rank's
  /// P blocks): ceil(lg P) full-duplex rounds, round k moving `slots_moved(P, k)` blocks.
  static constexpr rank_traffic traffic(collective, double bytes, int ranks) noexcept {
    if (ranks <= 1) return {};
    double rounds = 0, blocks = 0;
    for (int k = 1; k < ranks; k *= 2) {
      rounds += 1;
      blocks += static_cast<double>(slots_moved(ranks, k));
    }
    const double moved = blocks * bytes / ranks;
    return {rounds, rounds, moved, moved, 0.0, rounds, moved};
  }

  /// All-to-all of `block_bytes` per pair in the message space `tag`: block q of `send`
  /// goes to rank q, rank q's block for this rank lands as block q of `recv` (P blocks
  /// each). `send == recv` (in place) is allowed: every block is read before any is
  /// written. Every wait is bounded by the transport's timeout.
  template <transport Tr, reducer R>
  void exchange(Tr& t, int tag, const void* send, void* recv, std::size_t block_bytes,
                R& red) const {
    const int P = t.size(), r = t.rank();
    if (block_bytes == 0) return;
    const auto p = static_cast<std::size_t>(P);
    const auto* in = static_cast<const std::byte*>(send);
    auto* out = static_cast<std::byte*>(recv);
    const auto move = [&](std::byte* to, const std::byte* from) {
      red.copy(to, from, block_bytes);
    };
    if (P == 1) {
      if (in != out) move(out, in);
      return;
    }
    // the staging slots, then one packed buffer for each direction of a step
    const std::size_t packed_bytes = max_packed(P) * block_bytes;
    auto storage = red.template allocate<std::byte>(p * block_bytes + 2 * packed_bytes);
    std::byte* slots = storage.data();
    std::byte* outgoing = slots + p * block_bytes;
    std::byte* incoming = outgoing + packed_bytes;
    for (std::size_t i = 0; i < p; ++i)
      move(slots + i * block_bytes, in + ((r + i) % p) * block_bytes);
    for (int k = 1; k < P; k *= 2) {
      std::size_t n = 0;
      for (int i = 1; i < P; ++i)
        if (i & k) move(outgoing + n++ * block_bytes, slots + std::size_t(i) * block_bytes);
      auto rr = t.irecv((r - k + P) % P, incoming, n * block_bytes, tag);
      auto sr = isend_for_irecv(t, (r + k) % P, outgoing, n * block_bytes, tag);
      // the receive first, as in the pairwise exchange: on a transport whose receiver
      // drives the copy, waiting for the send first would wait in a cycle
      const auto until = clock::now() + t.timeout();
      t.wait(rr, until);
      t.wait(sr, until);
      n = 0;
      for (int i = 1; i < P; ++i)
        if (i & k) move(slots + std::size_t(i) * block_bytes, incoming + n++ * block_bytes);
    }
    for (std::size_t i = 0; i < p; ++i)
      move(out + ((r + p - i) % p) * block_bytes, slots + i * block_bytes);
  }

  /// The most slots any step moves (the size of a packed buffer, in blocks).
  static constexpr std::size_t max_packed(int ranks) noexcept {
    std::size_t most = 0;
    for (int k = 1; k < ranks; k *= 2) most = std::max(most, slots_moved(ranks, k));
    return most;
  }
};

} // namespace tcoll
