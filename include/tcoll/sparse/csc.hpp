#pragma once
/// \file
/// Coarse-grained sparse communication (GradientFlow Sec. 3.2, Algorithm 1) over a
/// `gradient_pool`: `csc_allreduce` communicates, each iteration, only the *important*
/// chunks of the pool, chosen at the end of the previous iteration from allreduced chunk
/// L1 norms, and keeps the rest as a residual that is added to the next gradient.
///
/// One iteration:
///  1. Backward writes each gradient into its tensor of the pool and calls
///     `mark_ready(i)`. A chunk is *filled* when every tensor overlapping it is ready; it
///     is then preprocessed (Algorithm 1 lines 7-11: g += residual; residual = 0 if
///     important, else momentum * g, or g under error feedback) and, if important, copied
///     (cast to the wire type) into its slot of a dense send buffer.
///  2. The important chunks, in index order, are grouped into buffers: a buffer closes as
///     soon as it holds more than `threshold_bytes` (lazy allreduce, GF Sec. 3.1); the last
///     one takes the rest. A buffer's allreduce starts through `tcoll::iallreduce` once its
///     chunks are all filled and every earlier buffer has started, so buffers start in the
///     same order on every rank and overlap with the rest of backward.
///  3. `finish()` waits for the buffers, scatters the results back into the pool (the
///     important chunks then hold the same reduced values on every rank, the others the
///     rank's own accumulated gradient), computes every chunk's L1 norm over the pool,
///     divides the norms of this iteration's important chunks by the rank count,
///     sum-allreduces the norm vector and selects the top chunks as the important chunks
///     of the *next* iteration (`chunks.hpp`: ties to the lower index).
///
/// The optimizer step (Algorithm 1 lines 12-17) is `csc_momentum_step` in `momentum.hpp`.
///
/// Choices where the paper leaves a gap (knobs of `csc_options`, see docs/sparse.md):
///  - chunk size 32,000 elements (the paper's "32K": its chunk counts 1903 and 797 for
///    AlexNet and ResNet-50 match 32,000, not 32,768);
///  - density 0.15 (the end-to-end run's 85 % sparsity);
///  - warm-up 100 iterations, linear (about 5 % of the AlexNet run: 95 epochs at batch 64K
///    is ~1900 iterations; the paper says "the first several percents");
///  - lazy threshold 4 MiB of wire bytes, strictly greater (the paper: "greater than a
///    given threshold"); the remainder is flushed when the last important chunk fills;
///  - iteration 0 is dense (there are no norms yet); the norm allreduce is skipped when
///    the next iteration keeps every chunk or none (the selection is then trivial);
///  - the norm vector is float, summed in double per chunk; with `avg_op` every norm is
///    additionally divided by the rank count so that the averaged important chunks and the
///    local sums of the others are in the same units;
///  - the padding between tensors (pool alignment) belongs to the tensor before it.
///
/// Where the data lives: all element work (residual, gather, scatter, norms, the copies of
/// the norm vector and of the pool check's hashes between the host and the pool's memory)
/// goes through the `Ops` policy; the adaptor itself only touches host bookkeeping (masks,
/// slots, the downloaded norm vector, whose selection runs on the host). `host_chunk_ops`
/// (the default) works on a host pool; `cuda_chunk_ops` (`cuda_chunk_ops.cuh`, nvcc) on a
/// device pool over `cuda_reducer`/`thrust_reducer`, with the reducer's stream. The
/// constructor asks the CUDA driver (if one is loaded) where the pool lives and throws
/// `invalid_argument` naming the pool and the rank when it does not match the policy (device
/// memory with `host_chunk_ops`, pageable host memory with a device policy) instead of
/// crashing later. With a device pool, `residual()` is device memory too, the gradients must
/// be complete on the device when `mark_ready` is called (synchronize the stream that wrote
/// them), and the pool holds the results when `finish` returns.
#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../collectives.hpp"
#include "../communicator.hpp"
#include "../core/error.hpp"
#include "../core/types.hpp"
#include "../detail/memory_kind.hpp"
#include "../schedule/agreement.hpp"
#include "../schedule/gradient_pool.hpp"
#include "../schedule/iteration.hpp"
#include "../schedule/nonblocking.hpp"
#include "../schedule/prepared.hpp"
#include "../schedule/scheduler.hpp"
#include "chunk_ops.hpp"
#include "chunks.hpp"

