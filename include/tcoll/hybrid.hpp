#pragma once
/// \file
/// The hybrid-communication adaptor (Poseidon Sec. 3.2): per-layer choice between dense
/// allreduce and sufficient-factor broadcasting (`best_scheme`, `best_schemes`, Poseidon's
/// Algorithm 1 as `poseidon_best_scheme`), and the SFB collective itself (`sfb_allreduce`,
/// `isfb_allreduce`) with its GEMM policy (`host_gemm`), and Poseidon's Algorithm 2 over a
/// gradient pool (`hybrid_scheduler`, one sync job per tensor during backward), and
/// `calibrate_gemm_us` to measure the reconstruction's cost for the plan. The Eigen GEMM
/// policy is in hybrid/eigen_gemm.hpp (include it where Eigen is available). See docs/hybrid.md.
#include "hybrid/best_scheme.hpp"
#include "hybrid/calibrate_gemm.hpp"
#include "hybrid/gemm.hpp"
#include "hybrid/scheduler.hpp"
#include "hybrid/sfb.hpp"
