#pragma once
/// \file
/// The gradient pool (GradientFlow Sec. 3.1): one contiguous allocation holding every
/// gradient tensor in backward order (the first tensor backward produces at offset 0), so
/// a bucket of consecutive tensors is one contiguous range that a fused allreduce reduces
/// in place, with no copy into or out of a fusion buffer. Host memory with `cpu_reducer`,
/// device memory through a device reducer's allocator. Element types: anything the reducer
/// reduces (float, double, half, bfloat16, integers).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../detail/memory_kind.hpp"
#include "../plan/interface.hpp"
#include "../reduce/cpu.hpp"

namespace tcoll {

/// Knobs of a gradient pool.
struct gradient_pool_options {
  /// Every tensor starts at a multiple of this many bytes from the pool's start (0 or 1:
  /// packed). The padding between tensors is zero and part of the buckets' ranges (it is
  /// reduced along, harmlessly); vectorised reducers and device kernels like aligned data.
  std::size_t alignment_bytes = 0;
};

/// See the file comment. Movable, not copyable. The pool starts zeroed. `R` needs
/// `zero(T*, n)` (cpu_reducer, cuda_reducer and thrust_reducer have it).
template <class T, reducer R = cpu_reducer>
class gradient_pool {
public:
  /// Tensors of `sizes[i]` elements, in backward order.
  explicit gradient_pool(std::span<const std::size_t> sizes, gradient_pool_options options = {},
                         R red = {})
      : red_(std::move(red)), sizes_(sizes.begin(), sizes.end()), options_(options) {
    lay_out();
    storage_ = red_.template allocate<T>(total_);
    data_ = storage_.data();
    if (total_) red_.zero(data_, total_);
    red_.synchronize();
  }
  /// Tensors of `sizes[i]` elements, in backward order, in storage made by `allocate(n)`
  /// (called once, for the pool's `size()` elements): anything owning `n` elements of `T`
  /// with `.data()` where the reducer can reach them; the pool keeps it alive. For example
  /// `[&](std::size_t n) { return shm.allocate<float>(n); }` puts the pool in the node's
  /// shared memory, so the other processes reduce straight from it (shm_transport; then
  /// constructing the pool is collective).
  template <class Allocate>
  requires requires(Allocate& a, std::size_t n) {
    { a(n).data() } -> std::convertible_to<T*>;
  }
  gradient_pool(std::span<const std::size_t> sizes, gradient_pool_options options, R red,
                Allocate&& allocate)
      : red_(std::move(red)), sizes_(sizes.begin(), sizes.end()), options_(options) {
    lay_out();
    using storage_type = std::decay_t<decltype(allocate(total_))>;
    auto external = std::make_shared<storage_type>(allocate(total_));
    data_ = external->data();
    if (total_ && !data_)
      throw invalid_argument("gradient_pool: the allocator returned no storage for " +
                             std::to_string(total_) + " elements");
    external_ = std::move(external);
    // a host reducer writes the storage with host code: device memory would crash in zero()
    if constexpr (requires { R::host_memory; })
      if (R::host_memory && total_)
        detail::require_memory(data_, true, "gradient_pool", "the allocator's storage");
    if (total_) red_.zero(data_, total_);
    red_.synchronize();
  }
  explicit gradient_pool(const std::vector<std::size_t>& sizes, gradient_pool_options options = {},
                         R red = {})
      : gradient_pool(std::span<const std::size_t>(sizes), options, std::move(red)) {}
  template <class Allocate>
  requires requires(Allocate& a, std::size_t n) {
    { a(n).data() } -> std::convertible_to<T*>;
  }
  gradient_pool(const std::vector<std::size_t>& sizes, gradient_pool_options options, R red,
                Allocate&& allocate)
      : gradient_pool(std::span<const std::size_t>(sizes), options, std::move(red),
                      std::forward<Allocate>(allocate)) {}

