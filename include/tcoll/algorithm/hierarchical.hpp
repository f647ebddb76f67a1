#pragma once
/// \file
/// `hierarchical<Intra, Inter>`: two transports composed into one two-level machine, a
/// communicator (communicator.hpp) every collective runs on. `Intra` joins the ranks of one
/// group (the devices or threads of a node: fast links), `Inter` joins groups (the
/// network): rank l of every group talks to rank l of the others, for l below the smallest
/// group size. The machine draws the message spaces of a collective on both levels and names
/// errors in world ranks; its algorithms are in their own headers: the allreduce in
/// hierarchical_allreduce.hpp (leader and sharded forms), all-to-all of equal groups in
/// via_peers.hpp (every rank with its peers in the other groups), every other collective in
/// via_leaders.hpp (through the group leaders).
#include <algorithm>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../core/ops.hpp"
#include "../core/scalar_type.hpp"
#include "../detail/collective_scope.hpp"
#include "binomial_tree.hpp"
#include "dissemination.hpp"
#include "hierarchical_allreduce.hpp"
#include "linear.hpp"
#include "pairwise_exchange.hpp"
#include "ring.hpp"
#include "via_leaders.hpp"
#include "via_peers.hpp"

namespace tcoll {

namespace detail {
/// Rethrows `e`, raised by a transport of a two-level machine in its own ranks, named in
/// world ranks: `world_of[r]` is the world rank of the transport's rank r. Not a template,
/// so the machine's every call site shares it.
[[noreturn]] inline void throw_in_world_ranks(const error& e, const std::vector<int>& world_of,
                                              const char* where, int world_rank) {
  const auto world = [&](int r) {
    return r >= 0 && r < static_cast<int>(world_of.size()) ? world_of[static_cast<std::size_t>(r)]
                                                           : -1;
  };
  std::string own = " (" + std::string(where) + ": rank " + std::to_string(e.rank());
  if (e.peer() >= 0) own += ", peer " + std::to_string(e.peer());
  throw_like(e, e.message() + own + ")", world_rank, world(e.peer()));
}
} // namespace detail

/// `hierarchy_shape::groups` from every world rank's group leader and local rank
/// (`leader_and_local[2 r]` and `[2 r + 1]` for world rank r, as one allgather of two ints
/// gives them): the groups' world ranks in local order, groups ordered by their leader's
/// world rank (the order of a leaders' transport split with the world rank as key).
inline std::vector<std::vector<int>> groups_from_leaders(std::span<const int> leader_and_local) {
  const std::size_t size = leader_and_local.size() / 2;
  std::vector<int> leaders;
  for (std::size_t r = 0; r < size; ++r)
    if (leader_and_local[2 * r + 1] == 0) leaders.push_back(static_cast<int>(r));
  std::vector<std::vector<int>> groups(leaders.size());
  for (std::size_t r = 0; r < size; ++r) {
    const auto it = std::find(leaders.begin(), leaders.end(), leader_and_local[2 * r]);
    if (it == leaders.end())
      throw invalid_argument("groups_from_leaders: world rank " + std::to_string(r) +
                                 " names a leader that is no group's local rank 0",
                             static_cast<int>(r));
    auto& members = groups[static_cast<std::size_t>(it - leaders.begin())];
    const auto li = static_cast<std::size_t>(leader_and_local[2 * r + 1]);
    if (members.size() <= li) members.resize(li + 1, -1);
    members[li] = static_cast<int>(r);
  }
  return groups;
}

/// Where this rank sits in the two-level machine (what the transports cannot tell).
struct hierarchy_shape {
  int world_rank = 0; ///< rank among all ranks (for error messages and tests)
  int world_size = 1; ///< number of ranks of all groups (avg divides by it)
  int shards = 1;     ///< smallest group size; local ranks below it have an inter transport
  /// World rank of each rank of the group transport, and of the transport across groups
  /// (empty on a rank without one). Given, an error either transport raises in its own
  /// ranks is raised again (same class) naming world ranks, the transport's own ranks
  /// quoted in the message. Leave them empty for transports that name world ranks already
  /// (the `subgroup` views of `split_groups`).
  std::vector<int> intra_world_ranks{};
  std::vector<int> inter_world_ranks{};
  /// The world ranks of every group in local-rank order, group i being the one whose leader
  /// (local rank 0) is rank i of the leaders' transport across groups (`hierarchy_map`), and
  /// whose local rank l is rank i of local rank l's transport across groups, unless
  /// `inter_world_ranks` names that transport's ranks (checked on every rank).
  /// Every collective but allreduce needs it (they place blocks by world rank); without it
  /// they throw `invalid_argument`. `split_groups` returns it as `group_views::groups`;
  /// `mpi_node_hierarchy` fills it.
  std::vector<std::vector<int>> groups{};
};

/// How a two-level machine runs all-to-all (`alltoall` and `alltoallv`).
enum class alltoall_route {
  /// `via_peers` where every group has the same size, else `via_leaders`
  automatic,
  /// every rank exchanges inside its group, then with its peers across groups (via_peers.hpp;
  /// `invalid_argument` where the groups differ in size)
  via_peers,
  /// the group leaders gather, exchange and scatter the group's rows (via_leaders.hpp): one
  /// message per pair of groups, for many ranks per group and short blocks on a network whose
  /// messages cost more than their bytes
  via_leaders,
};

/// Knobs of a two-level machine's collectives that are not chosen per call (the allreduce's
/// come with each call, `hierarchical_options`). Every rank's machine must have the same.
struct hierarchical_machine_options {
  /// All-to-all through the peers where the groups allow it (docs/hierarchical.md, "All-to-all
  /// through the peers").
  alltoall_route alltoall = alltoall_route::automatic;
  via_peers peers{}; ///< the knobs of the route through the peers
};

/// Two transports composed into one two-level machine. `inter` may be null on ranks whose
/// local index is >= `shape.shards` (they never talk across groups).
template <transport Intra, transport Inter>
class hierarchical {
public:
  static constexpr std::string_view name = "hierarchical";
  /// Its algorithm knobs when a caller names none (it is a `communicator`, see
  /// communicator.hpp).
  using default_algorithm = hierarchical_options<ring>;

