#pragma once
/// \file
/// All-to-all on a two-level machine whose groups all have the same size, through the peers:
/// every rank exchanges with its peers, the ranks of its own local index in the other groups
/// (the two-dimensional all-to-all of MVAPICH2 and of Tutel's "2DH" all-to-all). With G
/// groups of g ranks, world rank W(c, k) the k-th of group c:
///
///  1. inside the group, local rank l sends local rank k the G blocks it has for the ranks of
///     local index k, W(0, k) .. W(G-1, k): one message a block from
///     `separate_blocks_from_bytes` on, else packed into one message per pair;
///  2. across groups, l sends its peer in group c the g blocks that came to it for W(c, l),
///     one from each rank of its group, in one message, and receives group c's g blocks for
///     itself, which land at W(c, 0) .. W(c, g-1).
///
/// Every rank sends at once on both levels: the bytes that cross the network are the flat
/// exchange's, in G - 1 messages per rank instead of (G - 1) g, each g times longer; inside a
/// group every block moves once more (P - P/G blocks a rank). Through the leaders
/// (via_leaders.hpp) one rank per group moves the whole group's data, g times a rank's, and
/// copies it twice more. The machine runs this form where its groups allow it
/// (`hierarchical_machine_options`). Blocks are staged in host scratch (P blocks; two more of
/// P for packed blocks, one more where a group's world ranks are not consecutive), so it
/// takes host memory and a host reducer (checked at compile time).
///
/// The machine `M` (hierarchical.hpp) provides `intra()`, `inter()`, `rank()`,
/// `group_map(what)`, `shape().inter_world_ranks` (rank i of `inter()` is in group i unless
/// these name its world rank) and `in_group(f)` / `across_groups(f)`.
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "pairwise_exchange.hpp"

namespace tcoll {

/// See the file comment.
struct via_peers {
  static constexpr std::string_view name = "via_peers";

  /// Can `map`'s machine run this form: do all groups have the same size?
  template <class Map>
  static bool fits(const Map& map) {
    for (const auto& members : map.groups)
      if (members.size() != map.groups.front().size()) return false;
    return true;
  }

  /// All-to-all of `count` elements per pair (host memory). `sendbuf` may be `recvbuf` (the
  /// in-place form): it is read whole before anything lands. Throws `invalid_argument`
  /// where the groups differ in size (`fits`).
  template <class M, class T, reducer R>
  void alltoall(M& m, std::pair<int, int> tags, const T* sendbuf, T* recvbuf, std::size_t count,
                const pairwise_exchange& exchange, R& red) const {
    static_assert(detail::reducer_uses_host_memory<R>(),
                  "tcoll: all-to-all on a hierarchical machine moves host memory: pass a host "
                  "reducer (cpu_reducer)");
    const auto& map = m.group_map("alltoall");
    if (!fits(map))
      throw invalid_argument(
          "alltoall: the route via_peers needs groups of one size; group 0 has " +
              std::to_string(map.groups.front().size()) + " ranks and another " +
              "does not (use via_leaders)",
          m.rank());
    const std::size_t G = map.groups.size(), g = map.groups.front().size(), P = G * g;
    const std::size_t l = static_cast<std::size_t>(m.intra().rank());
    auto world = [&](std::size_t c, std::size_t k) {
      return static_cast<std::size_t>(map.groups[c][k]);
    };
    auto& inter = *m.inter(); // every local rank has one: its index is below the group size
    if (static_cast<std::size_t>(inter.size()) != G)
      throw invalid_argument("alltoall: the transport across groups of local rank " +
                                 std::to_string(l) + " has " + std::to_string(inter.size()) +
                                 " ranks for " + std::to_string(G) + " groups",
                             m.rank());
    // staged[c][j]: the block local rank j has for W(c, l), what goes to group c's peer
    const auto staged = uninitialized<T>(P * count);
    const std::size_t a = static_cast<std::size_t>(map.group_of[std::size_t(m.rank())]);
    // one message a block, out of place: this group's blocks for this rank land where they
    // belong at once (in place, the send buffer still holds blocks that are not sent yet)
    const bool separate = count * sizeof(T) >= separate_blocks_from_bytes;
    const bool own_group_landed = separate && sendbuf != recvbuf;
    m.in_group([&] {
      if (separate)
        exchange_blocks(m.intra(), tags.first, sendbuf, staged.get(),
                        own_group_landed ? recvbuf : nullptr, a, count, G, world, red);
      else
        exchange_packed(m.intra(), tags.first, sendbuf, staged.get(), count, G, world, exchange,
                        red);
    });
    // group c's blocks for this rank land at W(c, 0) .. W(c, g-1): straight in the receive
    // buffer where those are consecutive world ranks, else in `landed` first
    const auto& inter_world = m.shape().inter_world_ranks;
    const std::size_t bytes = g * count * sizeof(T);
    std::vector<exchange_block> blocks(G);
    std::vector<bool> apart(G, false);
    for (std::size_t c = 0; c < G; ++c)
      for (std::size_t j = 1; j < g; ++j)
        apart[c] = apart[c] || (world(c, j) != world(c, 0) + j && !(c == a && own_group_landed));
    const auto landed =
        uninitialized<T>(std::count(apart.begin(), apart.end(), true) ? P * count : 0);
    for (std::size_t i = 0; i < G; ++i) {
      const std::size_t c =
          inter_world.empty() ? i
                              : static_cast<std::size_t>(map.group_of[std::size_t(inter_world[i])]);
      T* from = staged.get() + c * g * count;
      T* at = c == a && own_group_landed ? from // landed in the first exchange: no copy
              : apart[c]                 ? landed.get() + c * g * count
                                         : recvbuf + world(c, 0) * count;
      blocks[i] = {from, bytes, at, bytes};
    }
    m.across_groups([&] {
      exchange.exchange(inter, tags.second, std::span<const exchange_block>(blocks), red);
    });
    for (std::size_t c = 0; c < G; ++c)
      if (apart[c])
        for (std::size_t j = 0; j < g; ++j)
          copy_block(recvbuf + world(c, j) * count, landed.get() + (c * g + j) * count, count);
  }

