#pragma once
/// \file
/// `subgroup<Transport>`: a view of some ranks of a transport as a transport of their own
/// (a sub-communicator without communication). Rank `i` of the view is `members[i]` of the
/// parent; tags are shifted by a per-view offset so two views that share a pair of ranks
/// never match each other's messages.
///
/// `split_groups` cuts one transport into the two levels hierarchical algorithms need:
/// `intra` (the ranks of my group) and `inter` (the rank with my local index in every
/// group). Groups come from an explicit group size or from a group id per rank.
#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../core/collective_context.hpp"
#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../core/tags.hpp"

namespace tcoll {

/// Some ranks of transport `Tr` (held by reference) as a transport.
template <transport Tr>
class subgroup {
public:
  static constexpr bool zero_copy = transport_is_zero_copy<Tr>();
  static constexpr std::string_view name = "subgroup";
  using request = typename Tr::request;

  /// The view of `members` (distinct parent ranks, including the caller's own).
  subgroup(Tr& parent, std::vector<int> members, int tag_offset = 0)
      : parent_(&parent), members_(std::move(members)), tag_offset_(tag_offset),
        context_(std::make_unique<collective_context>()) {
    const int me = parent.rank();
    for (std::size_t i = 0; i < members_.size(); ++i) {
      const int m = members_[i];
      if (m < 0 || m >= parent.size())
        throw invalid_argument("subgroup: member " + std::to_string(m) + " is outside [0, " +
                                   std::to_string(parent.size()) + ")",
                               me);
      if (std::count(members_.begin(), members_.end(), m) != 1)
        throw invalid_argument("subgroup: member " + std::to_string(m) + " listed twice", me);
      if (m == me) rank_ = static_cast<int>(i);
    }
    if (rank_ < 0)
      throw invalid_argument("subgroup: the calling rank is not one of the members", me);
  }

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return static_cast<int>(members_.size()); }
  std::chrono::milliseconds timeout() const { return parent_->timeout(); }
  /// Parent rank of view rank `r`.
  int parent_rank(int r) const { return members_.at(static_cast<std::size_t>(r)); }
  const std::vector<int>& members() const noexcept { return members_; }
  Tr& parent() noexcept { return *parent_; }

  request isend(int peer, const void* data, std::size_t bytes, int tag) {
    return parent_->isend(map(peer, "isend"), data, bytes, tag + tag_offset_);
  }
  /// `isend` of a message whose receiver posts `irecv` for it, forwarded where the parent
  /// takes that hint (`takes_irecv_hint`: a single copy on shared memory).
  request isend_for_irecv(int peer, const void* data, std::size_t bytes,
                          int tag) requires takes_irecv_hint<Tr> {
    return parent_->isend_for_irecv(map(peer, "isend_for_irecv"), data, bytes, tag + tag_offset_);
  }
  request irecv(int peer, void* dst, std::size_t bytes, int tag) {
    return parent_->irecv(map(peer, "irecv"), dst, bytes, tag + tag_offset_);
  }
  request irecv_consume(int peer, std::size_t bytes, int tag, consumer use, void* staging) {
    return parent_->irecv_consume(map(peer, "irecv_consume"), bytes, tag + tag_offset_, use,
                                  staging);
  }
  bool test(request& r) { return parent_->test(r); }
  void wait(request& r, deadline when) { parent_->wait(r, when); }
  void abort() noexcept { parent_->abort(); }

  /// The view's own message spaces (its tags are shifted by the view's offset into the
  /// parent's), broken state and engine.
  collective_context& collectives() noexcept { return *context_; }

  subgroup(subgroup&&) noexcept = default;
  subgroup& operator=(subgroup&&) noexcept = default;
  ~subgroup() {
    if (context_) context_->detach();
  }

private:
  int map(int peer, const char* what) const {
    if (peer < 0 || peer >= size())
      throw invalid_argument(std::string(what) + ": subgroup peer " + std::to_string(peer) +
                                 " is outside [0, " + std::to_string(size()) + ")",
                             parent_->rank());
    return members_[static_cast<std::size_t>(peer)];
  }