  hierarchical(Intra& intra, Inter* inter, hierarchy_shape shape,
               hierarchical_machine_options options = {})
      : intra_(&intra), inter_(inter), shape_(shape), options_(options) {
    const int l = intra.rank();
    if (shape.shards < 1 || shape.shards > intra.size())
      throw invalid_argument("hierarchical: shards " + std::to_string(shape.shards) +
                                 " is outside [1, group size " + std::to_string(intra.size()) + "]",
                             shape.world_rank);
    if (shape.world_size < intra.size())
      throw invalid_argument("hierarchical: world_size " + std::to_string(shape.world_size) +
                                 " is smaller than the group",
                             shape.world_rank);
    if (l < shape.shards && inter == nullptr)
      throw invalid_argument("hierarchical: local rank " + std::to_string(l) + " is below shards " +
                                 std::to_string(shape.shards) + " but has no inter transport",
                             shape.world_rank);
    check_world_ranks(shape.intra_world_ranks, intra.size(), l, "intra_world_ranks");
    if (inter)
      check_world_ranks(shape.inter_world_ranks, inter->size(), inter->rank(), "inter_world_ranks");
    if (!shape_.groups.empty()) build_map();
  }

  int rank() const noexcept { return shape_.world_rank; }
  int size() const noexcept { return shape_.world_size; }
  const hierarchy_shape& shape() const noexcept { return shape_; }
  const hierarchical_machine_options& options() const noexcept { return options_; }
  Intra& intra() noexcept { return *intra_; }
  Inter* inter() noexcept { return inter_; }

