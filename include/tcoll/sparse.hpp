#pragma once
/// \file
/// The sparse-chunk adaptor (GradientFlow Sec. 3.2, coarse-grained sparse communication):
/// chunk layout and selection, the per-chunk host policy, `csc_allreduce` over a gradient
/// pool, the Algorithm 1 momentum step, and the fine-grained top-k baseline.
#include "sparse/chunk_ops.hpp"
#include "sparse/chunks.hpp"
#include "sparse/csc.hpp"
#include "sparse/momentum.hpp"
#include "sparse/topk.hpp"
#include "sparse/topk_pool.hpp"
