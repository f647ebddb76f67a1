#pragma once
/// \file
/// Algorithm selection by message size, by code or by an environment string in the style
/// `ring:1M-max;recursive_doubling:0-8K` (sizes in bytes with K/M/G = 2^10/2^20/2^30
/// suffixes, inclusive ranges, `max` for no upper bound, first matching rule wins): the one
/// grammar of every selection string (`TCOLL_ALLREDUCE_ALGO` and `TCOLL_ALLTOALL_ALGO` here,
/// every `TCOLL_*_ALGO` of the preload). The names are the table's (table.hpp).
#include <cctype>
#include <concepts>
#include <cstddef>
#include <cstdlib>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../core/collective_table.hpp"
#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "binomial_tree.hpp"
#include "bruck.hpp"
#include "dissemination.hpp"
#include "in_segment.hpp"
#include "multi_ring.hpp"
#include "pairwise_exchange.hpp"
#include "ring.hpp"
#include "table.hpp"

namespace tcoll {

/// One selection rule: use `algorithm` for messages of [min_bytes, max_bytes] bytes.
struct size_rule {
  algorithm_id algorithm = algorithm_id::ring;
  std::size_t min_bytes = 0;
  std::size_t max_bytes = std::numeric_limits<std::size_t>::max();
};

namespace detail {
/// Parses a size with an optional K/M/G suffix, or `max`; errors start with `context`.
inline std::size_t parse_size(std::string_view s, const std::string& context) {
  if (s == "max") return std::numeric_limits<std::size_t>::max();
  std::size_t i = 0, v = 0;
  if (s.empty() || !std::isdigit(static_cast<unsigned char>(s[0])))
    throw invalid_argument(context + ": bad size '" + std::string(s) + "'");
  for (; i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])); ++i) {
    if (v > (std::numeric_limits<std::size_t>::max() - 9) / 10)
      throw invalid_argument(context + ": size too large");
    v = v * 10 + static_cast<std::size_t>(s[i] - '0');
  }
  std::size_t mult = 1;
  if (i < s.size()) {
    const char c = static_cast<char>(std::toupper(static_cast<unsigned char>(s[i])));
    mult = c == 'K' ? 1u << 10 : c == 'M' ? 1u << 20 : c == 'G' ? 1u << 30 : 0;
    if (mult == 0 || i + 1 != s.size())
      throw invalid_argument(context + ": bad size suffix in '" + std::string(s) + "'");
  }
  if (v > std::numeric_limits<std::size_t>::max() / mult)
    throw invalid_argument(context + ": size too large");
  return v * mult;
}
} // namespace detail

/// Parses a byte count: digits with an optional binary `K`, `M` or `G` suffix ("64", "8K",
/// "256M", "1G"), as the benchmarks' `-b/-e` flags and selection strings write sizes.
/// Throws `invalid_argument` naming the text otherwise.
inline std::size_t parse_bytes(std::string_view text) {
  const std::string context = "size '" + std::string(text) + "'";
  if (text == "max") throw invalid_argument(context + ": not a number of bytes");
  return detail::parse_size(text, context);
}

/// Do the ranks of one call of `c` share its size (the table's size measure)? Not for the v
/// forms, whose ranks move sizes of their own, nor for the barrier, which has none: a choice
/// by size would differ between the ranks of one call, so their selection rules must cover
/// every size (`parse_selection`).
constexpr bool size_is_shared(collective c) {
  const count_rule counts = describe(c).counts;
  return counts != count_rule::per_peer && counts != count_rule::none;
}