  /// Blocks of at least this many bytes go to the other ranks of the group one message
  /// each, straight from the send buffer to where the exchange across groups sends them
  /// from; shorter ones are packed into one message per pair first (and rearranged after),
  /// which trades two copies for G - 1 fewer messages a pair. 4 KiB: see
  /// docs/hierarchical.md, "All-to-all through the peers".
  std::size_t separate_blocks_from_bytes = 4096;

private:
  template <class T>
  static void copy_block(T* dst, const T* src, std::size_t count) {
    if (count) std::memcpy(dst, src, count * sizeof(T));
  }
  /// Host scratch that every byte of is written before it is read: no zeroing pass.
  template <class T>
  static std::unique_ptr<T[]> uninitialized(std::size_t n) {
    return std::unique_ptr<T[]>(n ? new T[n] : nullptr);
  }

  /// Inside the group, one message a block: step s sends local rank l + s its G blocks
  /// (those for W(c, l + s)) and receives local rank l - s's G blocks for this rank's
  /// index, all posted at once, which land as staged[c][l - s]; with `recvbuf`, those of
  /// this rank's own group `a` land in it at once, at W(a, l - s).
  template <transport Tr, class T, class World, reducer R>
  static void exchange_blocks(Tr& t, int tag, const T* sendbuf, T* staged, T* recvbuf,
                              std::size_t a, std::size_t count, std::size_t G, const World& world,
                              R& red) {
    const std::size_t g = static_cast<std::size_t>(t.size()),
                      l = static_cast<std::size_t>(t.rank());
    auto landing = [&](std::size_t c, std::size_t j) {
      return recvbuf && c == a ? recvbuf + world(c, j) * count : staged + (c * g + j) * count;
    };
    for (std::size_t c = 0; c < G; ++c)
      if (count) red.copy(landing(c, l), sendbuf + world(c, l) * count, count);
    std::vector<typename Tr::request> recvs(G), sends(G);
    for (std::size_t s = 1; s < g; ++s) {
      const std::size_t to = (l + s) % g, from = (l + g - s) % g;
      for (std::size_t c = 0; c < G; ++c)
        recvs[c] = t.irecv(int(from), landing(c, from), count * sizeof(T), tag);
      for (std::size_t c = 0; c < G; ++c)
        sends[c] =
            isend_for_irecv(t, int(to), sendbuf + world(c, to) * count, count * sizeof(T), tag);
      const auto until = clock::now() + t.timeout();
      for (auto& q : recvs) t.wait(q, until);
      for (auto& q : sends) t.wait(q, until);
    }
  }

  /// Inside the group, one message a pair: the G blocks for W(0, k) .. W(G-1, k) packed for
  /// local rank k, exchanged, then rearranged so that staged[c][j] is local rank j's block
  /// for W(c, l).
  template <transport Tr, class T, class World, reducer R>
  static void exchange_packed(Tr& t, int tag, const T* sendbuf, T* staged, std::size_t count,
                              std::size_t G, const World& world, const pairwise_exchange& exchange,
                              R& red) {
    const std::size_t g = static_cast<std::size_t>(t.size()), P = G * g;
    const auto packed = uninitialized<T>(P * count), landed = uninitialized<T>(P * count);
    for (std::size_t k = 0; k < g; ++k)
      for (std::size_t c = 0; c < G; ++c)
        copy_block(packed.get() + (k * G + c) * count, sendbuf + world(c, k) * count, count);
    exchange.exchange_equal(t, tag, packed.get(), landed.get(), G * count * sizeof(T), red);
    for (std::size_t c = 0; c < G; ++c)
      for (std::size_t j = 0; j < g; ++j)
        copy_block(staged + (c * g + j) * count, landed.get() + (j * G + c) * count, count);
  }
};

} // namespace tcoll
