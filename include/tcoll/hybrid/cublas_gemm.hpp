#pragma once
/// \file
/// A cuBLAS GEMM policy for sufficient-factor reconstruction on the device (`gemm_policy`,
/// gemm.hpp): `sfb_allreduce` with a device reducer (`cuda_reducer`, `thrust_reducer`)
/// gathers the factors into device memory and hands those pointers to this policy. Include
/// it only where the CUDA toolkit is available and link `-lcublas`; the rest of tcoll never
/// includes it.
///
/// With row-major U (rows x M), V (rows x N) and G (M x N), cuBLAS's column-major view sees
/// G^T = V^T-view * U-view, i.e. `cublas<t>gemm(h, OP_N, OP_T, N, M, rows, 1, V, N, U, M, 0,
/// G, N)`: no transposed copies.
///
/// Determinism (what makes the ranks agree bitwise): cuBLAS GEMM gives the same bits for
/// the same shapes, data, GPU model, library version and math mode; atomics are disallowed
/// (`CUBLAS_ATOMICS_NOT_ALLOWED`, also cuBLAS's default) so no split-K reduction with
/// atomics can reorder sums. By default the math mode is `CUBLAS_PEDANTIC_MATH`: no TF32
/// tensor-core rounding of float inputs, whatever NVIDIA_TF32_OVERRIDE says, so the result
/// stays within the stated reassociation bound of the dense allreduce. All ranks must use
/// the same GPU model and cuBLAS version (as they must use the same build for `eigen_gemm`).
///
/// The policy is copied by value into every SFB call; copies share one handle. The GEMM is
/// queued on `stream` and the call waits for it, so the reducer's `finalize` (avg) on its own
/// stream sees the finished product.
#include <cstddef>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "../core/error.hpp"
#include "gemm.hpp"

namespace tcoll::hybrid {

namespace detail {
inline void check_cublas(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw transport_error(std::string("cublas_gemm: ") + what +
                          " failed: " + cublasGetStatusString(s));
}
inline void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw transport_error(std::string("cublas_gemm: ") + what +
                          " failed: " + cudaGetErrorString(e));
}
} // namespace detail

/// Knobs of `cublas_gemm`.
struct cublas_gemm_options {
  /// IEEE float products and sums only (no TF32). Off: cuBLAS's default math mode.
  bool pedantic = true;
};

/// G = U^T V through cuBLAS on device pointers (see the file comment).
class cublas_gemm {
public:
  /// Creates a handle on the current device, queueing on `stream` (0: the legacy default).
  explicit cublas_gemm(cudaStream_t stream = nullptr, cublas_gemm_options options = {})
      : stream_(stream) {
    cublasHandle_t h = nullptr;
    detail::check_cublas(cublasCreate(&h), "cublasCreate");
    handle_ = std::shared_ptr<cublasContext>(h, [](cublasHandle_t p) { cublasDestroy(p); });
    detail::check_cublas(cublasSetStream(h, stream), "cublasSetStream");
    detail::check_cublas(cublasSetAtomicsMode(h, CUBLAS_ATOMICS_NOT_ALLOWED),
                         "cublasSetAtomicsMode");
    detail::check_cublas(
        cublasSetMathMode(h, options.pedantic ? CUBLAS_PEDANTIC_MATH : CUBLAS_DEFAULT_MATH),
        "cublasSetMathMode");
  }

  template <class T>
  void sum_outer_products(const T* U, const T* V, std::size_t rows, std::size_t M, std::size_t N,
                          T* G) const {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                  "tcoll: cublas_gemm supports float and double");
    const int m = checked(N, "N"), n = checked(M, "M"), k = checked(rows, "rows");
    const T one = 1, zero = 0;
    cublasHandle_t h = handle_.get();
    if constexpr (std::is_same_v<T, float>)
      detail::check_cublas(
          cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, m, n, k, &one, V, m, U, n, &zero, G, m),
          "cublasSgemm");
    else
      detail::check_cublas(
          cublasDgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, m, n, k, &one, V, m, U, n, &zero, G, m),
          "cublasDgemm");
    detail::check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }

  cudaStream_t stream() const noexcept { return stream_; }

private:
  static int checked(std::size_t v, const char* what) {
    if (v > static_cast<std::size_t>(std::numeric_limits<int>::max()))
      throw invalid_argument(std::string("cublas_gemm: ") + what + " = " + std::to_string(v) +
                             " exceeds cuBLAS's int dimensions");
    return static_cast<int>(v);
  }

  std::shared_ptr<cublasContext> handle_;
  cudaStream_t stream_ = nullptr;
};

static_assert(gemm_policy<cublas_gemm, float> && gemm_policy<cublas_gemm, double>);

} // namespace tcoll::hybrid
