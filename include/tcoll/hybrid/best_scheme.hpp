#pragma once
/// \file
/// Per-layer choice between dense communication and sufficient-factor broadcasting (SFB),
/// decided at plan time. Two deciders, both `constexpr`:
///
///  - `poseidon_best_scheme`: Poseidon's Algorithm 1 (BestScheme, Sec. 3.2) exactly as
///    published, on Table 1's cost formulas (counts of floats sent and received per node per
///    iteration, P1 workers, P2 parameter servers, batch K per worker): an FC layer of
///    M x N goes SFB when 2K(P1-1)(M+N) <= 2MN(P1+P2-2)/P2 (SFB worker cost against PS
///    server-and-worker cost; ties go to SFB), everything else goes to the parameter
///    server ("PS", `scheme::dense` here).
///  - `best_scheme`: tcoll's generalisation. tcoll has no parameter server; it compares the
///    alpha-beta cost (plan/cost_model.hpp, calibrated link parameters) of what it would
///    actually run: a dense allreduce of the M*N gradient with the chosen algorithm, against
///    `sfb_allreduce` (sfb.hpp): ring allgathers of each rank's shape record (4 x 8 bytes),
///    K x M and K x N factors, plus the local reconstruction GEMM of P*K*M*N multiply-adds.
///
/// Decisions where the paper leaves a gap (see docs/hybrid.md):
///  - Table 1 counts are returned as `double` (the PS server-and-worker cost divides by P2);
///    Algorithm 1's comparison is evaluated multiplied through by P2, exact for counts below
///    2^53.
///  - Which factor is which: u_k (length M, the rows of the gradient) is the back-propagated
///    error of the layer's output, v_k (length N) the layer's input activation, so the
///    gradient of y = W x (W is M x N) is sum_k u_k v_k^T. Poseidon's Algorithm 1 calls M the
///    "width" and N the "height"; the costs are symmetric in M and N.
///  - A bias (or any non-FC tensor) is a `layer::dense` entry of its own: it always goes
///    dense, as Poseidon sends CONV layers to the PS.
///  - tcoll's decider breaks ties towards dense (exact, no reconstruction work) unless
///    `costs.ties_go_to_sfb`; one rank always goes dense (nothing to communicate).
///  - The reconstruction GEMM costs `gemm_us_per_multiply_add` per multiply-add (default 0:
///    Poseidon calls it "often negligible compared to communication", POS L135; measure it
///    with `calibrate_gemm_us`, calibrate_gemm.hpp). It is charged P*K*M*N multiply-adds, or
///    (P-1)*K*M*N with `factor_only_backward`: a backward that computes only the factors of
///    an SFB layer saves the K*M*N of the dense weight gradient it would have computed.
///  - Flat algorithms and the allgathers read `machine.inter` (as plan::allreduce_us does);
///    hierarchical dense algorithms use both levels, the SFB allgathers stay flat rings.
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "../compress/registry.hpp"
#include "../core/error.hpp"
#include "../plan/cost_model.hpp"

namespace tcoll::hybrid {

/// How one layer's gradient travels: a scheme of the compression registry
/// (compress/registry.hpp), of which a hybrid plan uses two: `dense` (the full gradient;
/// tcoll: dense allreduce; Poseidon: 'PS', the parameter server) and `sfb` (sufficient
/// factors, allgathered and reconstructed locally, `sfb_allreduce`). The scheduler refuses a
/// plan naming another.
using scheme = compression_scheme;

/// "dense" or "sfb" (the registry's name, `to_string`).
constexpr std::string_view scheme_name(scheme s) {
  return to_string(s);
}

/// What kind of tensor a layer's gradient is.
enum class layer_kind {
  fully_connected, ///< an M x N weight matrix whose per-sample gradient is u v^T
  dense_only,      ///< anything else (CONV, bias, normalisation): only dense is possible
};

/// One layer (one gradient tensor) of a model, as the deciders see it.
struct layer {
  layer_kind kind = layer_kind::dense_only;
  std::uint64_t rows = 0;     ///< M: rows of the weight gradient, length of u (FC only)
  std::uint64_t cols = 0;     ///< N: columns of the weight gradient, length of v (FC only)
  std::uint64_t elements = 0; ///< parameter count of a dense-only tensor