  /// Draws the message spaces of one hierarchical collective on both transports, before
  /// anything moves, so its place in the start order of each transport does not depend on
  /// how its phases interleave. Throws the cause if either transport is broken.
  std::pair<int, int> begin() {
    const int intra_tag = detail::begin_collective(*intra_);
    const int inter_tag = inter_ ? detail::begin_collective(*inter_) : 0;
    return {intra_tag, inter_tag};
  }

  /// Calls `f(transport&)` for the group transport and, on ranks that have one, the
  /// transport across groups.
  template <class F>
  void for_each_transport(F&& f) {
    f(*intra_);
    if (inter_) f(*inter_);
  }
  /// Queued collectives run on the group transport's engine.
  Intra& engine_transport() noexcept { return *intra_; }

  /// Where every world rank sits (from `hierarchy_shape::groups`); throws
  /// `invalid_argument` naming `what` when the shape did not give the groups.
  const hierarchy_map& group_map(const char* what) const {
    if (map_.groups.empty())
      throw invalid_argument(std::string(what) +
                                 " on a hierarchical machine needs "
                                 "hierarchy_shape::groups (the world ranks of every group)",
                             shape_.world_rank);
    return map_;
  }

  // The other collectives in the message spaces `begin()` drew, arguments already checked
  // (the `communicator` forms; see via_leaders.hpp for the algorithms).
  template <class T, class Op, reducer R>
  void reduce_scatter_tagged(std::pair<int, int> tags, const T* sendbuf, T* recvbuf,
                             std::size_t count, const Op& op, const ring&, R& red) {
    via_leaders{}.reduce_scatter(*this, tags, sendbuf, recvbuf, count, op, binomial_tree{}, red);
  }
  template <class T, class Op, reducer R>
  void reduce_scatterv_tagged(std::pair<int, int> tags, const T* sendbuf, T* recvbuf,
                              std::span<const std::size_t> counts,
                              std::span<const std::size_t> offsets, const Op& op, const ring&,
                              R& red) {
    via_leaders{}.reduce_scatterv(*this, tags, sendbuf, recvbuf, counts, offsets, op,
                                  binomial_tree{}, red);
  }
  template <class T, reducer R>
  void allgatherv_tagged(std::pair<int, int> tags, const T* sendbuf, T* recvbuf,
                         std::span<const std::size_t> counts, std::span<const std::size_t> displs,
                         std::size_t /*extent*/, const ring&, R& red) {
    via_leaders{}.allgatherv(*this, tags, sendbuf, recvbuf, counts, displs, binomial_tree{}, red);
  }
  /// Without the group map (`hierarchy_shape::groups`), a sum allreduce of a table that is
  /// zero but for this rank's block: twice the traffic, the same bits on every rank, what
  /// machines built before the map existed get. Raw elements (the host calls of every
  /// scalar type) are summed as unsigned integers of their width, which keeps every bit; a
  /// float summed as itself turns -0.0 into +0.0.
  template <class T, reducer R>
  void allgather_tagged(std::pair<int, int> tags, const T* sendbuf, T* recvbuf, std::size_t count,
                        const ring& algo, R& red) {
    if (!map_.groups.empty())
      return via_leaders{}.allgather(*this, tags, sendbuf, recvbuf, count, binomial_tree{}, red);
    using Bits = typename raw_bits<T>::type;
    if constexpr (!std::is_same_v<Bits, T>) {
      allgather_tagged(tags, reinterpret_cast<const Bits*>(sendbuf),
                       reinterpret_cast<Bits*>(recvbuf), count, algo, red);
    } else {
      const std::size_t all = count * static_cast<std::size_t>(size());
      const std::size_t own = count * static_cast<std::size_t>(rank());
      // zeros around this rank's block, which in place already holds the input (zeroing the
      // whole table first lost it: every block came back zero)
      const std::vector<T> zeros(std::max(own, all - own - count), T(0));
      const auto zero = [&](T* at, std::size_t n) {
        if (n == 0) return;
        if constexpr (host_device_copies<R>) // a device reducer's copy may not read host memory
          red.copy_from_host(at, zeros.data(), n);
        else
          red.copy(at, zeros.data(), n);
      };
      zero(recvbuf, own);
      zero(recvbuf + own + count, all - own - count);
      if (sendbuf != recvbuf + own) red.copy(recvbuf + own, sendbuf, count);
      red.synchronize();
      allreduce_tagged(tags, recvbuf, recvbuf, all, sum_op{}, hierarchical_options<ring>{}, red);
    }
  }
  template <class T, class Algo, reducer R>
  void broadcast_tagged(std::pair<int, int> tags, T* buffer, std::size_t count, int root,
                        const Algo& among_leaders, R& red) {
    via_leaders{}.broadcast(*this, tags, buffer, count, root, among_leaders, red);
  }
  template <class T, class Op, reducer R>
  void reduce_tagged(std::pair<int, int> tags, const T* sendbuf, T* recvbuf, std::size_t count,
                     int root, const Op& op, const binomial_tree& tree, R& red) {
    via_leaders{}.reduce(*this, tags, sendbuf, recvbuf, count, root, op, tree, red);
  }
  template <class T, reducer R>
  void alltoall_tagged(std::pair<int, int> tags, const T* sendbuf, T* recvbuf, std::size_t count,
                       bool in_place, const pairwise_exchange& exchange, R& red) {
    if (peers_for_alltoall("alltoall"))
      return options_.peers.alltoall(*this, tags, sendbuf, recvbuf, count, exchange, red);
    via_leaders{}.alltoall(*this, tags, sendbuf, recvbuf, count, in_place, exchange, red);
  }
  template <class T, reducer R>
  void alltoallv_tagged(std::pair<int, int> tags, const T* sendbuf,
                        std::span<const std::size_t> send_counts,
                        std::span<const std::size_t> send_displs, T* recvbuf,
                        std::span<const std::size_t> recv_counts,
                        std::span<const std::size_t> recv_displs, bool,
                        const pairwise_exchange& exchange, R& red) {
    if (peers_for_alltoall("alltoallv"))
      return options_.peers.alltoallv(*this, tags, sendbuf, send_counts, send_displs, recvbuf,
                                      recv_counts, recv_displs, exchange, red);
    via_leaders{}.alltoallv(*this, tags, sendbuf, send_counts, send_displs, recvbuf, recv_counts,
                            recv_displs, exchange, red);
  }
  template <class T, reducer R>
  void gather_tagged(std::pair<int, int> tags, const T* sendbuf, T* recvbuf, std::size_t count,
                     int root, const linear& algo, R& red) {
    via_leaders{}.gather(*this, tags, sendbuf, recvbuf, count, root, algo, red);
  }
  template <class T, reducer R>
  void scatter_tagged(std::pair<int, int> tags, const T* sendbuf, T* recvbuf, std::size_t count,
                      int root, const linear& algo, R& red) {
    via_leaders{}.scatter(*this, tags, sendbuf, recvbuf, count, root, algo, red);
  }
  template <class T, reducer R>
  void gatherv_tagged(std::pair<int, int> tags, const T* sendbuf, std::size_t send_count,
                      T* recvbuf, std::span<const std::size_t> recv_counts,
                      std::span<const std::size_t> recv_displs, int root, const linear& algo,
                      R& red) {
    via_leaders{}.gatherv(*this, tags, sendbuf, send_count, recvbuf, recv_counts, recv_displs, root,
                          algo, red);
  }
  template <class T, reducer R>
  void scatterv_tagged(std::pair<int, int> tags, const T* sendbuf,
                       std::span<const std::size_t> send_counts,
                       std::span<const std::size_t> send_displs, T* recvbuf, std::size_t recv_count,
                       int root, const linear& algo, R& red) {
    via_leaders{}.scatterv(*this, tags, sendbuf, send_counts, send_displs, recvbuf, recv_count,
                           root, algo, red);
  }
  template <reducer R>
  void barrier_tagged(std::pair<int, int> tags, const dissemination& algo, R& red) {
    via_leaders{}.barrier(*this, tags, algo, red);
  }

