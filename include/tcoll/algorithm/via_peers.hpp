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
/// group's move inside the group; from `each_block_across_from_bytes` on every block also
/// crosses alone, as soon as it is in, so the network starts with the first group. Shorter
/// blocks are packed into one message per pair, and the exchange across groups follows the
/// whole exchange inside.
///
/// `alltoallv` (blocks of any size per pair) goes group by group, every block one message,
/// with the counts ahead of the data: the ranks of a group first exchange their counts for
/// each other's peers, and every rank sends each peer the g counts of the blocks it forwards
/// before them, which the peer checks against its own (`alltoallv`'s comment).
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
#include <cstdint>
#include <cstring>
#include <functional>
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
    const auto [G, g, l, a, world, peer] = seat_of(m, "alltoall");
    const std::size_t P = G * g;
    auto& inter = *m.inter();
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
               arriving, count * sizeof(T) >= each_block_across_from_bytes, red);
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

  /// All-to-all with a block of its own size for every pair (host memory; counts and
  /// displacements in elements, already checked on this rank), through the peers as
  /// `alltoall` goes group by group, every block one message. The counts travel: first the
  /// ranks of a group exchange their counts for each other's peers (G per pair), then every
  /// rank sends each peer, ahead of the data, the g counts of the blocks it forwards, which
  /// the peer checks against its `recv_counts` (a mismatch throws `invalid_argument` naming
  /// the rank that sent the block) before it posts the data's receive. A peer's g blocks
  /// cross one message each, as they come in, where the largest of them is at least
  /// `each_block_across_from_bytes` (both sides judge the same counts). Empty blocks send
  /// nothing. In place (`sendbuf == recvbuf`, send and receive layouts of their own) nothing
  /// lands in the buffer before every block has left it.
  template <class M, class T, reducer R>
  void alltoallv(M& m, std::pair<int, int> tags, const T* sendbuf,
                 std::span<const std::size_t> send_counts, std::span<const std::size_t> send_displs,
                 T* recvbuf, std::span<const std::size_t> recv_counts,
                 std::span<const std::size_t> recv_displs, const pairwise_exchange& exchange,
                 R& red) const {
    static_assert(detail::reducer_uses_host_memory<R>(),
                  "tcoll: all-to-all on a hierarchical machine moves host memory: pass a host "
                  "reducer (cpu_reducer)");
    using count_t = std::uint64_t;
    const auto [G, g, l, own, world, peer] = seat_of(m, "alltoallv");
    auto& intra = m.intra();
    auto& inter = *m.inter();
    const bool in_place = sendbuf == recvbuf;
    // the k-th block to leave for a peer (and to come from it): local rank l - k's
    const auto kth = [&](std::size_t k) { return (l + g - k) % g; };
    // 1: counts inside the group: in[j * G + c], what local rank j sends W(c, l)
    std::vector<count_t> out(g * G), in(g * G);
    for (std::size_t k = 0; k < g; ++k)
      for (std::size_t c = 0; c < G; ++c) out[k * G + c] = send_counts[world(c, k)];
    m.in_group([&] {
      exchange.exchange_equal(intra, tags.first, out.data(), in.data(), G * sizeof(count_t), red);
    });
    for (std::size_t j = 0; j < g; ++j) // the own group's blocks come straight from their senders
      check_count(m, in[j * G + own], recv_counts, world(own, j));
    // forwarded[c]: the g blocks for W(c, l) in local-rank order, at start[c * (g + 1) + j]
    std::vector<std::size_t> start(G * (g + 1), 0);
    std::vector<count_t> headers(G * g);
    std::size_t forwarded_total = 0;
    for (std::size_t c = 0; c < G; ++c) {
      for (std::size_t j = 0; j < g; ++j) {
        start[c * (g + 1) + j] = forwarded_total;
        headers[c * g + j] = in[j * G + c];
        if (c != own || in_place) forwarded_total += in[j * G + c];
      }
      start[c * (g + 1) + g] = forwarded_total;
    }
    // group c's blocks for this rank come from its peer in local-rank order: straight to
    // the receive buffer where they lie there one after another in that order (out of
    // place), else to arrived[c] first, at arrived_start[c]
    std::vector<std::size_t> arrived_start(G + 1, 0);
    std::vector<bool> direct_across(G, false);
    for (std::size_t c = 0; c < G; ++c) {
      std::size_t n = 0;
      bool in_order = !in_place && c != own;
      for (std::size_t j = 0; j < g && c != own; ++j) {
        const std::size_t x = world(c, j);
        in_order = in_order && (j == 0 || recv_displs[x] == recv_displs[world(c, j - 1)] +
                                                                recv_counts[world(c, j - 1)]);
        n += recv_counts[x];
      }
      direct_across[c] = in_order;
      arrived_start[c + 1] = arrived_start[c] + (in_order ? 0 : n);
    }
    const auto forwarded = uninitialized<T>(forwarded_total);
    const auto arrived = uninitialized<T>(arrived_start[G]);
    auto arriving = [&](std::size_t c) {
      return direct_across[c] ? recvbuf + recv_displs[world(c, 0)]
                              : arrived.get() + arrived_start[c];
    };
    std::vector<count_t> header_in(G * g);
    using intra_request = typename std::remove_reference_t<decltype(intra)>::request;
    using inter_request = typename std::remove_reference_t<decltype(inter)>::request;
    std::vector<intra_request> recvs, sends;
    // every receive across groups is waited for before any send: a transport that copies a
    // long message in its receiver's wait (threads) completes a send once its receiver waits
    std::vector<inter_request> header_recvs(G), across_recvs, across_sends;
    recvs.reserve(g);
    sends.reserve(g);
    across_recvs.reserve(G);
    across_sends.reserve(2 * G);
    // 2: the headers leave at once, for the peers to post their receives in time
    m.across_groups([&] {
      for (std::size_t c = 0; c < G; ++c) {
        if (c == own) continue;
        header_recvs[c] =
            inter.irecv(peer[c], header_in.data() + c * g, g * sizeof(count_t), tags.second);
        across_sends.push_back(
            inter.isend(peer[c], headers.data() + c * g, g * sizeof(count_t), tags.second));
      }
    });
    // 3: group by group (the own group last), the blocks for W(c, *) inside the group, then
    // what came in for W(c, l) to group c's peer
    for (std::size_t step = 1; step <= G; ++step) {
      const std::size_t c = (own + step) % G;
      const bool direct = c == own && !in_place;
      auto landing = [&](std::size_t j) {
        return direct ? recvbuf + recv_displs[world(c, j)]
                      : forwarded.get() + start[c * (g + 1) + j];
      };
      // recvs[k - 1]: the receive of local rank l - k's block (none where it is empty)
      m.in_group([&] {
        const std::size_t mine = send_counts[world(c, l)];
        if (mine) red.copy(landing(l), sendbuf + send_displs[world(c, l)], mine);
        recvs.clear();
        sends.clear();
        for (std::size_t k = 1; k < g; ++k) {
          const std::size_t from = kth(k);
          const count_t n = in[from * G + c];
          recvs.push_back(n ? intra.irecv(int(from), landing(from), n * sizeof(T), tags.first)
                            : intra_request{});
        }
        for (std::size_t s = 1; s < g; ++s) {
          const std::size_t to = (l + s) % g;
          if (const std::size_t n = send_counts[world(c, to)])
            sends.push_back(isend_for_irecv(intra, int(to), sendbuf + send_displs[world(c, to)],
                                            n * sizeof(T), tags.first));
        }
      });
      const bool forward = c != own;
      // group c's blocks cross one message each where the largest is long enough: this rank
      // judges the counts it forwards, the peer the same counts as it receives them (its
      // header, checked), so both agree
      auto largest_of = [&](const std::vector<count_t>& counts) {
        return *std::max_element(counts.begin() + std::ptrdiff_t(c * g),
                                 counts.begin() + std::ptrdiff_t(c * g + g)) *
               sizeof(T);
      };
      const bool each_block = forward && largest_of(headers) >= each_block_across_from_bytes;
      auto send_across = [&](std::size_t j) {
        if (const count_t n = headers[c * g + j])
          m.across_groups([&] {
            across_sends.push_back(
                isend_for_irecv(inter, peer[c], landing(j), n * sizeof(T), tags.second));
          });
      };
      if (each_block) send_across(l);
      const auto until = clock::now() + intra.timeout();
      for (std::size_t k = 1; k < g; ++k) {
        if (in[kth(k) * G + c]) m.in_group([&] { intra.wait(recvs[k - 1], until); });
        if (each_block) send_across(kth(k));
      }
      m.in_group([&] {
        for (auto& q : sends) intra.wait(q, until);
      });
      if (!forward) break;
      // what group c's peer sends: its counts first, checked before any data receive
      m.across_groups([&] { inter.wait(header_recvs[c], clock::now() + inter.timeout()); });
      for (std::size_t j = 0; j < g; ++j)
        check_count(m, header_in[c * g + j], recv_counts, world(c, j));
      if (largest_of(header_in) >= each_block_across_from_bytes)
        // its own block first, then the others in its receive order
        m.across_groups([&] {
          for (std::size_t k = 0; k < g; ++k) {
            const std::size_t j = kth(k), x = world(c, j);
            std::size_t at = 0;
            for (std::size_t i = 0; i < j; ++i) at += recv_counts[world(c, i)];
            if (recv_counts[x])
              across_recvs.push_back(
                  inter.irecv(peer[c], arriving(c) + at, recv_counts[x] * sizeof(T), tags.second));
          }
        });
      else
        m.across_groups([&] {
          std::size_t coming = 0;
          for (std::size_t j = 0; j < g; ++j) coming += recv_counts[world(c, j)];
          if (coming)
            across_recvs.push_back(
                inter.irecv(peer[c], arriving(c), coming * sizeof(T), tags.second));
        });
      if (!each_block)
        m.across_groups([&] {
          const std::size_t first = start[c * (g + 1)], n = start[c * (g + 1) + g] - first;
          if (n)
            across_sends.push_back(isend_for_irecv(inter, peer[c], forwarded.get() + first,
                                                   n * sizeof(T), tags.second));
        });
    }
    m.across_groups([&] {
      const auto until = clock::now() + inter.timeout();
      for (auto& q : across_recvs) inter.wait(q, until);
      for (auto& q : across_sends) inter.wait(q, until);
    });
    for (std::size_t c = 0; c < G; ++c) {
      if (c == own ? !in_place : direct_across[c]) continue;
      const T* from = c == own ? forwarded.get() + start[c * (g + 1)] : arriving(c);
      for (std::size_t j = 0; j < g; ++j) {
        const std::size_t x = world(c, j), n = recv_counts[x];
        copy_block(recvbuf + recv_displs[x], from, n);
        from += n;
      }
    }
  }

  /// Blocks of at least this many bytes go to the other ranks of the group one message
  /// each, straight from the send buffer to where the exchange across groups sends them
  /// from, group by group under the messages across groups (see the file comment); shorter
  /// ones are packed into one message per pair first (and rearranged after), which trades
  /// two copies and the overlap for G - 1 fewer messages a pair. 4 KiB: see
  /// docs/hierarchical.md, "All-to-all through the peers".
  std::size_t separate_blocks_from_bytes = 4096;
  /// Blocks of at least this many bytes (and at least `separate_blocks_from_bytes`) also go
  /// across groups one message each, each as soon as it has come in inside the group, so
  /// that the network starts at once instead of after the first group's exchange inside the
  /// group; shorter ones go as one message of g blocks per peer (g - 1 fewer latencies).
  /// See docs/hierarchical.md, "All-to-all through the peers".
  std::size_t each_block_across_from_bytes = 256 * 1024;

