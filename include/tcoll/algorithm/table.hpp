#pragma once
/// \file
/// The table of algorithms: one enum of algorithms, one line per algorithm (its id and its
/// object, whose `name` is its header's name and its name in selection strings, benchmarks
/// and test cases), for each collective the algorithms that implement it, and the list of
/// objects that the one dispatch (`visit_algorithm`, visit.hpp) and the cost formulas
/// (`plan::collective_traffic`, plan/cost_model.hpp) look an id up in. With the table of
/// collectives (core/collective_table.hpp: the collectives, their buffers, counts, in-place
/// forms and selection variables) it is the one description every entry point, selection
/// string, benchmark, test and integration reads.
///
/// A new algorithm of an existing collective is its header (the object, with its `name`,
/// its steps and its `traffic` formula), its lines here (the include, the enum value, the
/// table line, the object in `detail::algorithm_objects`, the collectives' lists it joins)
/// and a test case where the shared bodies do not reach it already. The algorithm headers
/// need only the table of collectives, so this file includes them all and nothing includes
/// it from below.
#include <array>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include "../core/collective_table.hpp"
#include "../core/error.hpp"
#include "binomial_tree.hpp"
#include "bruck.hpp"
#include "chain.hpp"
#include "dissemination.hpp"
#include "in_segment.hpp"
#include "linear.hpp"
#include "multi_ring.hpp"
#include "pairwise_exchange.hpp"
#include "passthrough.hpp"
#include "recursive_doubling.hpp"
#include "recursive_halving_doubling.hpp"
#include "ring.hpp"
#include "scatter_allgather.hpp"