  /// What a prepared allreduce (schedule/prepared.hpp) runs on this machine: its phases
  /// are not one recorded step list, so each call runs the allreduce with the prepared
  /// count and knobs, allocating what the phases need.
  template <class T, class Op, class Algo>
  class prepared_program {
  public:
    prepared_program() = default;
    prepared_program(const hierarchical&, std::size_t count, bool, const Algo& algo)
        : count_(count), algo_(algo) {}
    std::size_t scratch_count() const noexcept { return 0; }
    std::size_t staging_count() const noexcept { return 0; }
    template <reducer R>
    void run(hierarchical& machine, std::pair<int, int> tags, const T* sendbuf, T* recvbuf,
             const Op& op, R& red, T*, std::size_t, T*, std::size_t) const {
      if (count_) machine.allreduce_tagged(tags, sendbuf, recvbuf, count_, op, algo_, red);
    }
    /// The flat ring's bytes (the phases are not recorded): 2 (P - 1) / P buffers.
    std::size_t bytes_sent(int ranks, bool& exact) const {
      exact = false;
      return detail::ring_bytes_estimate(ranks, count_, sizeof(T));
    }

  private:
    std::size_t count_ = 0;
    Algo algo_{};
  };

  /// Does the all-to-all (`what`: alltoall or alltoallv) go through the peers?
  bool peers_for_alltoall(const char* what) {
    return options_.alltoall == alltoall_route::via_peers ||
           (options_.alltoall == alltoall_route::automatic && via_peers::fits(group_map(what)));
  }

