#pragma once
/// \file
/// Sufficient-factor broadcasting (Poseidon Sec. 3.2, after SFB [32]) as a collective:
/// `sfb_allreduce` and its non-blocking form `isfb_allreduce`.
///
/// For a fully connected layer with an M x N weight matrix and K samples per rank, rank r's
/// weight gradient is sum_k u_{r,k} v_{r,k}^T. Instead of allreducing M*N values, every rank
/// allgathers every rank's K x M factor matrix U_r and K x N factor matrix V_r (row k holds
/// sample k's u and v; u is the back-propagated error of the layer's output, v the layer's
/// input activation) and reconstructs the summed gradient
///
///     G = sum_{r = 0..P-1} sum_{k = 0..K-1} u_{r,k} v_{r,k}^T          (M x N, row-major)
///
/// with one GEMM over the gathered rows in rank order (a `gemm_policy`, `host_gemm` by
/// default). Every rank holds the same gathered bytes in the same order and runs the same
/// deterministic GEMM, so every rank ends with bitwise identical G. `avg_op` divides G by
/// the rank count afterwards (once per element, the reducer's `finalize`).
///
/// Against a dense allreduce of the per-rank gradients (each a K-term sum, then P terms
/// combined in the algorithm's order) the result differs only by reassociation:
/// |G_sfb - G_dense| <= (gamma(PK) + gamma(K+P-1)) S element-wise, with S = sum over all
/// P*K samples of |u_i v_j| and gamma(n) = n u / (1 - n u) (u: unit roundoff, 2^-24 for
/// float); for avg, (gamma(PK+1) + gamma(K+P)) S / P. `sfb_reassociation_bound` returns the
/// factor. Integer-valued factors whose sums stay exact give exactly the dense result.
///
/// Checks. Before any factor moves, the ranks allgather a 4-word record (K, M, N, a local
/// argument verdict). Every rank then throws the same tcoll::invalid_argument if any rank
/// passed a bad argument (K, M or N of 0, a null u, v or grad, sizes that overflow) or if
/// any rank's (K, M, N) differs from rank 0's; the message names that rank (and
/// `error::peer()` is it, on the other ranks). These errors do not break the transport.
/// Decision: K must be equal on every rank (allgather moves equal blocks; pad with zero
/// factor rows, which add exact zeros, if batches differ).
///
/// Non-blocking: `isfb_allreduce` queues the record and factor allgathers as one task on
/// the transport's engine (message spaces drawn at the call, as for every non-blocking
/// collective) and returns an `sfb_request` that owns the gathered buffers; its `wait()`
/// (or a `test()` that finds it done) reconstructs G into `grad` on the calling thread, so
/// the engine is never held up by the GEMM. Same bits as the blocking call. Poseidon's
/// Algorithm 2 starts one such job per layer as soon as the layer's gradient exists.
///
/// Buffers live where the reducer allocates them (`R::allocate`); the GEMM policy receives
/// those pointers. The 32-byte shape records travel in the reducer's memory too: a device
/// reducer (`host_device_copies`: `cuda_reducer`, `thrust_reducer`) copies this rank's record
/// in and the gathered table out around the record allgather, so a device-only transport
/// such as NCCL carries every message of the collective; a host reducer sends them as they
/// are.
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../collectives.hpp"
#include "../communicator.hpp"
#include "../core/concepts.hpp"
#include "../core/error.hpp"
#include "../core/ops.hpp"
#include "../reduce/cpu.hpp"
#include "../schedule/engine.hpp"
#include "gemm.hpp"

