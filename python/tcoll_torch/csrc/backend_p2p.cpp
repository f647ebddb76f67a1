// The tcoll backend's point-to-point calls (backend.hpp): send, recv and recv from any
// source, posted on the group's flat transport at once and completed while their work is
// waited on or tested (or by the progress thread, work.hpp), their user tags mapped where
// no collective's message goes; and coalescing, which gathers the works of the calls of a
// batch (`batch_isend_irecv`) into one.
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <limits>
#include <mutex>
#include <type_traits>
#include <utility>
#include <vector>

#include <tcoll/core/tags.hpp>

#include "backend.hpp"
#include "work.hpp"

namespace tcoll_torch {

void backend::startCoalescing() {
  std::lock_guard lock(coalescing_mutex_);
  // torch's coalescing manager calls endCoalescing only when every call in between
  // succeeded: after a failed batch (a bad peer, say) the next batch starts afresh, and
  // the works of the failed one are dropped (their calls ran or were posted as usual)
  coalescing_.emplace();
  coalescing_now_.store(true, std::memory_order_release);
}

c10::intrusive_ptr<c10d::Work> backend::endCoalescing() {
  std::lock_guard lock(coalescing_mutex_);
  TORCH_CHECK(coalescing_, "tcoll: endCoalescing: rank ", rank_,
              ": startCoalescing was not called");
  auto works = std::move(*coalescing_);
  coalescing_.reset();
  coalescing_now_.store(false, std::memory_order_release);
  return c10::make_intrusive<coalesced_work>(rank_, std::move(works));
}

c10::intrusive_ptr<c10d::Work> backend::send(std::vector<at::Tensor>& tensors, int dst, int tag) {
  TORCH_CHECK(tensors.size() == 1, "tcoll: send: rank ", rank_, ": takes one tensor");
  check_cpu(tensors[0], "send", "tensor", rank_);
  check_peer(dst, "send", "dst");
  const int t_tag = check_tag(tag, "send");
  at::Tensor data = dense(tensors[0]);
  trace_entry entry = trace_->record(*this, OpType::SEND, tensors, {}, dst);
  return with_flat([&](auto& t) -> c10::intrusive_ptr<c10d::Work> {
    using Tr = std::remove_cvref_t<decltype(t)>;
    auto r = t.isend(dst, data.data_ptr(), data.nbytes(), t_tag);
    auto w = c10::make_intrusive<p2p_work<Tr>>(rank_, OpType::SEND, t, std::move(r), data,
                                               at::Tensor(), dst);
    w->set_trace(std::move(entry));
    return progressed(recorded(std::move(w)));
  });
}

c10::intrusive_ptr<c10d::Work> backend::recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  TORCH_CHECK(tensors.size() == 1, "tcoll: recv: rank ", rank_, ": takes one tensor");
  check_cpu(tensors[0], "recv", "tensor", rank_);
  check_peer(src, "recv", "src");
  const int t_tag = check_tag(tag, "recv");
  at::Tensor data = dense(tensors[0]);
  trace_entry entry = trace_->record(*this, OpType::RECV, {}, tensors, src);
  return with_flat([&](auto& t) -> c10::intrusive_ptr<c10d::Work> {
    using Tr = std::remove_cvref_t<decltype(t)>;
    auto r = t.irecv(src, data.data_ptr(), data.nbytes(), t_tag);
    auto w = c10::make_intrusive<p2p_work<Tr>>(rank_, OpType::RECV, t, std::move(r), data,
                                               tensors[0], src);
    w->set_trace(std::move(entry));
    return progressed(recorded(std::move(w)));
  });
}

c10::intrusive_ptr<c10d::Work> backend::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  TORCH_CHECK(tensors.size() == 1, "tcoll: recv: rank ", rank_, ": takes one tensor");
  check_cpu(tensors[0], "recv", "tensor", rank_);
  const int t_tag = check_tag(tag, "recv");
  at::Tensor data = dense(tensors[0]);
  trace_entry entry = trace_->record(*this, OpType::RECVANYSOURCE, {}, tensors);
  return with_flat([&](auto& t) -> c10::intrusive_ptr<c10d::Work> {
    using Tr = std::remove_cvref_t<decltype(t)>;
    auto w = c10::make_intrusive<any_source_work<Tr>>(rank_, size_, t, t_tag, data, tensors[0],
                                                      any_source_order_);
    w->set_trace(std::move(entry));
    return progressed(recorded(std::move(w)));
  });
}

void backend::check_peer(int peer, const char* what, const char* argument) {
  TORCH_CHECK(peer >= 0 && peer < size_ && peer != rank_, "tcoll: ", what, ": rank ", rank_, ": ",
              argument, " ", peer, " is not another rank of the group of ", size_);
}

int backend::check_tag(int tag, const char* what) {
  constexpr int low = tcoll::tags::collectives_first;
  TORCH_CHECK(tag >= 0, "tcoll: ", what, ": rank ", rank_, ": tag ", tag,
              " is negative (tags are non-negative ints, as on Gloo)");
  if (tag < low) return tag;
  if (!flat_) return std::numeric_limits<int>::min() + (tag - low);
  constexpr int high_max = std::numeric_limits<int>::max() - tcoll::tags::user_high_first + low;
  TORCH_CHECK(tag <= high_max, "tcoll: ", what, ": rank ", rank_, ": tag ", tag,
              " is above the highest tag tcoll carries between nodes (", high_max, ")");
  return tcoll::tags::user_high_first + (tag - low);
}

} // namespace tcoll_torch