  /// `f()`, with an error the group transport raises in its own ranks named in world ranks
  /// (see hierarchy_shape::intra_world_ranks).
  template <class F>
  void in_group(F&& f) {
    naming_world_ranks(*intra_, shape_.intra_world_ranks, "inside the group", f);
  }
  /// `f()`, with an error the transport across groups raises named in world ranks.
  template <class F>
  void across_groups(F&& f) {
    naming_world_ranks(*inter_, shape_.inter_world_ranks, "across groups", f);
  }

  /// The allreduce in the message spaces `begin()` drew (the `communicator` form).
  template <class T, class Op, class InterAlgo, reducer R>
  void allreduce_tagged(std::pair<int, int> tags, const T* sendbuf, T* recvbuf, std::size_t count,
                        const Op& op, const hierarchical_options<InterAlgo>& opt, R& red) {
    static_assert(commutative_op<Op>, "tcoll: hierarchical allreduce reorders operands; it "
                                      "needs a commutative op");
    detail::check_support<R, Op, T>();
    hierarchical_allreduce::run(*this, tags.first, tags.second, sendbuf, recvbuf, count, op, opt,
                                red);
  }

private:
  template <class Tr, class F>
  void naming_world_ranks(Tr& t, const std::vector<int>& world_of, const char* where, F& f) {
    if (world_of.empty()) return f();
    try {
      f();
    } catch (const error& e) {
      if (e.rank() != t.rank()) throw; // not raised in the transport's own ranks
      detail::throw_in_world_ranks(e, world_of, where, shape_.world_rank);
    }
  }