/// Parses `name:lo-hi;name:lo-hi;...` for collective `c`: every name must be one a rule of
/// `c` may name (`selectable`, table.hpp), and where `c`'s ranks do not share a size
/// (`size_is_shared`) every rule must be `0-max`. Throws `invalid_argument` naming the bad
/// token.
inline std::vector<size_rule> parse_selection(std::string_view text,
                                              collective c = collective::allreduce) {
  std::vector<size_rule> rules;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const std::size_t end = std::min(text.find(';', pos), text.size());
    const std::string_view tok = text.substr(pos, end - pos);
    pos = end + 1;
    if (tok.empty()) continue;
    const auto colon = tok.find(':'), dash = tok.find('-', colon == tok.npos ? 0 : colon);
    if (colon == tok.npos || dash == tok.npos)
      throw invalid_argument("selection '" + std::string(text) + "': rule '" + std::string(tok) +
                             "' is not name:min-max");
    size_rule r;
    const std::string context = "selection '" + std::string(text) + "'";
    try {
      r.algorithm = parse_algorithm(tok.substr(0, colon), c);
    } catch (const invalid_argument& e) {
      throw invalid_argument(context + ": " + e.message());
    }
    r.min_bytes = detail::parse_size(tok.substr(colon + 1, dash - colon - 1), context);
    r.max_bytes = detail::parse_size(tok.substr(dash + 1), context);
    if (r.min_bytes > r.max_bytes)
      throw invalid_argument("selection '" + std::string(text) + "': rule '" + std::string(tok) +
                             "' has min > max");
    if (!size_is_shared(c) &&
        (r.min_bytes != 0 || r.max_bytes != std::numeric_limits<std::size_t>::max()))
      throw invalid_argument("selection '" + std::string(text) + "': rule '" + std::string(tok) +
                             "': the ranks of one " + std::string(describe(c).name) +
                             " move sizes of their own (or none), so a rule must cover every "
                             "size (" +
                             std::string(to_string(r.algorithm)) + ":0-max)");
    rules.push_back(r);
  }
  return rules;
}

/// The first of `rules` covering `bytes` (what a selection string chooses), or null.
inline const size_rule* first_rule_covering(std::span<const size_rule> rules, std::size_t bytes) {
  for (const size_rule& r : rules)
    if (bytes >= r.min_bytes && bytes <= r.max_bytes) return &r;
  return nullptr;
}

/// The rules of `c`'s selection variable (`describe(c).selection_variable`) in the
/// environment, parsed once per process (empty where it is unset or `c` has none); a bad
/// string throws `invalid_argument` naming the variable, at every call.
template <collective C>
const std::vector<size_rule>& selection_from_env() {
  static const auto parsed = []() -> std::pair<std::vector<size_rule>, std::string> {
    const std::string var(describe(C).selection_variable);
    const char* text = var.empty() ? nullptr : std::getenv(var.c_str());
    if (!text) return {};
    try {
      return {parse_selection(text, C), {}};
    } catch (const invalid_argument& e) {
      return {{}, var + ": " + e.message()};
    }
  }();
  if (!parsed.second.empty()) throw invalid_argument(parsed.second);
  return parsed.first;
}

