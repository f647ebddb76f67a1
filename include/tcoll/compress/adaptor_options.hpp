#pragma once
/// \file
/// The one place a compression scheme's knobs (`compression_options`, compress/registry.hpp)
/// become its adaptor's options: each scheme's defaults (its adaptor's own) and the
/// conversions to `sparse::csc_options` and `sparse::topk_pool_options`. Apart from the
/// registry, which is data only, so that reading the table does not compile the adaptors.
#include <string>

#include "../core/error.hpp"
#include "../sparse/csc.hpp"
#include "../sparse/topk_pool.hpp"
#include "registry.hpp"

namespace tcoll {

/// Scheme `s`'s knobs at its adaptor's defaults: `sparse::csc_options`' for csc,
/// `sparse::topk_pool_options`' for topk and dgc (density 0.01, no warm-up), the members'
/// for the others.
inline compression_options default_compression_options(compression_scheme s) {
  compression_options o;
  if (s == compression_scheme::topk || s == compression_scheme::dgc) {
    const sparse::topk_pool_options t;
    o.density = t.density;
    o.warmup_iterations = t.warmup_iterations;
    o.residual = t.residual;
    o.momentum = t.momentum;
  } else if (s == compression_scheme::csc) {
    const sparse::csc_options c;
    o.density = c.density;
    o.warmup_iterations = c.warmup_iterations;
    o.residual = c.residual;
    o.momentum = c.momentum;
    o.chunk_elements = c.chunk_elements;
    o.threshold_bytes = c.threshold_bytes;
  }
  return o;
}

/// `o` for the sparse-chunk adaptor (scheme csc). Throws when `o.residual` is not one csc
/// takes.
inline sparse::csc_options to_csc_options(const compression_options& o, int rank = -1) {
  if (!takes_residual(compression_scheme::csc, o.residual))
    throw invalid_argument("csc: residual '" + std::string(sparse::to_string(o.residual)) +
                               "' is not one it takes",
                           rank);
  sparse::csc_options c;
  c.density = o.density;
  c.warmup_iterations = o.warmup_iterations;
  c.residual = o.residual;
  c.momentum = o.momentum;
  c.chunk_elements = o.chunk_elements;
  c.threshold_bytes = o.threshold_bytes;
  return c;
}

/// `o` for the top-k pool adaptor (schemes topk and dgc; `invalid_argument` for another).
inline sparse::topk_pool_options to_topk_pool_options(compression_scheme s,
                                                      const compression_options& o, int rank = -1) {
  if (s != compression_scheme::topk && s != compression_scheme::dgc)
    throw invalid_argument("to_topk_pool_options: scheme '" + std::string(to_string(s)) +
                               "' is not topk or dgc",
                           rank);
  sparse::topk_pool_options t;
  t.scheme = s == compression_scheme::dgc ? sparse::topk_scheme::dgc : sparse::topk_scheme::topk;
  t.density = o.density;
  t.warmup_iterations = o.warmup_iterations;
  t.momentum = o.momentum;
  t.residual = s == compression_scheme::dgc ? sparse::residual_rule::none : o.residual;
  return t;
}

} // namespace tcoll