namespace tcoll::sparse {

/// Knobs of the sparse-chunk adaptor (defaults and reasons in the file comment).
struct csc_options {
  /// Elements per chunk (> 0). The last chunk of the pool may be shorter.
  std::size_t chunk_elements = 32000;
  /// Fraction of chunks communicated after warm-up, in [0, 1] (1: dense).
  double density = 0.15;
  /// Iterations of the linear warm-up from dense to `density` (0: none; iteration 0 is
  /// dense regardless, having no norms).
  std::size_t warmup_iterations = 100;
  /// A buffer's allreduce starts once it holds more than this many wire bytes.
  std::size_t threshold_bytes = std::size_t{4} << 20;
  /// Residual of unsent chunks: Algorithm 1 (momentum * g), plain error feedback (g) or
  /// none (dropped).
  residual_rule residual = residual_rule::momentum_scaled;
  /// The momentum coefficient of `residual_rule::momentum_scaled` (use the optimizer's).
  double momentum = 0.9;
  /// Wire types half/bfloat16: values are multiplied by this before the cast and divided
  /// after (a power of two adds no error); must be positive and finite.
  float wire_scale = 1.0f;
  /// A run of consecutive important chunks of at least this many bytes is allreduced in
  /// place in the pool (no copy into the send buffer, no scatter back), split into buffers
  /// by `threshold_bytes` like the copied chunks (0: off, the paper's copy). Only when the
  /// wire type is T and `wire_scale` is 1.
  std::size_t in_place_min_bytes = 0;
  /// Exchange a hash of the pool's shape and these options at construction and throw a
  /// clear error naming the first rank that differs from rank 0 (one small allreduce).
  bool check_pool = true;
};

/// What one iteration did on this rank.
struct csc_iteration {
  std::size_t iteration = 0;          ///< 0-based
  double density = 1.0;               ///< the density this iteration ran at
  std::size_t chunks = 0;             ///< chunks of the pool
  std::size_t important_chunks = 0;   ///< chunks communicated
  std::size_t important_elements = 0; ///< elements communicated
  std::size_t buffers = 0;            ///< allreduces of important chunks started
  /// Bytes this rank sent in the buffers' allreduces (wire type).
  std::size_t data_bytes_sent = 0;
  /// Bytes this rank sent in the norm allreduce (0 when it was skipped).
  std::size_t norm_bytes_sent = 0;
  /// Bytes a dense allreduce of the whole pool (wire type, same algorithm) would send.
  std::size_t dense_bytes_sent = 0;
  /// True when the byte counts are the algorithm's own steps; false for passthrough and
  /// hierarchical, whose counts are the ring estimate 2 (P-1)/P n b.
  bool bytes_exact = true;
  std::size_t bytes_sent() const noexcept { return data_bytes_sent + norm_bytes_sent; }
};

namespace detail {

/// A host `Ops` policy that takes a chunk's norm in its residual pass (`host_chunk_ops`):
/// the adaptor then takes the norms of unsent chunks while filling them, and only the sent
/// chunks' after the communication.
template <class Ops, class T>
concept fuses_residual_norm = ops_on_host<Ops>() && requires(const Ops o, T* p) {
  { o.accumulate_residual_l1(p, p, std::size_t{}, false, 1.0) } -> std::convertible_to<double>;
  { Ops::l1_norm(static_cast<const T*>(p), std::size_t{}) } -> std::convertible_to<double>;
  { Ops::scaled_norm(1.0, false, 1.0, 1.0) } -> std::convertible_to<float>;
};

/// Bytes rank `comm.rank()` sends in an allreduce of `count` elements of `T` under `algo`,
/// from the algorithm's recorded steps; `exact` is cleared for the estimated cases.
template <class Comm, class T, class Op, class Algo>
std::size_t allreduce_bytes_sent(const Comm& comm, std::size_t count, const Algo& algo,
                                 bool& exact) {
  if (comm.size() <= 1 || count == 0) return 0;
  return tcoll::detail::program_for_t<Comm, T, Op, Algo>(comm, count, true, algo)
      .bytes_sent(comm.size(), exact);
}

} // namespace detail

/// The sparse-chunk adaptor (see the file comment). `Comm` is a transport or a
/// `hierarchical<Intra, Inter>`; `Algo` an allreduce algorithm struct (`automatic`, `ring`,
/// `multi_ring`, `passthrough`, ...) or `hierarchical_options<...>`; `Wire` the element
/// type on the wire (`T`, or half/bfloat16 for T = float); `Ops` the per-chunk policy.
/// `mark_ready` may be called from several threads; `finish` from one.
template <class Comm, class T, class Op = sum_op,
          class Algo = tcoll::detail::default_algorithm_t<Comm>, reducer R = cpu_reducer,
          class Wire = T, class Ops = host_chunk_ops>
class csc_allreduce {
  static_assert(std::is_same_v<Wire, T> ||
                    (std::is_same_v<T, float> && is_reduced_precision_v<Wire>),
                "tcoll: the wire type is T itself, or half/bfloat16 for T = float");
  static_assert(commutative_op<Op>, "tcoll: csc_allreduce sums chunks; it needs a commutative op");
  static_assert(!tcoll::detail::reducer_uses_host_memory<R>() || detail::ops_on_host<Ops>(),
                "tcoll: a host-memory reducer (cpu_reducer) keeps the pool in host memory; use "
                "host_chunk_ops, or a device reducer (cuda_reducer) with a device Ops policy");

public:
  /// Binds to `pool` (which must outlive the adaptor) and `comm`. Collective when
  /// `options.check_pool` (the default): every rank constructs it at the same time.
  csc_allreduce(gradient_pool<T, R>& pool, Comm& comm, csc_options options = {}, const Op& op = {},
                const Algo& algo = {}, Ops ops = {})
      : pool_(&pool), comm_(&comm), op_(op), algo_(algo), ops_(std::move(ops)), options_(options),
        driver_(comm, "csc_allreduce",
                [this](std::vector<std::uint64_t>& v) { sum_through_pool_memory(v); }) {
    tcoll::detail::check_support<R, Op, Wire>();
    const int r = rank();
    if (options_.chunk_elements == 0)
      throw invalid_argument("csc_allreduce: options.chunk_elements must be positive, got 0", r);
    check_density(options_.density, "csc_allreduce: options.density", r);
    if (!std::isfinite(options_.momentum))
      throw invalid_argument("csc_allreduce: options.momentum must be finite, got " +
                                 std::to_string(options_.momentum),
                             r);
    if (!(options_.wire_scale > 0.0f) || !std::isfinite(options_.wire_scale))
      throw invalid_argument("csc_allreduce: options.wire_scale must be positive and finite, got " +
                                 std::to_string(options_.wire_scale),
                             r);
    // where the pool lives must suit the policy (one driver query; see memory_kind.hpp)
    if constexpr (requires { Ops::host_memory; })
      if (pool.size())
        tcoll::detail::require_memory(pool.data(), Ops::host_memory, "csc_allreduce",
                                      "the gradient pool (pool.data())", r);
    layout_ = chunk_layout{pool.size(), options_.chunk_elements};
    const std::size_t C = layout_.count(), L = pool.tensor_count();
    // tensor i covers [offset_i, offset_{i+1}) (its padding after it); chunk dependencies
    first_chunk_.assign(L, 0);
    end_chunk_.assign(L, 0);
    deps_.assign(C, 0);
    for (std::size_t i = 0; i < L; ++i) {
      const std::size_t b = pool.tensor_offset(i);
      const std::size_t e = i + 1 < L ? pool.tensor_offset(i + 1) : pool.size();
      if (e > b) {
        first_chunk_[i] = layout_.chunk_of(b);
        end_chunk_[i] = layout_.chunk_of(e - 1) + 1;
        for (std::size_t c = first_chunk_[i]; c < end_chunk_[i]; ++c) ++deps_[c];
      }
    }
    residual_ = pool.reducer().template allocate<T>(pool.size());
    if (pool.size()) pool.reducer().zero(residual_.data(), pool.size());
    norms_ = pool.reducer().template allocate<float>(C);
    norms_host_.assign(C, 0.0f);
    send_ = pool.reducer().template allocate<Wire>(pool.size());
    pool.reducer().synchronize();
    if (options_.check_pool) check_same_pool();
    bool exact = true;
    dense_bytes_ = detail::allreduce_bytes_sent<Comm, Wire, Op>(*comm_, pool.size(), algo_, exact);
    important_.assign(C, 1); // iteration 0: dense
    density_ = 1.0;
    remaining_ = deps_;
    arrange();
  }
  csc_allreduce(const csc_allreduce&) = delete;
  csc_allreduce& operator=(const csc_allreduce&) = delete;
  /// Waits for buffers still running (their memory is the adaptor's).
  ~csc_allreduce() {
    for (auto& b : buffers_) {
      request settle = std::move(b.req); // waits in its destructor
    }
  }

