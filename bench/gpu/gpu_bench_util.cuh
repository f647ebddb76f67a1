#pragma once
// Helpers shared by the GPU benchmarks (reduce_perf, allreduce_perf_gpu).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>

#include <tcoll/algorithm/select.hpp>
#include <tcoll/core/error.hpp>

namespace tcoll::bench {

/// "64", "8K", "256M", "1G"; a bad size ends the program with the reason.
inline std::size_t parse_bytes_or_exit(const char* tool, const char* text) {
  try {
    return tcoll::parse_bytes(text);
  } catch (const tcoll::invalid_argument& e) {
    std::fprintf(stderr, "%s: %s\n", tool, e.what());
    std::exit(2);
  }
}

/// Ends the program with the CUDA error's name when `e` is not cudaSuccess.
inline void check_or_exit(const char* tool, cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s: %s\n", tool, what, cudaGetErrorString(e));
    std::exit(1);
  }
}

} // namespace tcoll::bench
