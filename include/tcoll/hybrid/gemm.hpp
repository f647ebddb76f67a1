#pragma once
/// \file
/// The GEMM policy of sufficient-factor reconstruction and its default host implementation.
///
/// SFB reconstruction needs one product: given the gathered factors U (rows x M) and
/// V (rows x N), both row-major with row k holding the k-th sample's u_k and v_k, write the
/// M x N row-major gradient G = U^T V = sum_k u_k v_k^T (overwriting G). A policy provides
///
///     void sum_outer_products(const T* U, const T* V, std::size_t rows,
///                             std::size_t M, std::size_t N, T* G);
///
/// and must be a deterministic function of (rows, M, N, the bits of U and V): every rank
/// calls it on the same gathered buffers, and that is what makes the ranks agree bitwise.
/// The pointers are where the reducer's buffers live, so a device policy (cuBLAS: with
/// row-major data, G^T = V^T U is `cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, N, M, rows, &1,
/// V, N, U, M, &0, G, N)`) fits the same call with a handle and stream as members:
/// `cublas_gemm.hpp`. `eigen_gemm.hpp` has an Eigen policy.
#include <algorithm>
#include <concepts>
#include <cstddef>

namespace tcoll::hybrid {

/// A GEMM policy for element type `T` (see the file comment).
template <class G, class T>
concept gemm_policy = requires(G& g, const T* a, const T* b, T* c, std::size_t n) {
  g.sum_outer_products(a, b, n, n, n, c);
};

/// The default host GEMM: a plain loop, blocked over tiles of G so that a tile stays in
/// cache while the rows of U and V stream past. Every element is summed in one fixed
/// order, G[i][j] = (((0 + U[0][i] V[0][j]) + U[1][i] V[1][j]) + ...), whatever the tile
/// sizes, so the result does not depend on the knobs (nor on the machine, for IEEE types
/// without contraction into FMA: the library is built with ISO C++ flags, where GCC and
/// Clang do not contract across statements; the product and sum here are separate).
struct host_gemm {
  std::size_t tile_rows = 32;  ///< rows of G per tile
  std::size_t tile_cols = 512; ///< columns of G per tile

  template <class T>
  void sum_outer_products(const T* U, const T* V, std::size_t rows, std::size_t M, std::size_t N,
                          T* G) const {
    std::fill(G, G + M * N, T{});
    const std::size_t tr = tile_rows ? tile_rows : 1, tc = tile_cols ? tile_cols : 1;
    for (std::size_t i0 = 0; i0 < M; i0 += tr) {
      const std::size_t i1 = std::min(M, i0 + tr);
      for (std::size_t j0 = 0; j0 < N; j0 += tc) {
        const std::size_t j1 = std::min(N, j0 + tc);
        for (std::size_t k = 0; k < rows; ++k) {
          const T* v = V + k * N;
          for (std::size_t i = i0; i < i1; ++i) {
            const T a = U[k * M + i];
            T* g = G + i * N;
            for (std::size_t j = j0; j < j1; ++j) {
              const T p = a * v[j];
              g[j] = g[j] + p;
            }
          }
        }
      }
    }
  }
};

static_assert(gemm_policy<host_gemm, float> && gemm_policy<host_gemm, double>);

} // namespace tcoll::hybrid
