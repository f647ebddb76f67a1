#pragma once
/// \file
/// `composed<Intra, Inter>`: one flat transport over every (node, local) pair of a two-level
/// machine, e.g. the threads of every MPI process. Global rank = node * G + local, where G =
/// `intra.size()` (equal on every node) and node = `inter.rank()`. Messages inside a node go
/// through `intra`; messages between nodes go through `inter` with the local indices of both
/// ends folded into the tag, so the threads of one process can share one inter transport.
/// This is what a flat algorithm (the ring over all ranks) needs to run on threads+MPI next
/// to the hierarchical forms.
///
/// With MPI as `Inter`, several threads call MPI at once: MPI must be initialised with
/// `MPI_THREAD_MULTIPLE` (check the provided level; tcoll never calls MPI_Init).
#include <chrono>
#include <cstddef>
#include <limits>
#include <memory>
#include <string>
#include <string_view>

#include "../core/collective_context.hpp"
#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../core/tags.hpp"

namespace tcoll {

/// All ranks of a two-level machine as one transport. Holds both transports by reference.
template <transport Intra, transport Inter>
class composed {
public:
  static constexpr bool zero_copy =
      transport_is_zero_copy<Intra>() && transport_is_zero_copy<Inter>();
  static constexpr std::string_view name = "composed";

  /// A transfer on one of the two transports.
  class request {
  public:
    request() = default;

  private:
    friend class composed;
    typename Intra::request intra_{};
    typename Inter::request inter_{};
    bool across_ = false;
  };

  /// `inter` joins the nodes (its rank is this node); every node has `intra.size()` ranks.
  /// `max_tag` bounds the tags the inter transport accepts (MPI_TAG_UB for MPI).
  composed(Intra& intra, Inter& inter, int max_tag = std::numeric_limits<int>::max())
      : intra_(&intra), inter_(&inter), max_tag_(max_tag),
        context_(std::make_unique<collective_context>(first_collective_tag)) {}
  composed(composed&&) noexcept = default;
  composed& operator=(composed&&) noexcept = default;
  ~composed() {
    if (context_) context_->detach();
  }

  /// Tags of the composed transport's own collectives start here: above the message spaces
  /// of `intra` and `inter` themselves and of their subgroup views, so collectives on the
  /// composed world and on either level never share a tag.
  static constexpr int first_collective_tag = tags::composed_offset + tags::collectives_first;
  /// Message spaces, broken state and engine of the composed world's collectives.
  collective_context& collectives() noexcept { return *context_; }

  int rank() const { return inter_->rank() * intra_->size() + intra_->rank(); }
  int size() const { return inter_->size() * intra_->size(); }
  std::chrono::milliseconds timeout() const {
    return std::max<std::chrono::milliseconds>(intra_->timeout(), inter_->timeout());
  }
  /// Number of ranks per node.
  int group_size() const { return intra_->size(); }

  request isend(int peer, const void* data, std::size_t bytes, int tag) {
    request r;
    const auto [node, local] = where(peer, "isend");
    if (node == inter_->rank()) {
      r.intra_ = intra_->isend(local, data, bytes, tag);
    } else {
      r.across_ = true;
      r.inter_ = inter_->isend(node, data, bytes, encode(tag, intra_->rank(), local));
    }
    return r;
  }
  /// `isend` of a message whose receiver posts `irecv` for it, with the hint passed on to
  /// the level that carries it where that level takes it (`takes_irecv_hint`).
  request isend_for_irecv(int peer, const void* data, std::size_t bytes,
                          int tag) requires(takes_irecv_hint<Intra> || takes_irecv_hint<Inter>) {
    request r;
    const auto [node, local] = where(peer, "isend_for_irecv");
    if (node == inter_->rank()) {
      r.intra_ = tcoll::isend_for_irecv(*intra_, local, data, bytes, tag);
    } else {
      r.across_ = true;
      r.inter_ =
          tcoll::isend_for_irecv(*inter_, node, data, bytes, encode(tag, intra_->rank(), local));
    }
    return r;
  }
  request irecv(int peer, void* dst, std::size_t bytes, int tag) {
    request r;
    const auto [node, local] = where(peer, "irecv");
    if (node == inter_->rank()) {
      r.intra_ = intra_->irecv(local, dst, bytes, tag);
    } else {
      r.across_ = true;
      r.inter_ = inter_->irecv(node, dst, bytes, encode(tag, local, intra_->rank()));
    }
    return r;
  }
  request irecv_consume(int peer, std::size_t bytes, int tag, consumer use, void* staging) {
    request r;
    const auto [node, local] = where(peer, "irecv_consume");
    if (node == inter_->rank()) {
      r.intra_ = intra_->irecv_consume(local, bytes, tag, use, staging);
    } else {
      r.across_ = true;
      r.inter_ =
          inter_->irecv_consume(node, bytes, encode(tag, local, intra_->rank()), use, staging);
    }
    return r;
  }
  bool test(request& r) { return r.across_ ? inter_->test(r.inter_) : intra_->test(r.intra_); }
  void wait(request& r, deadline when) {
    if (r.across_)
      inter_->wait(r.inter_, when);
    else
      intra_->wait(r.intra_, when);
  }
  void abort() noexcept {
    intra_->abort();
    inter_->abort();
  }

  /// Barrier over all ranks: the node's threads meet, local rank 0 joins the inter barrier,
  /// and the threads meet again.
  void barrier() requires requires(Intra& a, Inter& b) {
    a.barrier();
    b.barrier();
  }
  {
    intra_->barrier();
    if (intra_->rank() == 0) inter_->barrier();
    intra_->barrier();
  }

private:
  struct place {
    int node;
    int local;
  };
  place where(int peer, const char* what) const {
    if (peer < 0 || peer >= size())
      throw invalid_argument(std::string(what) + ": peer " + std::to_string(peer) +
                                 " is outside [0, " + std::to_string(size()) + ")",
                             rank());
    return {peer / intra_->size(), peer % intra_->size()};
  }
  int encode(int tag, int src_local, int dst_local) const {
    const long long G = intra_->size();
    const long long t = (static_cast<long long>(tag) * G + src_local) * G + dst_local;
    if (tag < 0 || t > max_tag_)
      throw invalid_argument("composed: tag " + std::to_string(tag) + " with " + std::to_string(G) +
                                 " ranks per node exceeds the inter "
                                 "transport's largest tag " +
                                 std::to_string(max_tag_),
                             rank());
    return static_cast<int>(t);
  }

  Intra* intra_;
  Inter* inter_;
  int max_tag_;
  std::unique_ptr<collective_context> context_; // last: destroyed first
};

} // namespace tcoll