  using ops_type = Ops;
  int rank() const noexcept { return comm_->rank(); }
  int size() const noexcept { return comm_->size(); }
  /// The per-chunk policy (the momentum step uses it too).
  const Ops& ops() const noexcept { return ops_; }
  const csc_options& options() const noexcept { return options_; }
  const chunk_layout& chunks() const noexcept { return layout_; }
  gradient_pool<T, R>& pool() noexcept { return *pool_; }
  const gradient_pool<T, R>& pool() const noexcept { return *pool_; }
  /// Iterations finished.
  std::size_t iterations() const noexcept { return iterations_; }
  /// The density of the iteration in progress (or next to run).
  double density() const noexcept { return density_; }
  /// Mask of the important chunks of the iteration in progress (or next to run).
  std::span<const unsigned char> important() const noexcept { return important_; }
  /// Mask of the important chunks of the last finished iteration (what the pool's reduced
  /// chunks are; what `csc_momentum_step` updates). All ones before the first finish.
  std::span<const unsigned char> last_important() const noexcept {
    return iterations_ ? std::span<const unsigned char>(last_important_)
                       : std::span<const unsigned char>(important_);
  }
  /// The residual (historical gradient hg of Algorithm 1), laid out like the pool.
  std::span<T> residual() noexcept { return {residual_.data(), pool_->size()}; }
  std::span<const T> residual() const noexcept { return {residual_.data(), pool_->size()}; }
  /// The allreduced norm vector of the last finish (zeros when its allreduce was skipped).
  std::span<const float> last_norms() const noexcept { return norms_host_; }
  /// What the last finished iteration did.
  const csc_iteration& last() const noexcept { return last_; }
  /// The last finished iteration's timings (per tensor: ready; per buffer: ready, queued,
  /// started, finished), as the overlap scheduler's.
  const iteration_timing& last_timing() const noexcept { return driver_.last_timing(); }
  /// Buffers of the iteration in progress, and how many of them have started.
  std::size_t buffer_count() const noexcept { return buffers_.size(); }
  std::size_t buffers_started() const { return driver_.launched(); }
  /// Bytes this rank sends in a dense allreduce of the whole pool (for ratios).
  std::size_t dense_bytes_sent() const noexcept { return dense_bytes_; }