  /// A world-rank map of hierarchy_shape: empty, or one distinct rank in [0, world_size)
  /// per rank of its transport, this rank's own world rank at `own`.
  void check_world_ranks(const std::vector<int>& ranks, int size, int own, const char* what) const {
    if (ranks.empty()) return;
    const int wr = shape_.world_rank;
    if (static_cast<int>(ranks.size()) != size)
      throw invalid_argument("hierarchical: " + std::string(what) + " has " +
                                 std::to_string(ranks.size()) + " entries for a transport of " +
                                 std::to_string(size) + " ranks",
                             wr);
    for (std::size_t i = 0; i < ranks.size(); ++i)
      if (ranks[i] < 0 || ranks[i] >= shape_.world_size ||
          std::count(ranks.begin(), ranks.end(), ranks[i]) != 1)
        throw invalid_argument("hierarchical: " + std::string(what) + "[" + std::to_string(i) +
                                   "] = " + std::to_string(ranks[i]) +
                                   " is outside [0, world_size) or listed twice",
                               wr);
    if (ranks[static_cast<std::size_t>(own)] != wr)
      throw invalid_argument("hierarchical: " + std::string(what) + "[" + std::to_string(own) +
                                 "] is " + std::to_string(ranks[static_cast<std::size_t>(own)]) +
                                 ", not this rank's world rank",
                             wr);
  }

  /// Checks `shape_.groups` against the transports and fills `map_`.
  void build_map() {
    const int wr = shape_.world_rank, P = shape_.world_size;
    auto bad = [&](const std::string& why) {
      return invalid_argument("hierarchical: hierarchy_shape::groups " + why, wr);
    };
    map_.group_of.assign(static_cast<std::size_t>(P), -1);
    map_.local_of.assign(static_cast<std::size_t>(P), -1);
    int smallest = P;
    for (std::size_t gi = 0; gi < shape_.groups.size(); ++gi) {
      const auto& members = shape_.groups[gi];
      if (members.empty()) throw bad("has an empty group " + std::to_string(gi));
      smallest = std::min(smallest, static_cast<int>(members.size()));
      for (std::size_t li = 0; li < members.size(); ++li) {
        const int w = members[li];
        if (w < 0 || w >= P || map_.group_of[static_cast<std::size_t>(w)] != -1)
          throw bad("lists rank " + std::to_string(w) + ", outside [0, world_size) or twice");
        map_.group_of[static_cast<std::size_t>(w)] = static_cast<int>(gi);
        map_.local_of[static_cast<std::size_t>(w)] = static_cast<int>(li);
      }
    }
    if (std::count(map_.group_of.begin(), map_.group_of.end(), -1))
      throw bad("leaves out some of the " + std::to_string(P) + " world ranks");
    const auto g = static_cast<std::size_t>(map_.group_of[static_cast<std::size_t>(wr)]);
    if (map_.local_of[static_cast<std::size_t>(wr)] != intra_->rank() ||
        shape_.groups[g].size() != static_cast<std::size_t>(intra_->size()))
      throw bad("does not place this rank at its place in the group transport");
    if (smallest != shape_.shards)
      throw bad("has a smallest group of " + std::to_string(smallest) + " ranks but shards is " +
                std::to_string(shape_.shards));
    // Rank i of a transport across groups is in group i (the leaders' always; another
    // local index's unless hierarchy_shape::inter_world_ranks names its ranks)
    if (inter_) {
      const bool leader = intra_->rank() == 0;
      bool fits = inter_->size() == static_cast<int>(shape_.groups.size());
      if (leader || shape_.inter_world_ranks.empty())
        fits = fits && inter_->rank() == static_cast<int>(g);
      else
        for (int w : shape_.inter_world_ranks)
          fits = fits && map_.local_of[static_cast<std::size_t>(w)] == intra_->rank();
      if (!fits)
        throw bad(leader ? "does not match the leaders' transport across groups"
                         : "does not match this rank's transport across groups (rank i of it "
                           "must be in group i, or hierarchy_shape::inter_world_ranks must name "
                           "world ranks of this local rank)");
    }
    map_.groups = shape_.groups;
  }

  Intra* intra_;
  Inter* inter_;
  hierarchy_shape shape_;
  hierarchical_machine_options options_;
  hierarchy_map map_;
};

} // namespace tcoll
