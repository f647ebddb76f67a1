#pragma once
/// \file
/// The table of collectives: one enum of collectives and, for each, one description (its
/// buffers and count rule, its in-place form, the size its selection rules and cost formula
/// measure, its selection variable). The algorithms, and which of them implement each
/// collective, are the table of algorithms (algorithm/table.hpp), which the algorithm
/// headers sit under. Selection strings (`parse_selection`, algorithm/select.hpp), the cost
/// formulas (`plan::collective_traffic`, plan/cost_model.hpp), the preload's wrappers and
/// selection variables, the benchmarks' `-a` names and the tests read the two, so a name or
/// a rule is written once. It is data only (no transport, no algorithm object): every layer
/// may read it.
///
/// Message spaces (tags, core/tags.hpp): every call of every collective draws one message
/// space of each transport it runs on (a pair on a two-level machine: one inside the groups,
/// one among the leaders), so collectives in flight together never share a tag.
#include <array>
#include <cstddef>
#include <string>
#include <string_view>

#include "error.hpp"

namespace tcoll {

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
};

/// The table, in the order of `collective`.
inline constexpr std::array<collective_description, all_collectives.size()> collective_table{{
    {collective::allreduce, "allreduce", "MPI_Allreduce", "TCOLL_ALLREDUCE_ALGO", true, false,
     count_rule::same, in_place_rule::same_buffer, "the vector (count elements)"},
    {collective::reduce_scatter, "reduce_scatter", "MPI_Reduce_scatter_block",
     "TCOLL_REDUCE_SCATTER_ALGO", true, false, count_rule::blocks_in, in_place_rule::none,
     "one rank's whole input (P blocks)"},
    {collective::reduce_scatterv, "reduce_scatterv", "MPI_Reduce_scatter", "", true, false,
     count_rule::per_peer, in_place_rule::none, "one rank's whole input (the blocks together)"},
    {collective::allgather, "allgather", "MPI_Allgather", "TCOLL_ALLGATHER_ALGO", false, false,
     count_rule::blocks_out, in_place_rule::own_block, "the whole output (P blocks)"},
    {collective::allgatherv, "allgatherv", "MPI_Allgatherv", "", false, false, count_rule::per_peer,
     in_place_rule::own_block, "the blocks together"},
    {collective::broadcast, "broadcast", "MPI_Bcast", "TCOLL_BCAST_ALGO", false, true,
     count_rule::same, in_place_rule::always, "the vector"},
    {collective::reduce, "reduce", "MPI_Reduce", "TCOLL_REDUCE_ALGO", true, true, count_rule::same,
     in_place_rule::none, "the vector"},
    {collective::alltoall, "alltoall", "MPI_Alltoall", "TCOLL_ALLTOALL_ALGO", false, false,
     count_rule::blocks_in_out, in_place_rule::same_buffer,
     "one rank's whole send buffer (P blocks)"},
    {collective::alltoallv, "alltoallv", "MPI_Alltoallv", "TCOLL_ALLTOALLV_ALGO", false, false,
     count_rule::per_peer, in_place_rule::same_buffer, "one rank's send blocks together"},
    {collective::gather, "gather", "MPI_Gather", "TCOLL_GATHER_ALGO", false, true,
     count_rule::blocks_out, in_place_rule::own_block, "the root's whole buffer (P blocks)"},
    {collective::gatherv, "gatherv", "MPI_Gatherv", "TCOLL_GATHERV_ALGO", false, true,
     count_rule::per_peer, in_place_rule::own_block, "the root's blocks together"},
    {collective::scatter, "scatter", "MPI_Scatter", "TCOLL_SCATTER_ALGO", false, true,
     count_rule::blocks_in, in_place_rule::own_block, "the root's whole buffer (P blocks)"},
    {collective::scatterv, "scatterv", "MPI_Scatterv", "TCOLL_SCATTERV_ALGO", false, true,
     count_rule::per_peer, in_place_rule::own_block, "the root's blocks together"},
    {collective::barrier, "barrier", "MPI_Barrier", "TCOLL_BARRIER_ALGO", false, false,
     count_rule::none, in_place_rule::no_buffer, "none"},
}};

/// The description of `c`.
constexpr const collective_description& describe(collective c) {
  return collective_table[static_cast<std::size_t>(c)];
}

/// The name of `c` (its entry point's).
constexpr std::string_view to_string(collective c) {
  return describe(c).name;
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