  /// Tensor `i` of the pool holds its gradient: fills (preprocesses and gathers) the chunks
  /// whose tensors are now all ready and starts the buffers that are complete. Throws
  /// `invalid_argument` for a tensor out of range or already marked this iteration;
  /// communication errors (a broken transport included) surface from `finish()`.
  void mark_ready(std::size_t i) {
    driver_.mark_ready(
        i, "mark_ready",
        [&](std::size_t t) {
          for (std::size_t c = first_chunk_[t]; c < end_chunk_[t]; ++c)
            if (--remaining_[c] == 0) fill(c);
        },
        [&](std::size_t k) { start(k); });
  }

  /// Marks every tensor ready (the whole pool was written at once).
  void mark_all_ready() {
    for (std::size_t i = 0; i < pool_->tensor_count(); ++i) mark_ready(i);
  }

  /// Waits for every buffer, scatters the reduced chunks into the pool, exchanges the
  /// chunk norms and selects the next iteration's important chunks. If a tensor was never
  /// marked, the started buffers are waited for, the transport is broken (the peers fail
  /// at once instead of waiting out their timeout) and `invalid_argument` names the first
  /// unmarked tensor. A failed allreduce rethrows its cause.
  const csc_iteration& finish() {
    remaining_ = deps_; // chunk readiness of the next iteration (marking is over)
    driver_.finish([&](std::size_t k) {
      buffers_[k].req.wait();
      return buffers_[k].req.timestamps();
    });
    // the reduced data is complete in the reducer's stream order (a no-op on the host; a
    // device Ops policy may run on another stream)
    pool_->reducer().synchronize();
    // scatter the reduced important chunks back into the pool: a run of consecutive copied
    // chunks is contiguous in the send buffer too (slots are handed out in chunk order), so
    // each run is one call
    const float inv = 1.0f / options_.wire_scale;
    for (std::size_t c = 0, C = layout_.count(); c < C;) {
      if (!important_[c] || in_place_[c]) {
        ++c;
        continue;
      }
      std::size_t e = c + 1;
      while (e < C && important_[e] && !in_place_[e]) ++e;
      const std::size_t b = layout_.begin(c), n = layout_.begin(e - 1) + layout_.size(e - 1) - b;
      ops_.scatter(pool_->data() + b, send_.data() + slot_[c], n, inv);
      c = e;
    }
    // statistics of this iteration
    csc_iteration it;
    it.iteration = iterations_;
    it.density = density_;
    it.chunks = layout_.count();
    it.important_chunks = important_count_;
    it.important_elements = important_elements_;
    it.buffers = buffers_.size();
    it.dense_bytes_sent = dense_bytes_;
    bool exact = true;
    for (const auto& b : buffers_) it.data_bytes_sent += bytes_of<Wire, Op>(b.count, exact);
    // norms and the next selection
    const double next_density =
        warmup_density(options_.density, options_.warmup_iterations, iterations_ + 1);
    const std::size_t C = layout_.count(), k = chunks_kept(next_density, C);
    last_important_ = important_;
    if (k == 0 || k == C) {
      ops_.synchronize(); // the scatter (the pool holds the results on return)
      std::fill(norms_host_.begin(), norms_host_.end(), 0.0f);
      important_.assign(C, k == C ? 1 : 0);
    } else {
      const double P = static_cast<double>(size());
      if constexpr (detail::fuses_residual_norm<Ops, T>) {
        // the unsent chunks' norms were taken as they were filled (`fill`): the sent ones now,
        // as chunk_norms would (divided by P, then by divide_all)
        for (std::size_t c = 0; c < C; ++c)
          if (important_[c])
            norms_.data()[c] =
                Ops::scaled_norm(Ops::l1_norm(pool_->data() + layout_.begin(c), layout_.size(c)),
                                 true, P, norm_divide_all());
      } else {
        ops_.chunk_norms(pool_->data(), layout_, important_.data(), P, norm_divide_all(),
                         norms_.data());
      }
      ops_.synchronize();
      tcoll::allreduce(*comm_, norms_.data(), norms_.data(), C, sum_op{}, algo_, pool_->reducer());
      pool_->reducer().synchronize();
      ops_.download(norms_host_.data(), norms_.data(), C);
      select_top_chunks(norms_host_, k, important_);
      it.norm_bytes_sent = bytes_of<float, sum_op>(C, exact);
    }
    it.bytes_exact = exact;
    density_ = next_density;
    last_ = it;
    ++iterations_;
    arrange();
    return last_;
  }

private:
  struct buffer {
    std::size_t offset = 0, count = 0; // in the send buffer (in the pool when in_place)
    std::size_t chunks = 0;            // important chunks in it (the driver's needs)
    bool in_place = false;             // a run of important chunks reduced in the pool
    request req;
  };

