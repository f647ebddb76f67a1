#pragma once
/// \file
/// All-to-all on a two-level machine whose groups all have the same size, through the peers:
/// every rank exchanges with its peers, the ranks of its own local index in the other groups
/// (the two-dimensional hierarchical, "2DH", all-to-all of Tutel's mixture-of-experts). With G
/// groups of g ranks, world rank W(c, k) the k-th of group c:
///
///  1. inside the group, local rank l sends local rank k the G blocks it has for the ranks of
///     local index k, W(0, k) .. W(G-1, k);
///  2. across groups, l sends its peer in group c the g blocks that came to it for W(c, l),
///     one from each rank of its group, in one message, and receives group c's g blocks for
///     itself, which land at W(c, 0) .. W(c, g-1).
///
/// Blocks from `separate_blocks_from_bytes` on go inside the group one message each, group
/// by group (the own group last, its blocks straight to the receive buffer out of place), and
/// group c's message across groups leaves as soon as its blocks are in, while the next
/// group's move inside the group. Shorter blocks are packed into one message per pair, and
/// the exchange across groups follows the whole exchange inside.
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
#include <type_traits>
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
    const std::size_t a = static_cast<std::size_t>(map.group_of[std::size_t(m.rank())]);
    auto world = [&](std::size_t c, std::size_t k) {
      return static_cast<std::size_t>(map.groups[c][k]);
    };
    auto& inter = *m.inter(); // every local rank has one: its index is below the group size
    if (static_cast<std::size_t>(inter.size()) != G)
      throw invalid_argument("alltoall: the transport across groups of local rank " +
                                 std::to_string(l) + " has " + std::to_string(inter.size()) +
                                 " ranks for " + std::to_string(G) + " groups",
                             m.rank());
    // peer[c]: the rank of group c on the transport across groups
    std::vector<int> peer(G);
    const auto& inter_world = m.shape().inter_world_ranks;
    for (std::size_t i = 0; i < G; ++i)
      peer[inter_world.empty() ? i : std::size_t(map.group_of[std::size_t(inter_world[i])])] =
          int(i);
    // staged[c][j]: the block local rank j has for W(c, l), what goes to group c's peer
    const auto staged = uninitialized<T>(P * count);
    // group c's blocks for this rank land at W(c, 0) .. W(c, g-1): straight in the receive
    // buffer where those are consecutive world ranks, else in `landed` first
    std::vector<bool> apart(G, false);
    for (std::size_t c = 0; c < G; ++c)
      for (std::size_t j = 1; j < g; ++j) apart[c] = apart[c] || world(c, j) != world(c, 0) + j;
    const auto landed =
        uninitialized<T>(std::count(apart.begin(), apart.end(), true) ? P * count : 0);
    auto arriving = [&](std::size_t c) {
      return apart[c] ? landed.get() + c * g * count : recvbuf + world(c, 0) * count;
    };
    auto unpack = [&](std::size_t c, const T* from) {
      for (std::size_t j = 0; j < g; ++j)
        copy_block(recvbuf + world(c, j) * count, from + j * count, count);
    };
    const bool in_place = sendbuf == recvbuf;
    if (count * sizeof(T) >= separate_blocks_from_bytes) {
      by_group(m, tags, sendbuf, staged.get(), in_place ? nullptr : recvbuf, count, a, peer, world,
               arriving, red);
      for (std::size_t c = 0; c < G; ++c)
        if (c == a ? in_place : apart[c])
          unpack(c, (c == a ? staged.get() : landed.get()) + c * g * count);
      return;
    }
    m.in_group([&] {
      exchange_packed(m.intra(), tags.first, sendbuf, staged.get(), count, G, world, exchange, red);
    });
    const std::size_t bytes = g * count * sizeof(T);
    std::vector<exchange_block> blocks(G);
    for (std::size_t c = 0; c < G; ++c)
      blocks[std::size_t(peer[c])] = {staged.get() + c * g * count, bytes, arriving(c), bytes};
    m.across_groups([&] {
      exchange.exchange(inter, tags.second, std::span<const exchange_block>(blocks), red);
    });
    for (std::size_t c = 0; c < G; ++c)
      if (apart[c]) unpack(c, landed.get() + c * g * count);
  }

  /// Blocks of at least this many bytes go to the other ranks of the group one message
  /// each, straight from the send buffer to where the exchange across groups sends them
  /// from, group by group under the messages across groups (see the file comment); shorter
  /// ones are packed into one message per pair first (and rearranged after), which trades
  /// two copies and the overlap for G - 1 fewer messages a pair. 4 KiB: see
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

  /// One message a block, group by group: for each group c in turn (this rank's own group
  /// last), the ranks of this group exchange their blocks for W(c, *), all posted at once,
  /// which land as staged[c][j]; then, while the next group's blocks move inside the group,
  /// staged[c] goes to group c's peer and its blocks for this rank come back to
  /// `arriving(c)`. The own group's blocks need no second exchange: with `recvbuf` (out of
  /// place) they land in it at once, at W(a, j); in place they wait in staged[a] (the send
  /// buffer still holds blocks that are not sent yet). Every rank of a group takes the groups
  /// in the same order, so the messages of a pair match in posting order.
  template <class M, class T, class World, class Arriving, reducer R>
  static void by_group(M& m, std::pair<int, int> tags, const T* sendbuf, T* staged, T* recvbuf,
                       std::size_t count, std::size_t own, const std::vector<int>& peer,
                       const World& world, const Arriving& arriving, R& red) {
    auto& intra = m.intra();
    auto& inter = *m.inter();
    const std::size_t G = peer.size(), g = static_cast<std::size_t>(intra.size());
    const std::size_t l = static_cast<std::size_t>(intra.rank());
    const std::size_t bytes = count * sizeof(T);
    using intra_request = typename std::remove_reference_t<decltype(intra)>::request;
    using inter_request = typename std::remove_reference_t<decltype(inter)>::request;
    std::vector<intra_request> recvs, sends;
    std::vector<inter_request> across_recvs, across_sends;
    recvs.reserve(g);
    sends.reserve(g);
    across_recvs.reserve(G);
    across_sends.reserve(G);
    for (std::size_t step = 1; step <= G; ++step) {
      const std::size_t c = (own + step) % G; // the own group last
      const bool direct = c == own && recvbuf;
      auto landing = [&](std::size_t j) {
        return direct ? recvbuf + world(c, j) * count : staged + (c * g + j) * count;
      };
      m.in_group([&] {
        if (count) red.copy(landing(l), sendbuf + world(c, l) * count, count);
        recvs.clear();
        sends.clear();
        for (std::size_t s = 1; s < g; ++s) {
          const std::size_t from = (l + g - s) % g;
          recvs.push_back(intra.irecv(int(from), landing(from), bytes, tags.first));
        }
        for (std::size_t s = 1; s < g; ++s) {
          const std::size_t to = (l + s) % g;
          sends.push_back(
              isend_for_irecv(intra, int(to), sendbuf + world(c, to) * count, bytes, tags.first));
        }
        const auto until = clock::now() + intra.timeout();
        for (auto& q : recvs) intra.wait(q, until);
        for (auto& q : sends) intra.wait(q, until);
      });
      if (c == own) break;
      m.across_groups([&] {
        across_recvs.push_back(inter.irecv(peer[c], arriving(c), g * bytes, tags.second));
        across_sends.push_back(
            isend_for_irecv(inter, peer[c], staged + c * g * count, g * bytes, tags.second));
      });
    }
    m.across_groups([&] {
      const auto until = clock::now() + inter.timeout();
      for (auto& q : across_recvs) inter.wait(q, until);
      for (auto& q : across_sends) inter.wait(q, until);
    });
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
