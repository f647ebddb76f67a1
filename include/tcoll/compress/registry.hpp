#pragma once
/// \file
/// The registry of compression schemes: one enum of schemes and, for each, one description
/// (its name in options, command lines and reports; what travels on the wire; the knobs it
/// reads; the per-element state it keeps; what the optimizer must do with its result; where
/// it lives). The training app (`--scheme`), `tcoll_torch.DistributedDataParallel`
/// (`scheme=`) and its hooks, `sparse_perf` (`-m`) and the hybrid adaptor's per-layer plans
/// (`hybrid::scheme`: dense or sfb) look schemes up here: one parser, one set of names. It is
/// data only (no adaptor); compress/adaptor_options.hpp turns a scheme's knobs into its
/// adaptor's options.
///
/// A new scheme is its adaptor (a header of `sparse/`, `hybrid/` or `compress/`), its line
/// here and its test case; the integrations list what they can run from this table.
///
/// Knob defaults: `compression_options` holds one value per knob, the adaptors' own
/// defaults (`sparse::csc_options`, `sparse::topk_pool_options`); integrations override
/// them where a model needs it (the training app's MLP takes 1,000-element chunks,
/// docs/train.md).
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>

#include "../core/error.hpp"
#include "../core/scalar_type.hpp"
#include "../core/types.hpp"
#include "../sparse/chunk_ops.hpp"