  template <class E, class O>
  std::size_t bytes_of(std::size_t count, bool& exact) {
    auto& cache = std::is_same_v<E, float> && std::is_same_v<O, sum_op> ? norm_bytes_ : data_bytes_;
    const auto key = count;
    if (auto f = cache.find(key); f != cache.end()) {
      if (!f->second.second) exact = false;
      return f->second.first;
    }
    bool e = true;
    const std::size_t bytes = detail::allreduce_bytes_sent<Comm, E, O>(*comm_, count, algo_, e);
    cache.emplace(key, std::make_pair(bytes, e));
    if (!e) exact = false;
    return bytes;
  }

  /// Slots in the send buffer and buffers for the current important set.
  void arrange() {
    const std::size_t C = layout_.count();
    slot_.assign(C, 0);
    buffer_of_.assign(C, 0);
    in_place_.assign(C, 0);
    buffers_.clear();
    important_count_ = important_elements_ = 0;
    std::size_t at = 0; // next free slot of the send buffer
    buffer cur;         // the buffer being grouped
    auto close = [&] {
      if (cur.chunks) buffers_.push_back(std::move(cur));
      cur = buffer{};
    };
    for (std::size_t c = 0; c < C;) {
      if (!important_[c]) {
        ++c;
        continue;
      }
      std::size_t e = c; // the run of consecutive important chunks [c, e)
      while (e < C && important_[e]) ++e;
      const std::size_t run = layout_.begin(e - 1) + layout_.size(e - 1) - layout_.begin(c);
      const bool in_place = in_place_allowed() && options_.in_place_min_bytes > 0 &&
                            run * sizeof(T) >= options_.in_place_min_bytes;
      if (in_place) close(); // an in-place buffer never shares with copied chunks
      for (std::size_t j = c; j < e; ++j) {
        const std::size_t m = layout_.size(j);
        buffer_of_[j] = buffers_.size();
        if (in_place) {
          in_place_[j] = 1;
          if (cur.chunks == 0) {
            cur.in_place = true;
            cur.offset = layout_.begin(j); // in the pool
          }
        } else {
          slot_[j] = at;
          if (cur.chunks == 0) cur.offset = at; // in the send buffer
          at += m;
        }
        cur.count += m;
        ++cur.chunks;
        ++important_count_;
        important_elements_ += m;
        if (cur.count * sizeof(Wire) > options_.threshold_bytes) close();
      }
      if (in_place) close();
      c = e;
    }
    close();
    std::vector<job_shape> jobs;
    for (const auto& b : buffers_) jobs.push_back({0, 0, b.count * sizeof(Wire), b.chunks, false});
    driver_.arrange(pool_->tensor_count(), std::move(jobs));
  }

