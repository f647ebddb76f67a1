#pragma once
/// \file
/// Linear gather and scatter (MPI's basic linear algorithms): the root posts one receive
/// (gather) or one send (scatter) per peer, all at once, and copies its own block; every
/// other rank sends (receives) its one block. One step: alpha + (P - 1) beta n at the root,
/// which the root's link bounds; no rank but the root forwards anything, so a block of its
/// own size for every rank (gatherv, scatterv) costs nothing extra.
#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "../core/collective_table.hpp"
#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../core/traffic.hpp"

namespace tcoll {

/// One rank's block at the root of a gather or scatter: where it is and how many bytes.
struct root_block {
  void* data = nullptr;
  std::size_t bytes = 0;
};

/// See the file comment.
struct linear {
  /// Its name: its header's, and its line's in the table of algorithms (table.hpp).
  static constexpr std::string_view name = "linear";

  /// The busiest rank's traffic (core/traffic.hpp) as `c` of `bytes` (the root's P blocks,
  /// equal): gather(v), the root receives P-1 blocks and every other rank sends one;
  /// scatter(v) is its mirror image. Nothing overlaps.
  static constexpr rank_traffic traffic(collective c, double bytes, int ranks) noexcept {
    if (ranks <= 1) return {};
    const double p = ranks;
    const rank_traffic gather{1.0, p - 1, bytes / p, (p - 1) / p * bytes, 0.0, 0.0, 0.0};
    return c == collective::gather || c == collective::gatherv ? gather : gather.mirrored();
  }

  /// Gather in the message space `tag`: every rank but `root` sends `mine` (`bytes`); the
  /// root receives rank q's into `blocks[q]` (one per rank; its own block is copied from
  /// `mine` unless it is already there, by `red`). `blocks` is read at the root only.
  template <transport Tr, reducer R>
  void gather(Tr& t, int tag, int root, const void* mine, std::size_t bytes,
              std::span<const root_block> blocks, R& red) const {
    const int P = t.size(), r = t.rank();
    const auto until = clock::now() + t.timeout();
    if (r != root) {
      auto s = isend_for_irecv(t, root, mine, bytes, tag);
      t.wait(s, until);
      return;
    }
    check_blocks(blocks, P, r);
    std::vector<typename Tr::request> pending;
    pending.reserve(static_cast<std::size_t>(P));
    for (int q = 0; q < P; ++q)
      if (q != r) pending.push_back(t.irecv(q, blocks[q].data, blocks[q].bytes, tag));
    const root_block& own = blocks[static_cast<std::size_t>(r)];
    if (own.bytes && own.data != mine)
      red.copy(static_cast<std::byte*>(own.data), static_cast<const std::byte*>(mine), own.bytes);
    for (auto& p : pending) t.wait(p, until);
  }

  /// Scatter in the message space `tag`: the root sends `blocks[q]` to rank q (its own
  /// block copied into `mine` unless already there, by `red`); every other rank receives its
  /// block into `mine` (`bytes`).
  template <transport Tr, reducer R>
  void scatter(Tr& t, int tag, int root, void* mine, std::size_t bytes,
               std::span<const root_block> blocks, R& red) const {
    const int P = t.size(), r = t.rank();
    const auto until = clock::now() + t.timeout();
    if (r != root) {
      auto q = t.irecv(root, mine, bytes, tag);
      t.wait(q, until);
      return;
    }
    check_blocks(blocks, P, r);
    std::vector<typename Tr::request> pending;
    pending.reserve(static_cast<std::size_t>(P));
    for (int q = 0; q < P; ++q)
      if (q != r) pending.push_back(isend_for_irecv(t, q, blocks[q].data, blocks[q].bytes, tag));
    const root_block& own = blocks[static_cast<std::size_t>(r)];
    if (own.bytes && own.data != mine)
      red.copy(static_cast<std::byte*>(mine), static_cast<const std::byte*>(own.data), own.bytes);
    for (auto& p : pending) t.wait(p, until);
  }

private:
  static void check_blocks(std::span<const root_block> blocks, int P, int r) {
    if (static_cast<int>(blocks.size()) != P)
      throw invalid_argument("linear: " + std::to_string(blocks.size()) +
                                 " blocks at the root for a group of " + std::to_string(P) +
                                 " ranks",
                             r);
  }
};

} // namespace tcoll
