#pragma once
/// \file
/// The table of collectives: one enum of algorithms, one enum of collectives and, for each
/// collective, one description (its buffers and count rule, its in-place form, the
/// algorithms that implement it, the size its selection rules and cost formula measure,
/// its selection variable). Selection strings (`parse_selection`, algorithm/select.hpp),
/// the cost formulas (`plan::collective_traffic`, plan/cost_model.hpp), the preload's
/// wrappers and selection variables, the benchmarks' `-a` names and the tests read it, so a
/// name or a rule is written once. It is data only (no transport, no algorithm object):
/// every layer may read it.
///
/// Message spaces (tags, core/tags.hpp): every call of every collective draws one message
/// space of each transport it runs on (a pair on a two-level machine: one inside the groups,
/// one among the leaders), so collectives in flight together never share a tag.
#include <array>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>

#include "error.hpp"

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
};

/// The two forms of the hierarchical allreduce (`algorithm_id::hierarchical` as an allreduce,
/// algorithm/hierarchical_allreduce.hpp): the knob that picks one, for the algorithm
/// (`hierarchical_options::form`) and for its cost formula (`plan::allreduce_us`) alike.
enum class hierarchical_form {
  leader,  ///< reduce to the group leader, allreduce among leaders, broadcast (GradientFlow)
  sharded, ///< reduce-scatter in the group, allreduce each shard across groups, allgather
};

/// The name of the form ("leader", "sharded"); benchmarks print the hierarchical allreduce
/// as "hierarchical_" followed by it (`plan::allreduce_name`).
constexpr std::string_view to_string(hierarchical_form f) {
  return f == hierarchical_form::leader ? "leader" : "sharded";
}

/// One line per algorithm: its id and its name in selection strings, benchmarks and docs
/// (its header's name), in the order of `algorithm_id`.
struct algorithm_line {
  algorithm_id id;
  std::string_view name;
};

inline constexpr algorithm_line algorithm_table[] = {
    {algorithm_id::ring, "ring"},
    {algorithm_id::recursive_doubling, "recursive_doubling"},
    {algorithm_id::recursive_halving_doubling, "recursive_halving_doubling"},
    {algorithm_id::binomial_tree, "binomial_tree"},
    {algorithm_id::passthrough, "passthrough"},
    {algorithm_id::multi_ring, "multi_ring"},
    {algorithm_id::hierarchical, "hierarchical"},
    {algorithm_id::pairwise_exchange, "pairwise_exchange"},
    {algorithm_id::linear, "linear"},
    {algorithm_id::dissemination, "dissemination"},
    {algorithm_id::bruck, "bruck"},
    {algorithm_id::in_segment, "in_segment"},
    {algorithm_id::scatter_allgather, "scatter_allgather"},
};

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

/// The collectives, by the names of their entry points (collectives.hpp).
enum class collective {
  allreduce,
  reduce_scatter,  ///< MPI_Reduce_scatter_block: equal blocks
  reduce_scatterv, ///< MPI_Reduce_scatter: a block of its own size per rank
  allgather,
  allgatherv, ///< a block of its own size per rank
  broadcast,
  reduce,
  alltoall,
  alltoallv,
  gather,
  gatherv,
  scatter,
  scatterv,
  barrier,
};

/// Every value of `collective`, in order.
inline constexpr std::array<collective, 14> all_collectives{
    collective::allreduce, collective::reduce_scatter, collective::reduce_scatterv,
    collective::allgather, collective::allgatherv,     collective::broadcast,
    collective::reduce,    collective::alltoall,       collective::alltoallv,
    collective::gather,    collective::gatherv,        collective::scatter,
    collective::scatterv,  collective::barrier};

/// How a collective's buffers relate to its `count` argument (P ranks).
enum class count_rule {
  same,          ///< `count` in, `count` out (allreduce; broadcast's and reduce's one vector)
  blocks_in,     ///< P blocks of `count` in, one block out (reduce_scatter; scatter's root)
  blocks_out,    ///< one block of `count` in, P blocks out (allgather; gather's root)
  blocks_in_out, ///< P blocks of `count` in and out (alltoall)
  per_peer,      ///< a count and a displacement for every peer (the v forms)
  none,          ///< no data (barrier)
};

/// The in-place form of a collective: which call is one.
enum class in_place_rule {
  none,        ///< input and output may not overlap (reduce_scatter, reduce)
  same_buffer, ///< `sendbuf == recvbuf` (allreduce, alltoall, alltoallv)
  own_block,   ///< the rank's own block of the P-block buffer (allgather; gather and
               ///< scatter at the root)
  always,      ///< one buffer only (broadcast)
  no_buffer,   ///< no data (barrier)
};

/// One line of the table of collectives.
struct collective_description {
  collective id;
  std::string_view name;     ///< the entry point's name (collectives.hpp)
  std::string_view mpi_name; ///< MPI's name of the same collective
  /// The environment variable of its selection string (`automatic` reads allreduce's; the
  /// preload reads every one); empty where none exists.
  std::string_view selection_variable;
  bool reduces; ///< takes an op
  bool rooted;  ///< takes a root
  count_rule counts;
  in_place_rule in_place;
  /// What the sizes of selection rules, cost formulas and benchmarks of this collective
  /// count (bytes).
  std::string_view size_measure;
  /// The algorithms that implement it. But for allreduce (which chooses by size on a
  /// transport, `automatic`) the first is what its entry point runs on a transport.
  std::span<const algorithm_id> algorithms;
};