/// Picks the algorithm by message size. Rules are tried in order; sizes no rule covers
/// use the built-in choice (recursive doubling up to `small_bytes`, ring above).
/// A default-constructed `automatic` reads `TCOLL_ALLREDUCE_ALGO` once per process.
/// Candidates: ring, recursive_doubling, recursive_halving_doubling, binomial_tree,
/// passthrough (transports with a vendor allreduce) and multi_ring (`multi_ring_knobs`).
/// multi_ring is chosen only by a rule: the built-in choice never picks it, since no
/// measurement here shows it ahead of the ring on one link (its gain is on full-duplex
/// links with a reduction that overlaps the transfers, MXNET-MPI Sec. 6.3.2).
/// The built-in allreduce choice over shared memory between processes (`shm_transport`),
/// measured in docs/benchmarks.md ("Shared-memory transport", "The in-segment allreduce" and
/// "Under the preload over shared memory"): the in-segment allreduce up to
/// `in_segment_up_to_bytes` on 2 ranks and `in_segment_up_to_bytes_many` on more, then on
/// 2 ranks recursive doubling up to `doubling_up_to_bytes` and recursive halving-doubling
/// above (ring is the slowest algorithm over shared memory there: it copies every byte
/// through the segment twice as often as it reduces), on more ranks ring up to
/// `ring_up_to_bytes` and recursive halving-doubling above.
struct shared_memory_choice {
  std::size_t in_segment_up_to_bytes = 16 * 1024;
  std::size_t in_segment_up_to_bytes_many = 1024 * 1024;
  std::size_t doubling_up_to_bytes = 16 * 1024;
  std::size_t ring_up_to_bytes = 1024 * 1024;
  algorithm_id choose(std::size_t bytes, int ranks) const {
    if (bytes <= (ranks > 2 ? in_segment_up_to_bytes_many : in_segment_up_to_bytes))
      return algorithm_id::in_segment;
    if (bytes <= doubling_up_to_bytes) return algorithm_id::recursive_doubling;
    if (ranks > 2 && bytes <= ring_up_to_bytes) return algorithm_id::ring;
    return algorithm_id::recursive_halving_doubling;
  }
  /// Broadcast and reduce (the vector): the collective area up to these on 2 ranks and up to
  /// the `_many` ones on more, the binomial tree above (whose messages go single-copy there).
  /// Allgather (the whole output) and reduce-scatter (one rank's whole input): the area up to
  /// these, the ring above. Measured under the MPI preload against Open MPI 4.1.4 on the 2-core
  /// VM (docs/benchmarks.md, "The other in-segment collectives"; 4 ranks oversubscribe it):
  /// the area's broadcast and reduce win to 32 KiB on 2 ranks and to 64 KiB on 4, its
  /// reduce-scatter at every size, its allgather to 64 KiB on 4 ranks (on 2, Open MPI's own
  /// is as fast).
  std::size_t broadcast_in_segment_up_to_bytes = 32 * 1024;
  std::size_t broadcast_in_segment_up_to_bytes_many = 64 * 1024;
  /// The broadcast on 2 ranks that each have a CPU of their own (`ranks_have_cpus`, see
  /// `shm_transport::ranks_have_cpus`): the area moves it in pieces there (one rank copies
  /// a piece out while the root copies the next in, `in_segment::broadcast_piece_bytes`),
  /// which was 1.1-2.4x Open MPI 4.1.4's `MPI_Bcast` and 1.1-1.9x the binomial tree's
  /// single copy from 16 KiB to 4 MiB with cold buffers, and hot up to 512 KiB; hot from
  /// 1 MiB 0.75-1.2x in one job of two (docs/benchmarks.md, "The broadcast in pieces"):
  /// the area up to this.
  std::size_t broadcast_in_segment_up_to_bytes_own_cpus = std::numeric_limits<std::size_t>::max();
  std::size_t reduce_in_segment_up_to_bytes = 32 * 1024;
  std::size_t reduce_in_segment_up_to_bytes_many = 64 * 1024;
  /// The reduce on 2 ranks that each have a CPU of their own: the area moves it in pieces
  /// there (the root folds a piece while the other copies the next in,
  /// `in_segment::reduce_piece_bytes`), which was 1.2-2.0x Open MPI 4.1.4's `MPI_Reduce`
  /// and 1.2-2.0x the binomial tree's single copy from 16 KiB to 4 MiB, hot and cold
  /// buffers, in the test VM's fast state (in its slow state, under IMB, 0.5-1.25x Open
  /// MPI's: docs/benchmarks.md, "The reduce in pieces"): the area up to this.
  std::size_t reduce_in_segment_up_to_bytes_own_cpus = std::numeric_limits<std::size_t>::max();
  std::size_t allgather_in_segment_up_to_bytes = 64 * 1024;
  std::size_t reduce_scatter_in_segment_up_to_bytes = std::numeric_limits<std::size_t>::max();
  /// `ranks_have_cpus` (broadcast, reduce): every rank of the node may have a CPU of its own
  /// (the same answer on every rank: `shm_transport::ranks_have_cpus(ranks)`).
  algorithm_id choose_broadcast(std::size_t bytes, int ranks, bool ranks_have_cpus = false) const {
    return area_or_tree(bytes, ranks, ranks_have_cpus, broadcast_in_segment_up_to_bytes,
                        broadcast_in_segment_up_to_bytes_own_cpus,
                        broadcast_in_segment_up_to_bytes_many);
  }
  algorithm_id choose_reduce(std::size_t bytes, int ranks, bool ranks_have_cpus = false) const {
    return area_or_tree(bytes, ranks, ranks_have_cpus, reduce_in_segment_up_to_bytes,
                        reduce_in_segment_up_to_bytes_own_cpus, reduce_in_segment_up_to_bytes_many);
  }
  algorithm_id choose_allgather(std::size_t bytes) const {
    return bytes <= allgather_in_segment_up_to_bytes ? algorithm_id::in_segment
                                                     : algorithm_id::ring;
  }
  algorithm_id choose_reduce_scatter(std::size_t bytes) const {
    return bytes <= reduce_scatter_in_segment_up_to_bytes ? algorithm_id::in_segment
                                                          : algorithm_id::ring;
  }

private:
  /// Broadcast and reduce: the area up to the bound for `ranks` (2 sharing CPUs, 2 with a
  /// CPU each, more), the binomial tree above.
  static algorithm_id area_or_tree(std::size_t bytes, int ranks, bool ranks_have_cpus,
                                   std::size_t two, std::size_t two_own_cpus, std::size_t many) {
    const std::size_t up_to = ranks > 2 ? many : ranks_have_cpus ? two_own_cpus : two;
    return bytes <= up_to ? algorithm_id::in_segment : algorithm_id::binomial_tree;
  }
};