  /// In-place runs need the pool's own type on the wire, unscaled.
  bool in_place_allowed() const noexcept {
    return std::is_same_v<Wire, T> && options_.wire_scale == 1.0f;
  }

  /// Every chunk's norm is divided by this (the rank count for `avg_op`, else 1).
  double norm_divide_all() const noexcept {
    return std::is_same_v<Op, avg_op> ? static_cast<double>(size()) : 1.0;
  }

  void fill(std::size_t c) {
    const std::size_t b = layout_.begin(c), m = layout_.size(c);
    const bool imp = important_[c] != 0;
    const double factor = options_.residual == residual_rule::momentum_scaled ? options_.momentum
                          : options_.residual == residual_rule::none          ? 0.0
                                                                              : 1.0;
    if constexpr (detail::fuses_residual_norm<Ops, T>) {
      if (!imp) { // not sent: its values are final, so its norm is taken in the same pass
        norms_.data()[c] = Ops::scaled_norm(
            ops_.accumulate_residual_l1(pool_->data() + b, residual_.data() + b, m, false, factor),
            false, 1.0, norm_divide_all());
        return;
      }
    }
    ops_.accumulate_residual(pool_->data() + b, residual_.data() + b, m, imp, factor);
    if (imp) {
      if (!in_place_[c])
        ops_.gather(send_.data() + slot_[c], pool_->data() + b, m, options_.wire_scale);
      driver_.satisfy(buffer_of_[c]);
    }
  }

