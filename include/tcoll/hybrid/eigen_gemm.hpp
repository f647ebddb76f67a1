#pragma once
/// \file
/// An Eigen GEMM policy for sufficient-factor reconstruction (`gemm_policy`, gemm.hpp).
/// Include it only where Eigen 3 is available (meson: `dependency('eigen3')`); the rest of
/// tcoll never includes it.
///
/// Determinism: Eigen's product kernel is a fixed function of the shapes, the data and the
/// build (its blocking depends on the cache sizes it detects, which are the same on
/// identical machines). All ranks must therefore run the same build on the same kind of
/// CPU; with Eigen's OpenMP parallelism enabled set `Eigen::setNbThreads(1)` to be sure.
/// Eigen sums in a different order than `host_gemm`, so the two agree only up to
/// reassociation (exactly for integer-valued factors).
#include <cstddef>

#include <Eigen/Core>

#include "gemm.hpp"

namespace tcoll::hybrid {

/// G = U^T V through Eigen (row-major maps, no copies).
struct eigen_gemm {
  template <class T>
  void sum_outer_products(const T* U, const T* V, std::size_t rows, std::size_t M, std::size_t N,
                          T* G) const {
    using matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    using index = Eigen::Index;
    Eigen::Map<const matrix> u(U, static_cast<index>(rows), static_cast<index>(M));
    Eigen::Map<const matrix> v(V, static_cast<index>(rows), static_cast<index>(N));
    Eigen::Map<matrix> g(G, static_cast<index>(M), static_cast<index>(N));
    g.noalias() = u.transpose() * v;
  }
};

static_assert(gemm_policy<eigen_gemm, float> && gemm_policy<eigen_gemm, double>);

} // namespace tcoll::hybrid