namespace tcoll::hybrid {

/// Knobs of `sfb_allreduce`.
struct sfb_options {
  ring gather{}; ///< the ring allgather that moves the records and the factors
};

/// gamma(n) = n u / (1 - n u) (Higham), infinity when n u >= 1.
constexpr double rounding_gamma(double n, double unit_roundoff) noexcept {
  const double nu = n * unit_roundoff;
  return nu < 1.0 ? nu / (1.0 - nu) : std::numeric_limits<double>::infinity();
}

/// The factor B with |G_sfb - G_dense| <= B * S element-wise (see the file comment):
/// gamma(PK) + gamma(K+P-1) for sum, (gamma(PK+1) + gamma(K+P)) / P for avg.
/// `unit_roundoff` is 2^-24 for float, 2^-53 for double.
constexpr double sfb_reassociation_bound(std::size_t K, int ranks, double unit_roundoff,
                                         bool average = false) noexcept {
  const double k = static_cast<double>(K), p = ranks;
  if (!average)
    return rounding_gamma(p * k, unit_roundoff) + rounding_gamma(k + p - 1, unit_roundoff);
  return (rounding_gamma(p * k + 1, unit_roundoff) + rounding_gamma(k + p, unit_roundoff)) / p;
}

namespace detail {

/// Verdict of a rank's own arguments, carried in its shape record.
enum verdict : std::uint64_t {
  ok = 0,
  k_zero,
  m_zero,
  n_zero,
  too_large,
  u_null,
  v_null,
  grad_null,
};

/// K, M, N, verdict.
using shape_record = std::array<std::uint64_t, 4>;

inline bool fits(std::uint64_t a, std::uint64_t b, std::uint64_t limit) {
  return a == 0 || b <= limit / a;
}

template <class T>
shape_record local_record(const T* u, const T* v, const T* grad, std::size_t K, std::size_t M,
                          std::size_t N, int P) {
  const std::uint64_t limit =
      static_cast<std::uint64_t>(std::numeric_limits<std::ptrdiff_t>::max()) / sizeof(T);
  const std::uint64_t p = static_cast<std::uint64_t>(P);
  std::uint64_t code = ok;
  if (K == 0)
    code = k_zero;
  else if (M == 0)
    code = m_zero;
  else if (N == 0)
    code = n_zero;
  else if (!fits(K, M, limit) || !fits(K * M, p, limit) || !fits(K, N, limit) ||
           !fits(K * N, p, limit) || !fits(M, N, limit))
    code = too_large;
  else if (!u)
    code = u_null;
  else if (!v)
    code = v_null;
  else if (!grad)
    code = grad_null;
  return {K, M, N, code};
}

inline std::string dims(std::uint64_t a, std::uint64_t b) {
  return std::to_string(a) + " x " + std::to_string(b);
}

inline std::string describe(const shape_record& s, int P) {
  switch (s[3]) {
  case k_zero:
    return "K (samples per rank) is 0; SFB needs at least one factor pair per rank";
  case m_zero:
    return "M (rows of the gradient, length of u) is 0";
  case n_zero:
    return "N (columns of the gradient, length of v) is 0";
  case too_large:
    return "K x M = " + dims(s[0], s[1]) + " or K x N = " + dims(s[0], s[2]) + " times " +
           std::to_string(P) + " ranks, or M x N, overflows the address space";
  case u_null:
    return "u is null but K x M = " + dims(s[0], s[1]) + " elements";
  case v_null:
    return "v is null but K x N = " + dims(s[0], s[2]) + " elements";
  case grad_null:
    return "grad is null but M x N = " + dims(s[1], s[2]) + " elements";
  default:
    return "unknown verdict " + std::to_string(s[3]);
  }
}

inline std::string shape_text(const std::uint64_t* s) {
  return "K = " + std::to_string(s[0]) + ", M = " + std::to_string(s[1]) +
         ", N = " + std::to_string(s[2]);
}

/// Throws (the same error on every rank) if any rank's record is bad or differs from
/// rank 0's shape. `table` holds P records in rank order.
inline void check_records(const std::vector<std::uint64_t>& table, int rank, int P) {
  for (int r = 0; r < P; ++r) {
    const std::uint64_t* s = table.data() + 4 * static_cast<std::size_t>(r);
    if (s[3] != ok)
      throw invalid_argument("sfb_allreduce: rank " + std::to_string(r) +
                                 " passed a bad argument: " + describe({s[0], s[1], s[2], s[3]}, P),
                             rank, r == rank ? -1 : r);
  }
  for (int r = 1; r < P; ++r) {
    const std::uint64_t* s = table.data() + 4 * static_cast<std::size_t>(r);
    if (s[0] != table[0] || s[1] != table[1] || s[2] != table[2])
      throw invalid_argument("sfb_allreduce: rank " + std::to_string(r) + " has factor shapes " +
                                 shape_text(s) + " but rank 0 has " + shape_text(table.data()) +
                                 " (every rank must pass the same K, M and N)",
                             rank, r == rank ? -1 : r);
  }
}

/// What one SFB collective carries between its exchange and its reconstruction.
template <class T, class R>
struct sfb_state {
  const T* u = nullptr;
  const T* v = nullptr;
  std::size_t K = 0, M = 0, N = 0;
  int rank = 0, P = 1;
  shape_record mine{};
  std::vector<std::uint64_t> table;
  std::optional<typename R::template buffer<T>> U, V; ///< gathered factors, rank order
};

template <class T, class R, class Tr>
std::shared_ptr<sfb_state<T, R>> make_state(Tr& t, const T* u, const T* v, const T* grad,
                                            std::size_t K, std::size_t M, std::size_t N) {
  auto s = std::make_shared<sfb_state<T, R>>();
  s->u = u;
  s->v = v;
  s->K = K;
  s->M = M;
  s->N = N;
  s->rank = t.rank();
  s->P = t.size();
  s->mine = local_record(u, v, grad, K, M, N, s->P);
  s->table.resize(4 * static_cast<std::size_t>(s->P));
  return s;
}

/// The communication of one SFB collective in the message spaces `tags`: the records, the
/// checks, then the factors. A failing transport is broken (tcoll's rule); a bad argument
/// or shape throws on every rank and leaves the transport usable.
template <communicator Tr, class T, reducer R>
void sfb_exchange(Tr& t, const std::array<tcoll::detail::collective_tags_t<Tr>, 3>& tags,
                  sfb_state<T, R>& s, const ring& algo, R& red) {
  if constexpr (host_device_copies<R>) {
    // NCCL sends device memory only: the records go through the reducer's memory.
    auto mine = red.template allocate<std::uint64_t>(4);
    auto table = red.template allocate<std::uint64_t>(s.table.size());
    red.copy_from_host(mine.data(), s.mine.data(), 4);
    tcoll::detail::guarded_on(t, [&] {
      tcoll::detail::allgather_on(t, tags[0], static_cast<const std::uint64_t*>(mine.data()),
                                  table.data(), 4, algo, red);
      red.copy_to_host(s.table.data(), static_cast<const std::uint64_t*>(table.data()),
                       s.table.size());
      red.synchronize();
    });
  } else {
    cpu_reducer host;
    tcoll::detail::guarded_on(t, [&] {
      tcoll::detail::allgather_on(t, tags[0], s.mine.data(), s.table.data(), 4, algo, host);
    });
  }
  check_records(s.table, s.rank, s.P);
  const std::size_t P = static_cast<std::size_t>(s.P);
  s.U.emplace(red.template allocate<T>(P * s.K * s.M));
  s.V.emplace(red.template allocate<T>(P * s.K * s.N));
  tcoll::detail::guarded_on(t, [&] {
    tcoll::detail::allgather_on(t, tags[1], s.u, s.U->data(), s.K * s.M, algo, red);
    tcoll::detail::allgather_on(t, tags[2], s.v, s.V->data(), s.K * s.N, algo, red);
  });
}

/// G = U^T V over the gathered rows (and / P for avg); frees the gathered buffers.
template <class T, class R, class Op, class Gemm>
void sfb_reconstruct(sfb_state<T, R>& s, T* grad, const Op& op, Gemm& gemm, R& red) {
  gemm.sum_outer_products(s.U->data(), s.V->data(), static_cast<std::size_t>(s.P) * s.K, s.M, s.N,
                          grad);
  red.finalize(op, grad, s.M * s.N, s.P);
  red.synchronize();
  s.U.reset();
  s.V.reset();
}

template <class T, class Op, class Gemm>
constexpr void check_sfb_types() {
  static_assert(std::is_arithmetic_v<T>, "tcoll: sfb_allreduce needs an arithmetic element type "
                                         "(half and bfloat16 are not supported)");
  static_assert(std::is_same_v<Op, sum_op> || std::is_same_v<Op, avg_op>,
                "tcoll: sfb_allreduce supports sum_op and avg_op");
  static_assert(gemm_policy<Gemm, T>, "tcoll: the GEMM policy needs sum_outer_products(const T* "
                                      "U, const T* V, size_t rows, size_t M, size_t N, T* G)");
}

} // namespace detail

/// Sufficient-factor allreduce (see the file comment): `u` is this rank's K x M factor
/// matrix, `v` its K x N one (row-major, row k = sample k); `grad` (M x N, row-major)
/// receives op(sum over every rank's samples of u_k v_k^T), bitwise identical on every rank.
/// Blocking; every rank must call it (collective), with the same K, M and N.
template <communicator Tr, class T, class Op = sum_op, class Gemm = host_gemm,
          reducer R = cpu_reducer>
void sfb_allreduce(Tr& t, const T* u, const T* v, std::size_t K, std::size_t M, std::size_t N,
                   T* grad, const Op& op = {}, Gemm gemm = {}, const sfb_options& opt = {},
                   R red = {}) {
  detail::check_sfb_types<T, Op, Gemm>();
  auto s = detail::make_state<T, R>(t, u, v, grad, K, M, N);
  std::array<tcoll::detail::collective_tags_t<Tr>, 3> tags{};
  for (auto& tag : tags) tag = tcoll::detail::begin_on(t);
  detail::sfb_exchange(t, tags, *s, opt.gather, red);
  detail::sfb_reconstruct(*s, grad, op, gemm, red);
}

/// Handle of a non-blocking `isfb_allreduce`. Move-only. It owns the gathered factor buffers;
/// `grad` is written by the `wait()` or `test()` that first finds the exchange done (on that
/// thread). Destroying an unfinished handle waits for the exchange (like `request`) but does
/// not reconstruct. Errors (bad arguments and shapes included) surface from `test`/`wait`.
template <class T, class Op, class Gemm, class R>
class sfb_request {
public:
  sfb_request() = default;
  sfb_request(request q, std::shared_ptr<detail::sfb_state<T, R>> s, T* grad, Op op, Gemm gemm,
              R red)
      : q_(std::move(q)), s_(std::move(s)), grad_(grad), op_(op), gemm_(std::move(gemm)),
        red_(std::move(red)) {}