  /// A fully connected layer's M x N weight matrix (its bias is a separate `dense` layer).
  static constexpr layer fc(std::uint64_t M, std::uint64_t N) noexcept {
    return {layer_kind::fully_connected, M, N, M * N};
  }
  /// A tensor of `count` parameters that can only go dense.
  static constexpr layer dense(std::uint64_t count) noexcept {
    return {layer_kind::dense_only, 0, 0, count};
  }
  /// Parameters in the tensor (M*N for FC).
  constexpr std::uint64_t parameters() const noexcept {
    return kind == layer_kind::fully_connected ? rows * cols : elements;
  }
};

/// Poseidon Table 1: estimated floats sent and received per node per iteration to
/// synchronise an M x N FC layer with P1 workers, P2 servers and batch K per worker
/// (POS L126-131, verbatim formulas).
namespace table1 {
/// PS, a server: 2 P1 M N / P2.
constexpr double ps_server(double M, double N, double P1, double P2) noexcept {
  return 2.0 * P1 * M * N / P2;
}
/// PS, a worker: 2 M N.
constexpr double ps_worker(double M, double N) noexcept {
  return 2.0 * M * N;
}
/// PS, a node that is server and worker: 2 M N (P1 + P2 - 2) / P2.
constexpr double ps_server_worker(double M, double N, double P1, double P2) noexcept {
  return 2.0 * M * N * (P1 + P2 - 2.0) / P2;
}
/// SFB, a worker: 2 K (P1 - 1)(M + N).
constexpr double sfb_worker(double M, double N, double K, double P1) noexcept {
  return 2.0 * K * (P1 - 1.0) * (M + N);
}
/// Adam (max), a server: P1 M N + P1 K (M + N).
constexpr double adam_server(double M, double N, double K, double P1) noexcept {
  return P1 * M * N + P1 * K * (M + N);
}
/// Adam (max), a worker: K (M + N) + M N.
constexpr double adam_worker(double M, double N, double K) noexcept {
  return K * (M + N) + M * N;
}
/// Adam (max), server and worker: (P1 - 1)(M N + K M + K N).
constexpr double adam_server_worker(double M, double N, double K, double P1) noexcept {
  return (P1 - 1.0) * (M * N + K * M + K * N);
}
} // namespace table1

namespace detail {
inline void check_positive(long long value, const char* arg, const char* what) {
  if (value < 1)
    throw invalid_argument(std::string(what) + ": " + arg + " is " + std::to_string(value) +
                           " but must be at least 1");
}
constexpr void check_layer(const layer& l, const char* what) {
  if (l.kind == layer_kind::fully_connected && (l.rows == 0 || l.cols == 0))
    throw invalid_argument(std::string(what) + ": an FC layer needs M >= 1 and N >= 1, got " +
                           std::to_string(l.rows) + " x " + std::to_string(l.cols));
}
} // namespace detail

/// Poseidon's Algorithm 1 (BestScheme) as published: an FC layer goes SFB when
/// 2K(P1-1)(M+N) <= 2MN(P1+P2-2)/P2, anything else (and a costlier FC layer) goes dense
/// ('PS'). `workers` = P1, `servers` = P2, `batch` = K per worker; each must be >= 1
/// (else tcoll::invalid_argument naming it).
constexpr scheme poseidon_best_scheme(const layer& l, int workers, int servers, int batch) {
  if (workers < 1) detail::check_positive(workers, "workers (P1)", "poseidon_best_scheme");
  if (servers < 1) detail::check_positive(servers, "servers (P2)", "poseidon_best_scheme");
  if (batch < 1) detail::check_positive(batch, "batch (K)", "poseidon_best_scheme");
  detail::check_layer(l, "poseidon_best_scheme");
  if (l.kind != layer_kind::fully_connected) return scheme::dense;
  const double M = static_cast<double>(l.rows), N = static_cast<double>(l.cols);
  const double P1 = workers, P2 = servers, K = batch;
  // Line 7, multiplied through by P2 so that the tie is decided exactly.
  return table1::sfb_worker(M, N, K, P1) * P2 <= 2.0 * M * N * (P1 + P2 - 2.0) ? scheme::sfb
                                                                               : scheme::dense;
}

/// Knobs of tcoll's cost comparison (`best_scheme`).
struct sfb_costs {
  /// The allreduce a dense layer would run (an allreduce algorithm of the table of
  /// collectives; its form, if hierarchical, is `dense_form`).
  algorithm_id dense_algorithm = algorithm_id::ring;
  /// Calibrated link parameters (plan/calibrate.hpp); flat algorithms read `machine.inter`.
  plan::hierarchy_params machine{};
  /// Bytes per gradient element (4 for float).
  std::size_t element_bytes = 4;
  /// Cost of one multiply-add of the local reconstruction (P*K*M*N of them); 0 = ignored.
  double gemm_us_per_multiply_add = 0.0;
  /// Backward skips the dense weight gradient (K*M*N multiply-adds) of an SFB layer, so SFB
  /// adds only (P-1)*K*M*N multiply-adds over dense.
  bool factor_only_backward = false;
  /// Equal costs choose SFB (Poseidon's rule) instead of dense (tcoll's default).
  bool ties_go_to_sfb = false;
  /// The hierarchical allreduce's form, when `dense_algorithm` is hierarchical.
  hierarchical_form dense_form = hierarchical_form::sharded;
};

/// Multiply-adds SFB costs beyond dense for an M x N layer, `batch` samples per rank on
/// `ranks` ranks: the reconstruction's P*K*M*N, less the dense weight gradient's K*M*N when
/// backward skips it (`factor_only_backward`).
constexpr double sfb_extra_multiply_adds(const layer& l, int ranks, int batch,
                                         bool factor_only_backward) noexcept {
  const double gemms = factor_only_backward ? ranks - 1.0 : static_cast<double>(ranks);
  return gemms * batch * static_cast<double>(l.rows) * static_cast<double>(l.cols);
}

/// Ring allgather of `block_bytes` per rank on a flat link: (p-1) alpha + (p-1) b beta
/// (the ring half of plan::ring_allreduce_us, no reduction).
constexpr double ring_allgather_us(double block_bytes, int ranks, plan::link_params l) noexcept {
  if (ranks <= 1) return 0.0;
  const double p = ranks;
  return (p - 1.0) * (l.alpha_us + block_bytes * l.beta_us_per_byte);
}

/// Bytes of the per-rank shape record `sfb_allreduce` exchanges before the factors.
inline constexpr double sfb_shape_record_bytes = 4 * sizeof(std::uint64_t);

/// Modelled cost of a dense allreduce of layer `l` on `ranks` ranks.
constexpr double dense_cost_us(const layer& l, int ranks, const sfb_costs& c) {
  const double bytes = static_cast<double>(l.parameters()) * static_cast<double>(c.element_bytes);
  return plan::allreduce_us(c.dense_algorithm, bytes, ranks, c.machine, c.dense_form);
}

/// Modelled cost of `sfb_allreduce` of FC layer `l` with `batch` samples per rank: the
/// three ring allgathers (shape record, K x M, K x N) and the reconstruction GEMM.
constexpr double sfb_cost_us(const layer& l, int ranks, int batch, const sfb_costs& c) {
  const double K = batch, M = static_cast<double>(l.rows), N = static_cast<double>(l.cols);
  const double eb = static_cast<double>(c.element_bytes);
  const plan::link_params& net = c.machine.inter;
  return ring_allgather_us(sfb_shape_record_bytes, ranks, net) +
         ring_allgather_us(K * M * eb, ranks, net) + ring_allgather_us(K * N * eb, ranks, net) +
         c.gemm_us_per_multiply_add *
             sfb_extra_multiply_adds(l, ranks, batch, c.factor_only_backward);
}

/// The same comparison on any calibrated cost models (plan::cost_model: bytes -> us), for
/// example OSF's piecewise model fitted by plan/calibrate.hpp: `allreduce(bytes)` is the time
/// of a dense allreduce of `bytes` on the ranks in question, `allgather(bytes)` the time of
/// an allgather of `bytes` per rank. SFB costs the three allgathers plus the GEMM.
template <plan::cost_model Allreduce, plan::cost_model Allgather>
struct model_costs {
  Allreduce allreduce{};
  Allgather allgather{};
  std::size_t element_bytes = 4;         ///< bytes per gradient element
  double gemm_us_per_multiply_add = 0.0; ///< as in sfb_costs
  bool factor_only_backward = false;     ///< as in sfb_costs
  bool ties_go_to_sfb = false;           ///< as in sfb_costs
};

/// Modelled cost of a dense allreduce of layer `l` (model_costs form).
template <class A, class G>
constexpr double dense_cost_us(const layer& l, int, const model_costs<A, G>& c) {
  return static_cast<double>(
      c.allreduce(static_cast<double>(l.parameters()) * static_cast<double>(c.element_bytes)));
}

/// Modelled cost of `sfb_allreduce` of FC layer `l` (model_costs form).
template <class A, class G>
constexpr double sfb_cost_us(const layer& l, int ranks, int batch, const model_costs<A, G>& c) {
  const double K = batch, M = static_cast<double>(l.rows), N = static_cast<double>(l.cols);
  const double eb = static_cast<double>(c.element_bytes);
  return static_cast<double>(c.allgather(sfb_shape_record_bytes)) +
         static_cast<double>(c.allgather(K * M * eb)) +
         static_cast<double>(c.allgather(K * N * eb)) +
         c.gemm_us_per_multiply_add *
             sfb_extra_multiply_adds(l, ranks, batch, c.factor_only_backward);
}

/// What `best_scheme` needs of its costs: `sfb_costs` or a `model_costs`.
template <class C>
concept scheme_costs = requires(const C& c, const layer& l, int n) {
  { dense_cost_us(l, n, c) } -> std::convertible_to<double>;
  { sfb_cost_us(l, n, n, c) } -> std::convertible_to<double>;
  { c.ties_go_to_sfb } -> std::convertible_to<bool>;
};

/// tcoll's decider: SFB when the layer is FC and `sfb_cost_us` is below `dense_cost_us`
/// (ties: `c.ties_go_to_sfb`), dense otherwise; one rank is always dense. `ranks` and
/// `batch` (K per rank) must be >= 1 (else tcoll::invalid_argument naming them).
template <scheme_costs C = sfb_costs>
constexpr scheme best_scheme(const layer& l, int ranks, int batch, const C& c = {}) {
  if (ranks < 1) detail::check_positive(ranks, "ranks", "best_scheme");
  if (batch < 1) detail::check_positive(batch, "batch (K)", "best_scheme");
  detail::check_layer(l, "best_scheme");
  if (l.kind != layer_kind::fully_connected || ranks == 1) return scheme::dense;
  const double sfb = sfb_cost_us(l, ranks, batch, c), dense = dense_cost_us(l, ranks, c);
  return (sfb < dense || (c.ties_go_to_sfb && sfb == dense)) ? scheme::sfb : scheme::dense;
}

/// The scheme of every layer of a model by Poseidon's Algorithm 1; `out` has one entry per
/// layer (else tcoll::invalid_argument).
constexpr void poseidon_best_schemes(std::span<const layer> layers, int workers, int servers,
                                     int batch, std::span<scheme> out) {
  if (out.size() != layers.size())
    throw invalid_argument("poseidon_best_schemes: out has " + std::to_string(out.size()) +
                           " entries but there are " + std::to_string(layers.size()) + " layers");
  for (std::size_t i = 0; i < layers.size(); ++i)
    out[i] = poseidon_best_scheme(layers[i], workers, servers, batch);
}

/// The scheme of every layer of a model by Poseidon's Algorithm 1.
constexpr std::vector<scheme> poseidon_best_schemes(std::span<const layer> layers, int workers,
                                                    int servers, int batch) {
  std::vector<scheme> out(layers.size());
  poseidon_best_schemes(layers, workers, servers, batch, out);
  return out;
}

/// The scheme of every layer of a model by tcoll's cost comparison; `out` has one entry
/// per layer (else tcoll::invalid_argument). Call it at plan time: the answer depends only
/// on shapes, rank count, batch and the calibrated machine, so every rank gets the same.
template <scheme_costs C>
constexpr void best_schemes(std::span<const layer> layers, int ranks, int batch, const C& c,
                            std::span<scheme> out) {
  if (out.size() != layers.size())
    throw invalid_argument("best_schemes: out has " + std::to_string(out.size()) +
                           " entries but there are " + std::to_string(layers.size()) + " layers");
  for (std::size_t i = 0; i < layers.size(); ++i) out[i] = best_scheme(layers[i], ranks, batch, c);
}

/// The scheme of every layer of a model by tcoll's cost comparison.
template <scheme_costs C = sfb_costs>
constexpr std::vector<scheme> best_schemes(std::span<const layer> layers, int ranks, int batch,
                                           const C& c = {}) {
  std::vector<scheme> out(layers.size());
  best_schemes(layers, ranks, batch, c, std::span<scheme>(out));
  return out;
}

} // namespace tcoll::hybrid