  /// The tensors of a profile (its order must be backward order, as in `data/profiles`).
  /// Any type with `tensors`, each with `elements` (`plan::profile`; this layer does not
  /// include the planning layer's profile parser).
  template <class Profile>
  requires requires(const Profile& p) { p.tensors.begin()->elements; }
  static gradient_pool from_profile(const Profile& p, gradient_pool_options options = {},
                                    R red = {}) {
    std::vector<std::size_t> sizes;
    for (const auto& t : p.tensors) sizes.push_back(static_cast<std::size_t>(t.elements));
    return gradient_pool(sizes, options, std::move(red));
  }
  /// The tensors of a planner workload (bytes / sizeof(T) elements each).
  static gradient_pool from_workload(const plan::workload& w, gradient_pool_options options = {},
                                     R red = {}) {
    std::vector<std::size_t> sizes;
    for (auto b : w.bytes) sizes.push_back(static_cast<std::size_t>(b / sizeof(T)));
    return gradient_pool(sizes, options, std::move(red));
  }
  /// The tensors of a model: any range of objects with `.size()` (parameter tensors in
  /// backward order, e.g. Eigen matrices or std::vectors).
  template <class Range>
  requires requires(const Range& r) { std::begin(r)->size(); }
  static gradient_pool from_tensors(const Range& tensors, gradient_pool_options options = {},
                                    R red = {}) {
    std::vector<std::size_t> sizes;
    for (const auto& t : tensors) sizes.push_back(static_cast<std::size_t>(t.size()));
    return gradient_pool(sizes, options, std::move(red));
  }

  gradient_pool(gradient_pool&&) noexcept = default;
  gradient_pool& operator=(gradient_pool&&) noexcept = default;

  std::size_t tensor_count() const noexcept { return sizes_.size(); }
  /// Elements of the whole pool, padding included.
  std::size_t size() const noexcept { return total_; }
  std::size_t bytes() const noexcept { return total_ * sizeof(T); }
  T* data() noexcept { return data_; }
  const T* data() const noexcept { return data_; }
  /// The whole pool.
  std::span<T> all() noexcept { return {data_, total_}; }

  std::size_t tensor_size(std::size_t i) const { return sizes_.at(check(i)); }
  std::size_t tensor_offset(std::size_t i) const { return offsets_.at(check(i)); }
  /// Tensor `i` (backward order): the view the backward pass writes its gradient into.
  std::span<T> tensor(std::size_t i) { return {data_ + offsets_[check(i)], sizes_[i]}; }
  std::span<const T> tensor(std::size_t i) const { return {data_ + offsets_[check(i)], sizes_[i]}; }
  /// Tensors [first, end) as one contiguous range (with the padding between them).
  std::span<T> range(std::size_t first, std::size_t end) {
    return {data_ + range_offset(first, end), range_size(first, end)};
  }
  std::size_t range_offset(std::size_t first, std::size_t end) const {
    check_range(first, end);
    return first == end ? 0 : offsets_[first];
  }
  std::size_t range_size(std::size_t first, std::size_t end) const {
    check_range(first, end);
    return first == end ? 0 : offsets_[end - 1] + sizes_[end - 1] - offsets_[first];
  }
  /// Sets every element (padding too) to zero.
  void zero() {
    if (total_) red_.zero(data_, total_);
    red_.synchronize();
  }
  R& reducer() noexcept { return red_; }
  const gradient_pool_options& options() const noexcept { return options_; }

private:
  /// Offsets of the tensors and the pool's size, from sizes_ and options_.
  void lay_out() {
    const std::size_t align = options_.alignment_bytes;
    if (align > 1 && align % sizeof(T) != 0)
      throw invalid_argument("gradient_pool: options.alignment_bytes (" + std::to_string(align) +
                             ") is not a multiple of the element size " +
                             std::to_string(sizeof(T)));
    const std::size_t step = align > 1 ? align / sizeof(T) : 1;
    offsets_.reserve(sizes_.size());
    std::size_t at = 0;
    for (std::size_t n : sizes_) {
      at = (at + step - 1) / step * step;
      offsets_.push_back(at);
      if (n > (SIZE_MAX / sizeof(T)) - at)
        throw invalid_argument("gradient_pool: tensor sizes overflow");
      at += n;
    }
    total_ = at;
  }

  std::size_t check(std::size_t i) const {
    if (i >= sizes_.size())
      throw invalid_argument("gradient_pool: tensor " + std::to_string(i) +
                             " is out of range (the pool holds " + std::to_string(sizes_.size()) +
                             " tensors)");
    return i;
  }
  void check_range(std::size_t first, std::size_t end) const {
    if (first > end || end > sizes_.size())
      throw invalid_argument("gradient_pool: tensor range [" + std::to_string(first) + ", " +
                             std::to_string(end) + ") is invalid for " +
                             std::to_string(sizes_.size()) + " tensors");
  }

  R red_;
  std::vector<std::size_t> sizes_, offsets_;
  gradient_pool_options options_;
  std::size_t total_ = 0;
  typename R::template buffer<T> storage_{};
  std::shared_ptr<void> external_; ///< storage from a caller's allocator, when given one
  T* data_ = nullptr;
};

} // namespace tcoll