struct automatic {
  static constexpr std::string_view name = "automatic";
  std::vector<size_rule> rules = env_rules();
  std::size_t small_bytes = 32 * 1024;
  /// The same bound on a zero-copy transport (threads), where a whole-buffer exchange costs
  /// one read of the peer's memory and recursive doubling wins up to about 256 KiB.
  std::size_t small_bytes_zero_copy = 256 * 1024;
  /// On a transport with a vendor allreduce (MPI, NCCL), messages up to this size go to it:
  /// at a few hundred nanoseconds per call, layering point-to-point messages over the same
  /// library cannot beat the library's own collective (see docs/benchmarks.md).
  std::size_t native_below_bytes = 16 * 1024;
  ring ring_knobs{};
  /// The rings of a multi_ring rule.
  multi_ring multi_ring_knobs{};
  /// The knobs of an in_segment choice or rule.
  in_segment in_segment_knobs{};
  /// The choice on a shared-memory transport (`transport_is_shared_memory`), where no rule
  /// of `rules` covers the size.
  shared_memory_choice shared_memory{};

  /// The algorithm for a message of `bytes` (commutative ops may use any; others only
  /// the order-keeping ones, so a ring or multi_ring choice becomes recursive
  /// halving-doubling). `has_native`: the transport offers `passthrough`.
  /// `zero_copy`: the transport reads peers' memory directly.
  algorithm_id choose(std::size_t bytes, bool commutative, bool has_native = false,
                      bool zero_copy = false) const {
    const std::size_t small = zero_copy ? small_bytes_zero_copy : small_bytes;
    algorithm_id a = has_native && bytes <= native_below_bytes ? algorithm_id::passthrough
                     : bytes <= small                          ? algorithm_id::recursive_doubling
                                                               : algorithm_id::ring;
    return adjust(ruled(bytes, a), bytes, small, commutative);
  }

