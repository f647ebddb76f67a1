#pragma once
/// \file
/// Rank-level test bodies shared by every transport's suite (threads, MPI, GPU).
///
/// Every rank of a transport calls the same body with the same options; each body runs a
/// deterministic sequence of collectives, so all ranks stay in step. Failures are reported
/// with doctest's (thread-safe) CHECK family and name algorithm, type, op, count, P, rank.
///
/// Expectations are computed in the test, never through the collective under test:
///  - sum/avg/min/max inputs are x(r, i) = u(i) + v(r) with small integers, so every partial
///    result is exactly representable in every element type (the nccl-tests trick) and the
///    exact result has a closed form (sum = P u(i) + sum_r v(r), min = u(i) + min_r v(r));
///  - prod inputs are in {1, 2} (unsigned, float, double, bfloat16) or {-1, 1} (signed
///    integers, half), products are exact (or wrap identically for narrow unsigned types);
///  - the non-commutative op composes affine maps x -> m x + c (mod 2^h) packed into one
///    unsigned integer: associative but not commutative, so only the rank-order fold
///    x_0 . x_1 . ... . x_{P-1} is right (a * 3 + b is not associative, so no tree algorithm
///    could reproduce its left fold; MPI also requires user ops to be associative).
///  - cross-rank identity is checked with plain isend/irecv of a hash of the output bytes to
///    rank 0 (not through any collective).
///
/// Buffers go through a `Buffers` policy so the GPU suite can run the same bodies on device
/// memory: `allocate<T>(n)`, `upload(buf, host_vector)`, `download<T>(buf, n)`, `reducer()`.
///
/// The bodies live in one header per topic under tests/common/cases/, each including the
/// one before it; this header includes them all:
///  - cases/level.hpp: Test level: how much of the matrix to run.
///  - cases/buffers.hpp: Buffer policy.
///  - cases/utilities.hpp: Small utilities.
///  - cases/types.hpp: Element types and ops.
///  - cases/inputs.hpp: Inputs with exactly known results.
///  - cases/algorithms.hpp: Algorithms.
///  - cases/allreduce.hpp: Allreduce matrix.
///  - cases/reduced_precision.hpp: Reduced precision with rounding: half/bfloat16 on fractional
///  inputs.
///  - cases/noncommutative.hpp: Non-commutative op: allreduce of the order-keeping algorithms and
///  reduce to every root.
///  - cases/collectives.hpp: reduce_scatter, allgather, broadcast, reduce with values (float and
///  int32 sum).
///  - cases/symbolic.hpp: Symbolic proof: every output element holds every rank's contribution
///  exactly once.
///  - cases/traffic.hpp: Traffic: closed-form per-rank message and byte counts.
///  - cases/bad_input.hpp: Bad input.
///  - cases/alltoall.hpp: alltoall and alltoallv with fractional values, uneven blocks, in place.
///  - cases/gather_scatter.hpp: gather(v) and scatter(v) to and from every root, likewise.
///  - cases/barrier.hpp: no rank leaves a barrier before the last has arrived.
///  - cases/uneven_blocks.hpp: reduce_scatterv and allgatherv, blocks of their own sizes.
#include "cases/uneven_blocks.hpp"
#include "cases/bad_input.hpp"
