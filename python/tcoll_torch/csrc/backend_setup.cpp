// The tcoll backend's group set-up and bootstrap (backend.hpp): the constructor, which
// finds its transports (shared memory through the store on the node, MPI or Gloo between
// nodes) and builds the hierarchy, and the destructor; the group's node layout; the
// registered staging buffers of a two-rank group; `split_group`; and the functions that
// make a backend for tcoll_torch/__init__.py.
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <tcoll/algorithm/hierarchical.hpp>
#include <tcoll/algorithm/select.hpp>
#include <tcoll/transport/bootstrap.hpp>
#include <tcoll/transport/shm.hpp>

#include "backend.hpp"
#include "c10d_transport.hpp"
#include "internode_transport.hpp"
#include "mpi_link.hpp"

namespace tcoll_torch {

backend::backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                 std::chrono::milliseconds timeout, node_layout layout,
                 c10::intrusive_ptr<c10d::Backend> flat_group,
                 c10::intrusive_ptr<c10d::Backend> inter_group, const std::vector<int>& mpi_ranks,
                 std::vector<std::uint64_t> global_ranks)
    : c10d::Backend(rank, size), store_(store), layout_(layout), flat_group_(std::move(flat_group)),
      inter_group_(std::move(inter_group)), timeout_(timeout),
      trace_(std::make_shared<group_trace>(rank, size, std::move(global_ranks), timeout)) {
  TORCH_CHECK(trace_->global_ranks().size() == static_cast<std::size_t>(size), "tcoll: rank ", rank,
              ": ", trace_->global_ranks().size(), " global ranks for a group of ", size);
  init(); // c10d's per-backend set-up (logging), as its own backends do
  tcoll::shm_options options;
  options.timeout = timeout;
  // TCOLL_TORCH_SLEEP_AFTER_US: a wait on shared memory that has yielded this long sleeps
  // between polls (shm_options::sleep_after), leaving the cores to backward when DDP's
  // buckets wait for a slower peer. Unset or 0: waits only yield.
  if (const char* v = std::getenv("TCOLL_TORCH_SLEEP_AFTER_US")) {
    char* end = nullptr;
    const long long us = std::strtoll(v, &end, 10);
    TORCH_CHECK(end != v && *end == '\0' && us >= 0, "tcoll: rank ", rank,
                ": TCOLL_TORCH_SLEEP_AFTER_US is \"", v,
                "\"; expected a number of microseconds >= 0");
    options.sleep_after = std::chrono::microseconds(us);
  }
  // shared memory among the ranks of this node (the whole group on one node)
  shm_ =
      std::make_unique<tcoll::shm_transport>(std::make_unique<tcoll::store_bootstrap<c10d::Store>>(
                                                 *store_, layout_.local_rank, layout_.local_size,
                                                 "tcoll/shm/node" + std::to_string(layout_.node)),
                                             options);
  // every rank: only the calls that run in the caller's thread by the agreed bound use the
  // collective area (inline_choice_, backend.hpp); whatever runs on the engine takes messages
  shm_->segment_area().order_by_callers();
  if (layout_.nodes == 1) make_staging(*store_, rank, size);
  if (layout_.nodes > 1 && !mpi_ranks.empty()) {
    auto links =
        mpi_link::connect(mpi_ranks, rank, layout_.node,
                          layout_.local_rank < layout_.shards ? layout_.local_rank : -1, timeout);
    flat_ = std::move(links.flat);
    inter_ = std::move(links.inter);
  } else if (layout_.nodes > 1) {
    TORCH_CHECK(flat_group_ && (inter_group_ || layout_.local_rank >= layout_.shards),
                "tcoll: rank ", rank, ": a group across ", layout_.nodes,
                " nodes needs its Gloo groups");
    flat_ = std::make_unique<internode_transport>(
        std::make_unique<c10d_transport>(flat_group_, timeout));
    if (inter_group_)
      inter_ = std::make_unique<internode_transport>(
          std::make_unique<c10d_transport>(inter_group_, timeout));
  }
  if (layout_.nodes > 1) {
    // the group rank of every rank of both levels, so that errors name group ranks: the
    // ranks of this node, and the ranks of this local index on every node
    tcoll::hierarchy_shape shape{rank, size, layout_.shards};
    shape.intra_world_ranks = layout_.members(layout_.node);
    if (inter_)
      for (int n = 0; n < layout_.nodes; ++n)
        shape.inter_world_ranks.push_back(
            layout_.members(n).at(static_cast<std::size_t>(layout_.local_rank)));
    for (int n = 0; n < layout_.nodes; ++n) shape.groups.push_back(layout_.members(n));
    machine_ = std::make_unique<tcoll::hierarchical<tcoll::shm_transport, internode_transport>>(
        *shm_, inter_.get(), std::move(shape));
  }
  if (debug_enabled() && rank == 0)
    std::fprintf(stderr,
                 "[tcoll] group of %d ranks on %d node(s): shm_transport inside a node (single "
                 "copy %s)%s%s%s\n",
                 size, layout_.nodes, shm_->single_copy() ? "on" : "off",
                 layout_.nodes > 1 ? ", " : "", layout_.nodes > 1 ? internode().c_str() : "",
                 layout_.nodes > 1 ? " send/recv across nodes (hierarchical allreduce)" : "");
}

backend::~backend() {
  progress_.reset(); // before the transports its works use
  // the engines stop with their transports: queued calls fail, a running one finishes
  machine_.reset();
  inter_.reset();
  flat_.reset();
  shm_.reset();
}