  /// The choice on a shared-memory transport of `ranks` ranks: the first rule of `rules`
  /// covering `bytes`, else `shared_memory` (non-commutative ops as in `choose`).
  algorithm_id choose_shared_memory(std::size_t bytes, int ranks, bool commutative) const {
    return adjust(ruled(bytes, shared_memory.choose(bytes, ranks)), bytes, small_bytes,
                  commutative);
  }

  /// The choice for transport `Tr` of `ranks` ranks: `choose_shared_memory` on a
  /// shared-memory transport, `choose` elsewhere. What `allreduce` and prepared collectives
  /// run for `automatic` (through `visit_algorithm`, algorithm/visit.hpp).
  template <class Tr>
  algorithm_id choose_for(std::size_t bytes, int ranks, bool commutative, bool has_native) const {
    if constexpr (transport_is_shared_memory<Tr>())
      return choose_shared_memory(bytes, ranks, commutative);
    else
      return choose(bytes, commutative, has_native, transport_is_zero_copy<Tr>());
  }

  /// The algorithm of the first rule covering `bytes`, else `built_in`. A `hierarchical`
  /// rule is passed over: `automatic` runs on a single transport, which has no second level
  /// (a communicator that is a hierarchy runs its own algorithm, and the preload builds one
  /// for the sizes such a rule covers).
  algorithm_id ruled(std::size_t bytes, algorithm_id built_in) const {
    for (const auto& r : rules)
      if (bytes >= r.min_bytes && bytes <= r.max_bytes && r.algorithm != algorithm_id::hierarchical)
        return r.algorithm;
    return built_in;
  }

  /// `a`, or an order-keeping algorithm in its place for a non-commutative op.
  static algorithm_id adjust(algorithm_id a, std::size_t bytes, std::size_t small,
                             bool commutative) {
    if (!commutative && (a == algorithm_id::ring || a == algorithm_id::passthrough ||
                         a == algorithm_id::multi_ring))
      a = bytes <= small ? algorithm_id::recursive_doubling
                         : algorithm_id::recursive_halving_doubling;
    return a;
  }

  static const std::vector<size_rule>& env_rules() {
    static const std::vector<size_rule> parsed = [] {
      const char* env = std::getenv("TCOLL_ALLREDUCE_ALGO");
      return env ? parse_selection(env) : std::vector<size_rule>{};
    }();
    return parsed;
  }
};

/// The all-to-all's choice by size, what `alltoall` runs by default: the first rule of
/// `rules` covering the call (`TCOLL_ALLTOALL_ALGO`, read once per process; sizes are one
/// rank's whole send buffer, the table's size measure), else on a transport with a
/// collective area the area (`in_segment_knobs`) up to `in_segment_up_to_bytes` (2 ranks)
/// or `in_segment_up_to_bytes_many`, else Bruck (`bruck_knobs`) for blocks of at most
/// `bruck_max_block_bytes` on at least `bruck_min_ranks` ranks and the pairwise exchange
/// (`exchange`) otherwise. The area's bounds: where it beat the exchange on the 2-core VM
/// with warm buffers (on 2 processes 1.2-1.5x up to 8 KiB, 1.7-2.2x at 16 KiB and 1.1-1.4x
/// at 32 KiB in 8 of 9 launches of 2026-12-07, even at 64 KiB, where the exchange's single
/// copy wins above; 1.3-2.2x up to 64 KiB on 4, which oversubscribe it). Bruck's:
/// MPICH's are 256 bytes and 8 ranks (Thakur, Rabenseifner and Gropp 2005); the defaults
/// here are what this project measured
/// (docs/benchmarks.md, "Bruck's all-to-all"): against the pairwise exchange, which posts
/// every short block at once, Bruck lost at 4 and 8 ranks at every size and won at 16
/// ranks up to 128-byte blocks (threads and shared memory). Rules naming `passthrough` or
/// `hierarchical` are passed over: a single transport has neither a vendor all-to-all nor
/// a second level.
struct alltoall_by_size {
  static constexpr std::string_view name = "automatic";
  std::vector<size_rule> rules = env_rules();
  std::size_t bruck_max_block_bytes = 128;
  int bruck_min_ranks = 16;
  /// On a transport with a collective area (`shm_transport`): the area (`in_segment`) up to
  /// these, one rank's whole send buffer, on 2 ranks and on more (docs/benchmarks.md, "The
  /// in-segment all-to-all"). A call the area may not run is chosen again without it.
  std::size_t in_segment_up_to_bytes = 32 * 1024;
  std::size_t in_segment_up_to_bytes_many = 64 * 1024;
  pairwise_exchange exchange{};
  bruck bruck_knobs{};
  in_segment in_segment_knobs{};