namespace detail {
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
    algorithm_id::scatter_allgather};
inline constexpr algorithm_id alltoall_algorithms[] = {
    algorithm_id::pairwise_exchange, algorithm_id::bruck, algorithm_id::in_segment,
    algorithm_id::hierarchical};
inline constexpr algorithm_id exchange_algorithms[] = {algorithm_id::pairwise_exchange,
                                                       algorithm_id::hierarchical};
inline constexpr algorithm_id linear_algorithms[] = {algorithm_id::linear,
                                                     algorithm_id::hierarchical};
inline constexpr algorithm_id barrier_algorithms[] = {
    algorithm_id::dissemination, algorithm_id::in_segment, algorithm_id::hierarchical};
} // namespace detail

/// The table, in the order of `collective`.
inline constexpr std::array<collective_description, all_collectives.size()> collective_table{{
    {collective::allreduce, "allreduce", "MPI_Allreduce", "TCOLL_ALLREDUCE_ALGO", true, false,
     count_rule::same, in_place_rule::same_buffer, "the vector (count elements)",
     detail::allreduce_algorithms},
    {collective::reduce_scatter, "reduce_scatter", "MPI_Reduce_scatter_block",
     "TCOLL_REDUCE_SCATTER_ALGO", true, false, count_rule::blocks_in, in_place_rule::none,
     "one rank's whole input (P blocks)", detail::block_algorithms},
    {collective::reduce_scatterv, "reduce_scatterv", "MPI_Reduce_scatter", "", true, false,
     count_rule::per_peer, in_place_rule::none, "one rank's whole input (the blocks together)",
     detail::block_ring_algorithms},
    {collective::allgather, "allgather", "MPI_Allgather", "TCOLL_ALLGATHER_ALGO", false, false,
     count_rule::blocks_out, in_place_rule::own_block, "the whole output (P blocks)",
     detail::block_algorithms},
    {collective::allgatherv, "allgatherv", "MPI_Allgatherv", "", false, false, count_rule::per_peer,
     in_place_rule::own_block, "the blocks together", detail::block_ring_algorithms},
    {collective::broadcast, "broadcast", "MPI_Bcast", "TCOLL_BCAST_ALGO", false, true,
     count_rule::same, in_place_rule::always, "the vector", detail::broadcast_algorithms},
    {collective::reduce, "reduce", "MPI_Reduce", "TCOLL_REDUCE_ALGO", true, true, count_rule::same,
     in_place_rule::none, "the vector", detail::reduce_algorithms},
    {collective::alltoall, "alltoall", "MPI_Alltoall", "TCOLL_ALLTOALL_ALGO", false, false,
     count_rule::blocks_in_out, in_place_rule::same_buffer,
     "one rank's whole send buffer (P blocks)", detail::alltoall_algorithms},
    {collective::alltoallv, "alltoallv", "MPI_Alltoallv", "TCOLL_ALLTOALLV_ALGO", false, false,
     count_rule::per_peer, in_place_rule::same_buffer, "one rank's send blocks together",
     detail::exchange_algorithms},
    {collective::gather, "gather", "MPI_Gather", "TCOLL_GATHER_ALGO", false, true,
     count_rule::blocks_out, in_place_rule::own_block, "the root's whole buffer (P blocks)",
     detail::linear_algorithms},
    {collective::gatherv, "gatherv", "MPI_Gatherv", "TCOLL_GATHERV_ALGO", false, true,
     count_rule::per_peer, in_place_rule::own_block, "the root's blocks together",
     detail::linear_algorithms},
    {collective::scatter, "scatter", "MPI_Scatter", "TCOLL_SCATTER_ALGO", false, true,
     count_rule::blocks_in, in_place_rule::own_block, "the root's whole buffer (P blocks)",
     detail::linear_algorithms},
    {collective::scatterv, "scatterv", "MPI_Scatterv", "TCOLL_SCATTERV_ALGO", false, true,
     count_rule::per_peer, in_place_rule::own_block, "the root's blocks together",
     detail::linear_algorithms},
    {collective::barrier, "barrier", "MPI_Barrier", "TCOLL_BARRIER_ALGO", false, false,
     count_rule::none, in_place_rule::no_buffer, "none", detail::barrier_algorithms},
}};

/// The description of `c`.
constexpr const collective_description& describe(collective c) {
  return collective_table[static_cast<std::size_t>(c)];
}

/// The name of `c` (its entry point's).
constexpr std::string_view to_string(collective c) {
  return describe(c).name;
}

/// Does `a` implement `c`?
constexpr bool implements(collective c, algorithm_id a) {
  for (algorithm_id x : describe(c).algorithms)
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

/// Parses a collective's name (`to_string`'s); throws `invalid_argument` naming it otherwise.
inline collective parse_collective(std::string_view name) {
  for (const collective_description& d : collective_table)
    if (d.name == name) return d.id;
  std::string names;
  for (const collective_description& d : collective_table)
    names += (names.empty() ? "" : ", ") + std::string(d.name);
  throw invalid_argument("unknown collective '" + std::string(name) + "' (" + names + ")");
}

} // namespace tcoll