backend::node_layout backend::node_layout_of(c10d::Store& store, int rank, int size) {
  tcoll::store_bootstrap<c10d::Store> boot(store, rank, size, "tcoll/nodes");
  const std::vector<std::string> ids = boot.node_identities();
  std::vector<std::string> distinct;
  std::vector<int> members;
  node_layout l;
  for (int q = 0; q < size; ++q) {
    const auto it = std::find(distinct.begin(), distinct.end(), ids[q]);
    const int node = static_cast<int>(it - distinct.begin());
    if (it == distinct.end()) distinct.push_back(ids[q]), members.push_back(0);
    if (q == rank) l.node = node, l.local_rank = members[node];
    ++members[node];
    l.node_of.push_back(node);
  }
  l.nodes = static_cast<int>(distinct.size());
  l.local_size = members[l.node];
  l.shards = *std::min_element(members.begin(), members.end());
  return l;
}

c10::intrusive_ptr<c10d::Backend::Options> backend::getBackendOptions() {
  return c10::make_intrusive<Options>("tcoll", timeout_);
}

c10::intrusive_ptr<c10d::Backend> backend::split(const c10::intrusive_ptr<c10d::Store>& store,
                                                 const std::vector<int>& ranks,
                                                 const c10::intrusive_ptr<Options>& opts) {
  const auto it = std::find(ranks.begin(), ranks.end(), rank_);
  if (it == ranks.end()) return nullptr;
  for (int r : ranks)
    TORCH_CHECK(r >= 0 && r < size_, "tcoll: split_group: rank ", rank_, ": rank ", r,
                " is outside the parent group [0, ", size_, ")");
  const auto timeout = opts && opts->timeout.count() > 0 ? opts->timeout : timeout_;
  std::vector<std::uint64_t> global_ranks;
  for (int r : ranks) global_ranks.push_back(trace_->global_ranks()[static_cast<std::size_t>(r)]);
  return create_through_python(store, static_cast<int>(it - ranks.begin()),
                               static_cast<int>(ranks.size()), timeout, global_ranks);
}

void backend::make_staging(c10d::Store& store, int rank, int size) {
  // a value this rank cannot parse travels as `unparsable`, so that every rank fails
  // here naming it, instead of its peers waiting in the exchange for it
  constexpr std::uint64_t unparsable = std::numeric_limits<std::uint64_t>::max();
  const char* v = std::getenv("TCOLL_TORCH_STAGING_BYTES");
  std::uint64_t mine = std::uint64_t{4} << 20;
  std::string problem;
  if (v) try {
      mine = tcoll::parse_bytes(v);
    } catch (const std::exception& e) {
      mine = unparsable;
      problem = e.what();
    }
  // the inline bound travels along: it decides where the in-segment collectives may run
  // (backend.hpp, inline_choice_), so every rank takes the smallest
  const std::uint64_t mine_pair[2] = {mine, inline_max_bytes_};
  tcoll::store_bootstrap<c10d::Store> boot(store, rank, size, "tcoll/staging");
  const std::vector<std::uint8_t> all =
      boot.allgather({reinterpret_cast<const std::uint8_t*>(mine_pair), sizeof mine_pair});
  for (int q = 0; q < size; ++q) {
    std::uint64_t theirs[2];
    std::memcpy(theirs, all.data() + static_cast<std::size_t>(q) * sizeof theirs, sizeof theirs);
    TORCH_CHECK(theirs[0] != unparsable, "tcoll: rank ", rank,
                ": TCOLL_TORCH_STAGING_BYTES of rank ", q, " is not a size",
                q == rank ? " (" + problem + ")" : std::string());
    mine = std::min(mine, theirs[0]);
    inline_max_bytes_ = std::min<std::size_t>(inline_max_bytes_, theirs[1]);
  }
  staging_bytes_ = size == 2 ? mine : 0;
  if (staging_bytes_ == 0) return;
  try {
    for (auto& s : staging_) s.memory = shm_->allocate<byte>(staging_bytes_);
  } catch (const tcoll::transport_error& e) {
    // allocate throws on every rank when any rank could not make or map its buffer
    // (/dev/shm too small: 64 MiB in a default Docker container), so every rank goes on
    // unstaged and runs the same algorithms
    for (auto& s : staging_) s.memory = {};
    staging_bytes_ = 0;
    if (rank == 0)
      TORCH_WARN("tcoll: no allreduce staging buffers for this group (", e.what(),
                 "); set TCOLL_TORCH_STAGING_BYTES lower, or 0 to silence this");
    return;
  }
  // two ranks: one exchange of whole buffers, each read in place from the peer's copy
  staged_choice_.shared_memory.doubling_up_to_bytes = staging_bytes_;
}

layout_tuple node_layout(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size) {
  auto l = backend::node_layout_of(*store, rank, size);
  return {l.node, l.nodes, l.local_rank, l.local_size, l.shards, std::move(l.node_of)};
}

c10::intrusive_ptr<c10d::Backend>
create_backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
               const std::chrono::duration<float>& timeout, layout_tuple layout,
               c10::intrusive_ptr<c10d::Backend> flat_group,
               c10::intrusive_ptr<c10d::Backend> inter_group, const std::vector<int>& mpi_ranks,
               std::vector<std::uint64_t> global_ranks) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(timeout);
  auto& [node, nodes, local_rank, local_size, shards, node_of] = layout;
  TORCH_CHECK(static_cast<int>(node_of.size()) == size, "tcoll: rank ", rank,
              ": the layout names the node of ", node_of.size(), " ranks, not ", size);
  return c10::make_intrusive<backend>(
      store, rank, size, ms.count() > 0 ? ms : std::chrono::milliseconds(1800000),
      backend::node_layout{node, nodes, local_rank, local_size, shards, std::move(node_of)},
      std::move(flat_group), std::move(inter_group), mpi_ranks, std::move(global_ranks));
}

} // namespace tcoll_torch