namespace tcoll {

/// Every compression scheme, by its name in options, command lines and reports.
enum class compression_scheme : std::uint8_t {
  dense,    ///< every element, in the gradient's own type (no compression)
  half,     ///< every element as IEEE half on the wire, accumulated in float
  bfloat16, ///< every element as bfloat16 on the wire, accumulated in float
  topk,     ///< each rank's k largest elements as (index, value) pairs, with a residual
  dgc,      ///< Deep Gradient Compression: momentum correction and masking around top-k
  csc,      ///< GradientFlow's coarse-grained sparse communication: the important chunks
  sfb,      ///< Poseidon's sufficient factors of fully connected layers, per layer
};

/// Every value of `compression_scheme`, in order.
inline constexpr std::array<compression_scheme, 7> all_compression_schemes{
    compression_scheme::dense, compression_scheme::half, compression_scheme::bfloat16,
    compression_scheme::topk,  compression_scheme::dgc,  compression_scheme::csc,
    compression_scheme::sfb};

/// What a scheme sends.
enum class compression_family : std::uint8_t {
  dense,              ///< every element, in the gradient's type
  wire_format,        ///< every element, cast to a narrower type for the wire
  sparse_elements,    ///< selected elements as (index, value) pairs (allgathered)
  sparse_chunks,      ///< selected chunks of the pool (allreduced), chosen by their norms
  sufficient_factors, ///< per fully connected layer, the factors u, v of u v^T (allgathered)
};

/// The name of family `f` (its enumerator's).
constexpr std::string_view to_string(compression_family f) {
  switch (f) {
  case compression_family::dense:
    return "dense";
  case compression_family::wire_format:
    return "wire_format";
  case compression_family::sparse_elements:
    return "sparse_elements";
  case compression_family::sparse_chunks:
    return "sparse_chunks";
  case compression_family::sufficient_factors:
    return "sufficient_factors";
  }
  return "?";
}

/// The knobs of `compression_options`, as bits of a description's `knobs` mask.
enum class compression_knob : std::uint16_t {
  density = 1,           ///< fraction sent after the warm-up
  warmup_iterations = 2, ///< iterations of the linear ramp from dense to `density`
  residual = 4,          ///< what becomes of what was not sent (`sparse::residual_rule`)
  momentum = 8,          ///< DGC's momentum factor; the scale of a `momentum_scaled` residual
  chunk_elements = 16,   ///< elements per chunk
  threshold_bytes = 32,  ///< a buffer's allreduce starts past this many bytes
  wire_scale = 64,       ///< values are multiplied by it before the cast to the wire type
};

/// Every knob, in the order of its bit.
inline constexpr std::array<compression_knob, 7> all_compression_knobs{
    compression_knob::density,        compression_knob::warmup_iterations,
    compression_knob::residual,       compression_knob::momentum,
    compression_knob::chunk_elements, compression_knob::threshold_bytes,
    compression_knob::wire_scale};

/// The name of knob `k` (the field of `compression_options`, the keyword of
/// `tcoll_torch.DistributedDataParallel`).
constexpr std::string_view to_string(compression_knob k) {
  switch (k) {
  case compression_knob::density:
    return "density";
  case compression_knob::warmup_iterations:
    return "warmup_iterations";
  case compression_knob::residual:
    return "residual";
  case compression_knob::momentum:
    return "momentum";
  case compression_knob::chunk_elements:
    return "chunk_elements";
  case compression_knob::threshold_bytes:
    return "threshold_bytes";
  case compression_knob::wire_scale:
    return "wire_scale";
  }
  return "?";
}

/// One line of the registry.
struct compression_description {
  compression_scheme id;
  std::string_view name;  ///< in options, command lines and reports
  std::string_view title; ///< one line: what it is and where it comes from
  compression_family family;
  /// The element type of the values on the wire (the pairs' values of `sparse_elements`).
  scalar_type wire;
  std::uint16_t knobs; ///< the `compression_knob` bits it reads
  /// The residual rules it takes (bits `1 << residual_rule`); 0 where it keeps none.
  std::uint8_t residual_rules;
  /// Its per-element state, laid out like the pool, in the order the adaptor returns it.
  std::span<const std::string_view> state;
  /// The momentum is inside the result: apply it with plain SGD (no momentum of the
  /// optimizer's own).
  bool momentum_in_result;
  /// It selects over the whole gradient, so it starts once every tensor is ready (no
  /// overlap with backward).
  bool needs_whole_pool;
  std::string_view header; ///< its adaptor, under include/tcoll/
};

namespace detail {
constexpr std::uint16_t knob_bits(std::initializer_list<compression_knob> ks) {
  std::uint16_t bits = 0;
  for (compression_knob k : ks) bits |= static_cast<std::uint16_t>(k);
  return bits;
}
constexpr std::uint8_t residual_bits(std::initializer_list<sparse::residual_rule> rs) {
  std::uint8_t bits = 0;
  for (sparse::residual_rule r : rs) bits |= static_cast<std::uint8_t>(1u << static_cast<int>(r));
  return bits;
}
inline constexpr std::string_view residual_state[] = {"residual"};
inline constexpr std::string_view dgc_state[] = {"velocity", "accumulation"};
} // namespace detail

/// The registry, in the order of `compression_scheme`.
inline constexpr std::array<compression_description, all_compression_schemes.size()>
    compression_registry{{
        {compression_scheme::dense,
         "dense",
         "every element in the gradient's type",
         compression_family::dense,
         scalar_type::float32,
         0,
         0,
         {},
         false,
         false,
         "schedule/scheduler.hpp"},
        {compression_scheme::half,
         "half",
         "every element as IEEE half on the wire, accumulated in float (GradientFlow Sec. 2.5)",
         compression_family::wire_format,
         scalar_type::float16,
         detail::knob_bits({compression_knob::wire_scale}),
         0,
         {},
         false,
         false,
         "compress/mixed_precision.hpp"},
        {compression_scheme::bfloat16,
         "bfloat16",
         "every element as bfloat16 on the wire, accumulated in float (GradientFlow Sec. 2.5)",
         compression_family::wire_format,
         scalar_type::bfloat16,
         detail::knob_bits({compression_knob::wire_scale}),
         0,
         {},
         false,
         false,
         "compress/mixed_precision.hpp"},
        {compression_scheme::topk, "topk",
         "each rank's k largest elements as (index, value) pairs, allgathered and summed, "
         "with a residual (GradientFlow Sec. 3.2's fine-grained baseline)",
         compression_family::sparse_elements, scalar_type::float32,
         detail::knob_bits({compression_knob::density, compression_knob::warmup_iterations,
                            compression_knob::residual, compression_knob::momentum}),
         detail::residual_bits({sparse::residual_rule::error_feedback,
                                sparse::residual_rule::momentum_scaled,
                                sparse::residual_rule::none}),
         detail::residual_state, false, true, "sparse/topk_pool.hpp"},
        {compression_scheme::dgc, "dgc",
         "Deep Gradient Compression: momentum correction and momentum factor masking around "
         "top-k (Lin et al. 2018, Sec. 3.2)",
         compression_family::sparse_elements, scalar_type::float32,
         detail::knob_bits({compression_knob::density, compression_knob::warmup_iterations,
                            compression_knob::momentum}),
         0, detail::dgc_state, true, true, "sparse/topk_pool.hpp"},
        {compression_scheme::csc, "csc",
         "GradientFlow's coarse-grained sparse communication: the chunks of largest L1 norm, "
         "allreduced in buffers during backward (Sec. 3.2, Algorithm 1)",
         compression_family::sparse_chunks, scalar_type::float32,
         detail::knob_bits({compression_knob::density, compression_knob::warmup_iterations,
                            compression_knob::residual, compression_knob::momentum,
                            compression_knob::chunk_elements, compression_knob::threshold_bytes}),
         detail::residual_bits({sparse::residual_rule::momentum_scaled,
                                sparse::residual_rule::error_feedback,
                                sparse::residual_rule::none}),
         detail::residual_state, false, false, "sparse/csc.hpp"},
        {compression_scheme::sfb,
         "sfb",
         "Poseidon's sufficient factor broadcasting: a fully connected layer's gradient as "
         "its per-sample factors, chosen per layer against dense (hybrid communication)",
         compression_family::sufficient_factors,
         scalar_type::float32,
         0,
         0,
         {},
         false,
         false,
         "hybrid/sfb.hpp"},
    }};

/// The registry's line of `s`.
constexpr const compression_description& describe(compression_scheme s) {
  return compression_registry[static_cast<std::size_t>(s)];
}

/// The name of `s` ("dense", "half", "bfloat16", "topk", "dgc", "csc", "sfb").
constexpr std::string_view to_string(compression_scheme s) {
  return describe(s).name;
}

/// Every scheme's name, comma-separated (for errors and usage text).
inline std::string compression_scheme_names() {
  std::string names;
  for (const compression_description& d : compression_registry)
    names += (names.empty() ? "" : ", ") + std::string(d.name);
  return names;
}

/// The scheme named `name`, or `invalid_argument` listing every name (`rank` labels it).
inline compression_scheme parse_compression(std::string_view name, int rank = -1) {
  for (const compression_description& d : compression_registry)
    if (d.name == name) return d.id;
  throw invalid_argument("unknown compression scheme '" + std::string(name) +
                             "' (schemes: " + compression_scheme_names() + ")",
                         rank);
}

/// The residual rule named `name` ("momentum_scaled", "error_feedback", "none"), or
/// `invalid_argument` listing them.
inline sparse::residual_rule parse_residual_rule(std::string_view name, int rank = -1) {
  for (sparse::residual_rule r :
       {sparse::residual_rule::momentum_scaled, sparse::residual_rule::error_feedback,
        sparse::residual_rule::none})
    if (name == to_string(r)) return r;
  throw invalid_argument("unknown residual rule '" + std::string(name) +
                             "' (momentum_scaled: GradientFlow Algorithm 1's momentum * g; "
                             "error_feedback: g; none: dropped)",
                         rank);
}

/// Does scheme `s` read knob `k`?
constexpr bool takes_knob(compression_scheme s, compression_knob k) {
  return (describe(s).knobs & static_cast<std::uint16_t>(k)) != 0;
}

/// Does scheme `s` keep a residual by rule `r`?
constexpr bool takes_residual(compression_scheme s, sparse::residual_rule r) {
  return (describe(s).residual_rules & (1u << static_cast<int>(r))) != 0;
}

/// Every knob of scheme `s`, comma-separated ("none" for none).
inline std::string knob_names(compression_scheme s) {
  std::string names;
  for (compression_knob k : all_compression_knobs)
    if (takes_knob(s, k)) names += (names.empty() ? "" : ", ") + std::string(to_string(k));
  return names.empty() ? "none" : names;
}

/// Throws `invalid_argument` when a knob the caller set (`set`, bits of `compression_knob`)
/// is not one scheme `s` reads, naming the knob and the scheme's own; `who` starts the
/// message.
inline void check_knobs(compression_scheme s, std::uint16_t set, std::string_view who,
                        int rank = -1) {
  for (compression_knob k : all_compression_knobs)
    if ((set & static_cast<std::uint16_t>(k)) && !takes_knob(s, k))
      throw invalid_argument(std::string(who) + ": scheme '" + std::string(to_string(s)) +
                                 "' takes no knob '" + std::string(to_string(k)) +
                                 "' (its knobs: " + knob_names(s) + ")",
                             rank);
}

/// The knobs of every scheme (each scheme reads those its description lists). The member
/// defaults are csc's; `default_compression_options` (compress/adaptor_options.hpp) gives
/// each scheme its adaptor's own.
struct compression_options {
  double density = 0.15;               ///< topk, dgc, csc: fraction sent after the warm-up
  std::size_t warmup_iterations = 100; ///< topk, dgc, csc
  /// topk, csc: what becomes of what was not sent.
  sparse::residual_rule residual = sparse::residual_rule::error_feedback;
  double momentum = 0.9;                              ///< dgc; topk and csc with `momentum_scaled`
  std::size_t chunk_elements = 32000;                 ///< csc
  std::size_t threshold_bytes = std::size_t{4} << 20; ///< csc
  float wire_scale = 1.0f;                            ///< half, bfloat16
};

/// Calls `f(type_tag<Wire>{})` with the wire type of a dense or wire-format scheme (float,
/// half, bfloat16); `invalid_argument` for a scheme that is neither.
template <class F>
decltype(auto) visit_wire_type(compression_scheme s, F&& f) {
  switch (s) {
  case compression_scheme::dense:
    return f(type_tag<float>{});
  case compression_scheme::half:
    return f(type_tag<half>{});
  case compression_scheme::bfloat16:
    return f(type_tag<bfloat16>{});
  default:
    throw invalid_argument("visit_wire_type: scheme '" + std::string(to_string(s)) +
                           "' is not dense or a wire format");
  }
}

} // namespace tcoll