  /// `pairwise_exchange`, `bruck` or (`segment_area`: the transport has a collective area)
  /// `in_segment`, for blocks of `block_bytes` on `ranks` ranks.
  algorithm_id choose(std::size_t block_bytes, int ranks, bool segment_area = false) const {
    const std::size_t bytes = block_bytes * static_cast<std::size_t>(ranks);
    for (const auto& r : rules)
      if (bytes >= r.min_bytes && bytes <= r.max_bytes &&
          (r.algorithm == algorithm_id::bruck || r.algorithm == algorithm_id::pairwise_exchange ||
           r.algorithm == algorithm_id::in_segment))
        return r.algorithm;
    if (segment_area && bytes <= (ranks > 2 ? in_segment_up_to_bytes_many : in_segment_up_to_bytes))
      return algorithm_id::in_segment;
    return ranks >= bruck_min_ranks && block_bytes <= bruck_max_block_bytes
               ? algorithm_id::bruck
               : algorithm_id::pairwise_exchange;
  }

  static const std::vector<size_rule>& env_rules() {
    static const std::vector<size_rule> parsed = [] {
      const char* env = std::getenv("TCOLL_ALLTOALL_ALGO");
      return env ? parse_selection(env, collective::alltoall) : std::vector<size_rule>{};
    }();
    return parsed;
  }
};

/// Is `A` an algorithm object of collective `C`: one the table lists for `C`
/// (`implements`, table.hpp)? The entry points' algorithm concepts below
/// are this, so an algorithm added to a collective's line is accepted where the line says.
template <class A, collective C>
concept algorithm_of = listed_algorithm<A> && implements(C, algorithm_id_of<A>);

/// The algorithms `broadcast` takes on a transport: the table's (the binomial tree, or the
/// collective area: `in_segment`, which runs the tree where the transport has none). A
/// two-level machine runs its own through the group leaders, and the algorithm asked for
/// among the leaders (via_leaders.hpp).
template <class A>
concept broadcast_algorithm = algorithm_of<A, collective::broadcast>;

/// The algorithms `allgather` and `reduce_scatter` take on a transport: those the table lists
/// for both (the ring, or the collective area: `in_segment`, which runs the ring where the
/// transport has none). A two-level machine runs its own whatever is asked.
template <class A>
concept block_algorithm =
    algorithm_of<A, collective::allgather> && algorithm_of<A, collective::reduce_scatter>;

/// The algorithms `reduce` takes on a transport: the table's (the binomial tree, or the
/// collective area: `in_segment`, which runs the tree where the transport has none).
template <class A>
concept reduce_algorithm = algorithm_of<A, collective::reduce>;

/// The algorithms `barrier` takes on a transport: the table's (dissemination, or the
/// collective area: `in_segment`, one flag per rank; dissemination where the transport has
/// none).
template <class A>
concept barrier_algorithm = algorithm_of<A, collective::barrier>;

/// The algorithms `alltoall` takes: the table's (the pairwise exchange, Bruck), or the choice
/// between them by size.
template <class A>
concept alltoall_algorithm =
    algorithm_of<A, collective::alltoall> || std::same_as<A, alltoall_by_size>;

} // namespace tcoll