  Tr* parent_;
  std::vector<int> members_;
  int tag_offset_;
  int rank_ = -1;
  std::unique_ptr<collective_context> context_; // last: destroyed first
};

/// Tag offsets of the two levels (intra and inter views never share a pair of ranks; the
/// offsets keep them apart anyway, also from the parent's own messages).
inline constexpr int intra_tag_offset = tags::intra_offset;
inline constexpr int inter_tag_offset = tags::inter_offset;

/// The two levels of one rank of a transport cut into groups.
template <transport Tr>
struct group_views {
  subgroup<Tr> intra;                ///< the ranks of my group, in parent rank order
  std::optional<subgroup<Tr>> inter; ///< my local index in every group (if local < shards)
  int group = 0;                     ///< my group, 0..groups-1 (groups ordered by id)
  int local = 0;                     ///< my index inside my group
  int groups = 1;                    ///< number of groups
  int shards = 1;                    ///< smallest group size: local indices with an inter view
  int world_rank = 0;                ///< my parent rank
  int world_size = 1;                ///< parent size
  /// The parent ranks of every group in local order, groups ordered by id: what a
  /// hierarchical machine built on these views takes as `hierarchy_shape::groups`.
  std::vector<std::vector<int>> group_members{};
  /// `&*inter`, or null on ranks without an inter view.
  subgroup<Tr>* inter_ptr() noexcept { return inter ? &*inter : nullptr; }
};

/// Cuts `world` into groups: `group_of[r]` is the group id of parent rank `r` (every rank
/// passes the same vector). Inside a group, ranks keep parent order; groups are ordered by id.
template <transport Tr>
group_views<Tr> split_groups(Tr& world, std::span<const int> group_of) {
  const int P = world.size(), me = world.rank();
  if (static_cast<int>(group_of.size()) != P)
    throw invalid_argument("split_groups: group_of has " + std::to_string(group_of.size()) +
                               " entries for " + std::to_string(P) + " ranks",
                           me);
  std::map<int, std::vector<int>> by_id;
  for (int r = 0; r < P; ++r) by_id[group_of[static_cast<std::size_t>(r)]].push_back(r);
  std::vector<std::vector<int>> groups;
  for (auto& [id, members] : by_id) groups.push_back(std::move(members));
  int shards = P;
  for (const auto& g : groups) shards = std::min(shards, static_cast<int>(g.size()));
  int my_group = 0, my_local = 0;
  for (std::size_t gi = 0; gi < groups.size(); ++gi)
    for (std::size_t li = 0; li < groups[gi].size(); ++li)
      if (groups[gi][li] == me) {
        my_group = static_cast<int>(gi);
        my_local = static_cast<int>(li);
      }
  group_views<Tr> v{
      subgroup<Tr>(world, groups[static_cast<std::size_t>(my_group)], intra_tag_offset),
      std::nullopt,
      my_group,
      my_local,
      static_cast<int>(groups.size()),
      shards,
      me,
      P,
      groups};
  if (my_local < shards) {
    std::vector<int> across;
    for (const auto& g : groups) across.push_back(g[static_cast<std::size_t>(my_local)]);
    v.inter.emplace(world, std::move(across), inter_tag_offset);
  }
  return v;
}

/// Consecutive groups of `group_size` ranks (the last one smaller if it does not divide).
template <transport Tr>
group_views<Tr> split_groups(Tr& world, int group_size) {
  if (group_size < 1)
    throw invalid_argument(
        "split_groups: group_size must be >= 1, got " + std::to_string(group_size), world.rank());
  std::vector<int> group_of(static_cast<std::size_t>(world.size()));
  for (int r = 0; r < world.size(); ++r) group_of[static_cast<std::size_t>(r)] = r / group_size;
  return split_groups(world, std::span<const int>(group_of));
}

} // namespace tcoll