  /// Starts buffer `k` (the driver reports a buffer that cannot start from `finish()`).
  void start(std::size_t k) {
    auto& b = buffers_[k];
    ops_.synchronize();
    Wire* p = send_.data() + b.offset;
    if constexpr (std::is_same_v<Wire, T>)
      if (b.in_place) p = pool_->data() + b.offset;
    b.req = tcoll::iallreduce(*comm_, p, p, b.count, op_, algo_, pool_->reducer());
  }

  /// Throws when another rank's pool shape or options differ from rank 0's (one sum
  /// allreduce of P hashes).
  void check_same_pool() {
    tcoll::detail::fingerprint f;
    f.add(sizeof(T)).add(sizeof(Wire)).add(pool_->tensor_count());
    for (std::size_t i = 0; i < pool_->tensor_count(); ++i)
      f.add(pool_->tensor_size(i)).add(pool_->tensor_offset(i));
    f.add(pool_->size()).add(options_.chunk_elements);
    f.add_bits(options_.density).add_bits(options_.momentum);
    f.add(options_.warmup_iterations).add(options_.threshold_bytes);
    f.add(options_.in_place_min_bytes).add(static_cast<std::uint64_t>(options_.residual));
    f.add_bits(options_.wire_scale);
    driver_.agree(f.value(),
                  "has a different pool (tensor sizes, alignment, element or wire type) or "
                  "different csc_options",
                  "use the same");
  }

  /// The driver's sum over ranks: through the reducer's memory (device memory for a device
  /// pool), filled and read back through the Ops policy's host copies (a device reducer's
  /// copy may not take host pointers).
  void sum_through_pool_memory(std::vector<std::uint64_t>& all) {
    if (all.empty()) return;
    R& red = pool_->reducer();
    auto buf = red.template allocate<std::uint64_t>(all.size());
    red.synchronize();
    ops_.upload(buf.data(), all.data(), all.size());
    tcoll::allreduce(*comm_, buf.data(), buf.data(), all.size(), sum_op{},
                     tcoll::detail::default_algorithm_t<Comm>{}, red);
    red.synchronize();
    ops_.download(all.data(), buf.data(), all.size());
  }

  gradient_pool<T, R>* pool_;
  Comm* comm_;
  Op op_;
  Algo algo_;
  Ops ops_;
  csc_options options_;
  chunk_layout layout_;
  std::vector<std::size_t> first_chunk_, end_chunk_, deps_, remaining_;
  std::vector<std::size_t> slot_, buffer_of_;
  std::vector<unsigned char> important_, last_important_, in_place_;
  std::size_t important_count_ = 0, important_elements_ = 0;
  std::vector<buffer> buffers_;
  std::size_t iterations_ = 0;
  double density_ = 1.0;
  typename R::template buffer<T> residual_{};
  typename R::template buffer<float> norms_{};
  typename R::template buffer<Wire> send_{};
  std::vector<float> norms_host_;
  std::size_t dense_bytes_ = 0;
  std::map<std::size_t, std::pair<std::size_t, bool>> data_bytes_, norm_bytes_;
  csc_iteration last_{};
  iteration_driver<Comm> driver_;
};

} // namespace tcoll::sparse