  /// True when the exchange has completed and `grad` holds the result; rethrows a failure.
  bool test() {
    if (!s_) return true;
    if (!q_.test()) return false;
    finish();
    return true;
  }
  /// Blocks until the exchange completes, then reconstructs; rethrows a failure.
  void wait() {
    if (!s_) return;
    q_.wait();
    finish();
  }
  /// False for a default-constructed or moved-from handle.
  bool valid() const noexcept { return q_.valid(); }
  /// Timestamps of the exchange task on the engine (queued, started, finished).
  auto timestamps() const { return q_.timestamps(); }

private:
  void finish() {
    if (done_) return;
    done_ = true;
    detail::sfb_reconstruct(*s_, grad_, op_, gemm_, red_);
  }
  request q_;
  std::shared_ptr<detail::sfb_state<T, R>> s_;
  T* grad_ = nullptr;
  Op op_{};
  Gemm gemm_{};
  R red_{};
  bool done_ = false;
};

/// Non-blocking `sfb_allreduce` (same arguments; the checks run in the queued exchange, so
/// their errors come from `wait()`, on every rank). `u`, `v` and `grad` must stay valid and
/// `u`, `v` unmodified until `wait()` returns; every rank queues in the same order.
template <communicator Tr, class T, class Op = sum_op, class Gemm = host_gemm,
          reducer R = cpu_reducer>
[[nodiscard]] sfb_request<T, Op, Gemm, R>
isfb_allreduce(Tr& t, const T* u, const T* v, std::size_t K, std::size_t M, std::size_t N, T* grad,
               const Op& op = {}, Gemm gemm = {}, const sfb_options& opt = {}, R red = {}) {
  detail::check_sfb_types<T, Op, Gemm>();
  auto s = detail::make_state<T, R>(t, u, v, grad, K, M, N);
  tcoll::detail::engine& e = tcoll::detail::engine_of(t);
  auto task = e.submit([&] {
    std::array<tcoll::detail::collective_tags_t<Tr>, 3> tags{};
    for (auto& tag : tags) tag = tcoll::detail::begin_on(t);
    auto run = [&t, tags, s, algo = opt.gather, red]() mutable {
      tcoll::detail::throw_if_broken(t);
      detail::sfb_exchange(t, tags, *s, algo, red);
    };
    return std::make_shared<tcoll::detail::function_task<decltype(run)>>(std::move(run));
  });
  return sfb_request<T, Op, Gemm, R>(request(std::move(task)), std::move(s), grad, op,
                                     std::move(gemm), std::move(red));
}

} // namespace tcoll::hybrid