namespace tcoll {

/// Every algorithm tcoll implements, by the name of its header (algorithm/<name>.hpp) and of
/// selection strings, benchmarks and test cases. The first six values keep the numbers they
/// had when this enum listed the allreduce algorithms only.
enum class algorithm_id {
  ring,
  recursive_doubling,
  recursive_halving_doubling,
  binomial_tree,
  passthrough, ///< the communicator's own (vendor) collective: MPI's, NCCL's
  multi_ring,  ///< K rings over K parts (automatic::multi_ring_knobs)
  /// The two-level machine (`hierarchical<Intra, Inter>`): its allreduce (leader or
  /// sharded, algorithm/hierarchical_allreduce.hpp) and every other collective through the
  /// group leaders (algorithm/via_leaders.hpp). A communicator that is a hierarchy runs it;
  /// on a single transport there is no second level, and a selection rule naming it is
  /// passed over (`automatic`). The preload builds the machine from an MPI communicator for
  /// the sizes such a rule covers.
  hierarchical,
  pairwise_exchange, ///< all-to-all: step s sends to r + s, receives from r - s
  linear,            ///< gather and scatter: the root exchanges with every rank directly
  dissemination,     ///< barrier: ceil(log2 P) rounds, round k signals r + 2^k
  bruck,             ///< all-to-all of equal blocks in ceil(log2 P) steps (short blocks)
  /// allreduce and broadcast of the processes of one node through their shared segment's
  /// collective area (no messages; recursive doubling or the binomial tree on a transport
  /// without one)
  in_segment,
  scatter_allgather, ///< broadcast: binomial scatter of P pieces, then a ring allgather
  chain,             ///< broadcast: segments down a chain of ranks, pipelined
};

/// One line per algorithm: its id and its name in selection strings, benchmarks and docs
/// (its header's name, which its object states), in the order of `algorithm_id`.
struct algorithm_line {
  algorithm_id id;
  std::string_view name;
};

inline constexpr algorithm_line algorithm_table[] = {
    {algorithm_id::ring, ring::name},
    {algorithm_id::recursive_doubling, recursive_doubling::name},
    {algorithm_id::recursive_halving_doubling, recursive_halving_doubling::name},
    {algorithm_id::binomial_tree, binomial_tree::name},
    {algorithm_id::passthrough, passthrough::name},
    {algorithm_id::multi_ring, multi_ring::name},
    {algorithm_id::hierarchical, "hierarchical"}, // a communicator, not an object
    {algorithm_id::pairwise_exchange, pairwise_exchange::name},
    {algorithm_id::linear, linear::name},
    {algorithm_id::dissemination, dissemination::name},
    {algorithm_id::bruck, bruck::name},
    {algorithm_id::in_segment, in_segment::name},
    {algorithm_id::scatter_allgather, scatter_allgather::name},
    {algorithm_id::chain, chain::name},
};

namespace detail {
template <class... A>
struct algorithm_list {};

/// Every algorithm object (`hierarchical` is a communicator, `hierarchical<Intra, Inter>`,
/// not an object a transport runs). An object's id is its line's (`algorithm_id_of`).
using algorithm_objects =
    algorithm_list<ring, recursive_doubling, recursive_halving_doubling, binomial_tree, passthrough,
                   multi_ring, pairwise_exchange, linear, dissemination, bruck, in_segment,
                   scatter_allgather, chain>;

// The collectives' lists. But for allreduce (which chooses by size on a transport,
// `automatic`) the first is what its entry point runs on a transport.
inline constexpr algorithm_id allreduce_algorithms[] = {algorithm_id::ring,
                                                        algorithm_id::recursive_doubling,
                                                        algorithm_id::recursive_halving_doubling,
                                                        algorithm_id::binomial_tree,
                                                        algorithm_id::passthrough,
                                                        algorithm_id::multi_ring,
                                                        algorithm_id::hierarchical,
                                                        algorithm_id::in_segment};
inline constexpr algorithm_id block_ring_algorithms[] = {algorithm_id::ring,
                                                         algorithm_id::hierarchical};
inline constexpr algorithm_id block_algorithms[] = {algorithm_id::ring, algorithm_id::in_segment,
                                                    algorithm_id::hierarchical};
inline constexpr algorithm_id reduce_algorithms[] = {
    algorithm_id::binomial_tree, algorithm_id::in_segment, algorithm_id::hierarchical};
inline constexpr algorithm_id broadcast_algorithms[] = {
    algorithm_id::binomial_tree, algorithm_id::in_segment, algorithm_id::hierarchical,
    algorithm_id::scatter_allgather, algorithm_id::chain};
inline constexpr algorithm_id alltoall_algorithms[] = {
    algorithm_id::pairwise_exchange, algorithm_id::bruck, algorithm_id::in_segment,
    algorithm_id::hierarchical};
inline constexpr algorithm_id exchange_algorithms[] = {algorithm_id::pairwise_exchange,
                                                       algorithm_id::hierarchical};
inline constexpr algorithm_id linear_algorithms[] = {algorithm_id::linear,
                                                     algorithm_id::hierarchical};
inline constexpr algorithm_id barrier_algorithms[] = {
    algorithm_id::dissemination, algorithm_id::in_segment, algorithm_id::hierarchical};

struct collective_algorithms_line {
  collective id;
  std::span<const algorithm_id> algorithms;
};

/// Each collective's list, in the order of `collective`.
inline constexpr std::array<collective_algorithms_line, all_collectives.size()>
    collective_algorithms{{
        {collective::allreduce, allreduce_algorithms},
        {collective::reduce_scatter, block_algorithms},
        {collective::reduce_scatterv, block_ring_algorithms},
        {collective::allgather, block_algorithms},
        {collective::allgatherv, block_ring_algorithms},
        {collective::broadcast, broadcast_algorithms},
        {collective::reduce, reduce_algorithms},
        {collective::alltoall, alltoall_algorithms},
        {collective::alltoallv, exchange_algorithms},
        {collective::gather, linear_algorithms},
        {collective::gatherv, linear_algorithms},
        {collective::scatter, linear_algorithms},
        {collective::scatterv, linear_algorithms},
        {collective::barrier, barrier_algorithms},
    }};
static_assert(
    [] {
      for (std::size_t i = 0; i < all_collectives.size(); ++i)
        if (collective_algorithms[i].id != all_collectives[i]) return false;
      return true;
    }(),
    "tcoll: collective_algorithms lists every collective once, in the enum's order");
} // namespace detail

/// Every value of `algorithm_id`, in order.
inline constexpr auto all_algorithm_ids = [] {
  std::array<algorithm_id, std::size(algorithm_table)> ids{};
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = algorithm_table[i].id;
  return ids;
}();

static_assert(
    [] {
      for (std::size_t i = 0; i < all_algorithm_ids.size(); ++i)
        if (static_cast<std::size_t>(all_algorithm_ids[i]) != i) return false;
      return true;
    }(),
    "tcoll: algorithm_table lists every algorithm_id once, in the enum's order");

/// The name of `a` in selection strings, benchmarks and docs (its header's name).
constexpr std::string_view to_string(algorithm_id a) {
  const auto i = static_cast<std::size_t>(a);
  return i < std::size(algorithm_table) ? algorithm_table[i].name : "?";
}

/// The algorithms that implement `c`. But for allreduce (which chooses by size on a
/// transport, `automatic`) the first is what its entry point runs on a transport.
constexpr std::span<const algorithm_id> algorithms_of(collective c) {
  return detail::collective_algorithms[static_cast<std::size_t>(c)].algorithms;
}

/// Does `a` implement `c`?
constexpr bool implements(collective c, algorithm_id a) {
  for (algorithm_id x : algorithms_of(c))
    if (x == a) return true;
  return false;
}

/// May a selection rule of `c` name `a`? Its algorithms, and `passthrough` for every
/// collective: the vendor's own collective, where the communicator has one (the preload
/// hands such a call to MPI).
constexpr bool selectable(collective c, algorithm_id a) {
  return a == algorithm_id::passthrough || implements(c, a);
}

/// The names a selection rule of `c` accepts, comma-separated (for error messages).
inline std::string selectable_names(collective c) {
  std::string names;
  for (algorithm_id a : all_algorithm_ids)
    if (selectable(c, a)) names += (names.empty() ? "" : ", ") + std::string(to_string(a));
  return names;
}

/// Parses an algorithm name (`to_string`'s); throws `invalid_argument` naming it otherwise.
inline algorithm_id parse_algorithm(std::string_view name) {
  for (algorithm_id a : all_algorithm_ids)
    if (to_string(a) == name) return a;
  std::string names;
  for (algorithm_id a : all_algorithm_ids)
    names += (names.empty() ? "" : ", ") + std::string(to_string(a));
  throw invalid_argument("unknown algorithm '" + std::string(name) + "' (" + names + ")");
}

/// Parses the name of an algorithm a selection rule of `c` may name (`selectable`); throws
/// `invalid_argument` naming it and listing the accepted names otherwise.
inline algorithm_id parse_algorithm(std::string_view name, collective c) {
  for (algorithm_id a : all_algorithm_ids)
    if (to_string(a) == name && selectable(c, a)) return a;
  throw invalid_argument("unknown algorithm '" + std::string(name) + "' for " +
                         std::string(to_string(c)) + " (" + selectable_names(c) + ")");
}

namespace detail {
template <class A, class... Objects>
constexpr bool listed_in(algorithm_list<Objects...>) {
  return (std::is_same_v<A, Objects> || ...);
}
} // namespace detail

/// Is `A` one of the table's algorithm objects (`detail::algorithm_objects`)?
template <class A>
concept listed_algorithm = detail::listed_in<A>(detail::algorithm_objects{});

/// The id of algorithm object `A`: the line whose name is its `name`.
template <listed_algorithm A>
inline constexpr algorithm_id algorithm_id_of = [] {
  for (const algorithm_line& l : algorithm_table)
    if (l.name == A::name) return l.id;
  return algorithm_id::hierarchical; // unreachable: the check below
}();

static_assert(
    []<class... A>(detail::algorithm_list<A...>) {
      return ((algorithm_id_of<A> != algorithm_id::hierarchical) && ...);
    }(detail::algorithm_objects{}),
    "tcoll: every algorithm object has a line of its own name in algorithm_table");

} // namespace tcoll