private:
  /// Where this rank sits: G groups of g ranks, its local rank l and group a, the world
  /// rank of the k-th of group c, and peer[c], the rank of group c on the transport across
  /// groups (rank c unless `inter_world_ranks` says otherwise).
  struct seat {
    std::size_t G, g, l, a;
    std::function<std::size_t(std::size_t, std::size_t)> world;
    std::vector<int> peer;
  };
  template <class M>
  static seat seat_of(M& m, const char* what) {
    const auto& map = m.group_map(what);
    if (!fits(map))
      throw invalid_argument(std::string(what) + ": the route via_peers needs groups of one " +
                                 "size; group 0 has " + std::to_string(map.groups.front().size()) +
                                 " ranks and another does not (use via_leaders)",
                             m.rank());
    const std::size_t G = map.groups.size(), g = map.groups.front().size();
    const std::size_t l = static_cast<std::size_t>(m.intra().rank());
    const std::size_t a = static_cast<std::size_t>(map.group_of[std::size_t(m.rank())]);
    auto& inter = *m.inter(); // every local rank has one: its index is below the group size
    if (static_cast<std::size_t>(inter.size()) != G)
      throw invalid_argument(std::string(what) + ": the transport across groups of local rank " +
                                 std::to_string(l) + " has " + std::to_string(inter.size()) +
                                 " ranks for " + std::to_string(G) + " groups",
                             m.rank());
    std::vector<int> peer(G);
    const auto& inter_world = m.shape().inter_world_ranks;
    for (std::size_t i = 0; i < G; ++i)
      peer[inter_world.empty() ? i : std::size_t(map.group_of[std::size_t(inter_world[i])])] =
          int(i);
    return {G,
            g,
            l,
            a,
            [&map](std::size_t c, std::size_t k) { return std::size_t(map.groups[c][k]); },
            std::move(peer)};
  }

  /// A count that reached this rank for the block from world rank `x`, against its own.
  template <class M>
  static void check_count(M& m, std::uint64_t arrived, std::span<const std::size_t> recv_counts,
                          std::size_t x) {
    if (arrived != recv_counts[x])
      throw invalid_argument("alltoallv: rank " + std::to_string(x) + " sends this rank " +
                                 std::to_string(arrived) + " elements but recv_counts[" +
                                 std::to_string(x) + "] is " + std::to_string(recv_counts[x]),
                             m.rank(), static_cast<int>(x));
  }

  template <class T>
  static void copy_block(T* dst, const T* src, std::size_t count) {
    if (count) std::memcpy(dst, src, count * sizeof(T));
  }
  /// Host scratch that every byte of is written before it is read: no zeroing pass.
  template <class T>
  static std::unique_ptr<T[]> uninitialized(std::size_t n) {
    return std::unique_ptr<T[]>(n ? new T[n] : nullptr);
  }

  /// One message a block inside the group, group by group: for each group c in turn (this
  /// rank's own group last), the ranks of this group exchange their blocks for W(c, *), all
  /// posted at once, which land as staged[c][j]; then, while the next group's blocks move
  /// inside the group, staged[c] goes to group c's peer and its blocks for this rank come
  /// back to `arriving(c)`. With `each_block_across`, staged[c] leaves as g messages, each
  /// as soon as its block is in: this rank's own at once, then those of local ranks l - 1,
  /// l - 2, ... in the order their receives complete, which the peer (of the same local
  /// index l) receives in; so the network starts with the first group's exchange inside the
  /// group instead of after it. The own group's blocks need no second exchange: with
  /// `recvbuf` (out of place) they land in it at once, at W(a, j); in place they wait in
  /// staged[a] (the send buffer still holds blocks that are not sent yet). Every rank of a
  /// group takes the groups in the same order, so the messages of a pair match in posting
  /// order.
  template <class M, class T, class World, class Arriving, reducer R>
  static void by_group(M& m, std::pair<int, int> tags, const T* sendbuf, T* staged, T* recvbuf,
                       std::size_t count, std::size_t own, const std::vector<int>& peer,
                       const World& world, const Arriving& arriving, bool each_block_across,
                       R& red) {
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
    across_recvs.reserve(each_block_across ? G * g : G);
    across_sends.reserve(each_block_across ? G * g : G);
    // the k-th block to leave for a peer (and to come from it): local rank l - k's
    const auto kth = [&](std::size_t k) { return (l + g - k) % g; };
    for (std::size_t step = 1; step <= G; ++step) {
      const std::size_t c = (own + step) % G; // the own group last
      const bool direct = c == own && recvbuf;
      const bool forward = c != own;
      auto landing = [&](std::size_t j) {
        return direct ? recvbuf + world(c, j) * count : staged + (c * g + j) * count;
      };
      auto send_across = [&](std::size_t j) {
        m.across_groups([&] {
          across_sends.push_back(isend_for_irecv(inter, peer[c], landing(j), bytes, tags.second));
        });
      };
      m.in_group([&] {
        if (count) red.copy(landing(l), sendbuf + world(c, l) * count, count);
        recvs.clear();
        sends.clear();
        for (std::size_t k = 1; k < g; ++k)
          recvs.push_back(intra.irecv(int(kth(k)), landing(kth(k)), bytes, tags.first));
        for (std::size_t s = 1; s < g; ++s) {
          const std::size_t to = (l + s) % g;
          sends.push_back(
              isend_for_irecv(intra, int(to), sendbuf + world(c, to) * count, bytes, tags.first));
        }
      });
      if (forward && each_block_across) {
        m.across_groups([&] {
          for (std::size_t k = 0; k < g; ++k)
            across_recvs.push_back(
                inter.irecv(peer[c], arriving(c) + kth(k) * count, bytes, tags.second));
        });
        send_across(l);
      }
      const auto until = clock::now() + intra.timeout();
      for (std::size_t k = 1; k < g; ++k) {
        m.in_group([&] { intra.wait(recvs[k - 1], until); });
        if (forward && each_block_across) send_across(kth(k));
      }
      m.in_group([&] {
        for (auto& q : sends) intra.wait(q, until);
      });
      if (!forward) break;
      if (!each_block_across)
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
