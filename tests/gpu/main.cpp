// doctest main of the GPU suite: without a usable CUDA device it prints why and exits 77,
// which meson reports as SKIP (CI has no GPU; the suite must still pass there).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cuda_runtime_api.h>

#include <cstdio>

int main(int argc, char** argv) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    std::printf("SKIP: no CUDA device (cudaGetDeviceCount: %s, %d devices)\n",
                e == cudaSuccess ? "cudaSuccess" : cudaGetErrorName(e), count);
    return 77;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
    std::printf("GPU 0: %s, compute capability %d.%d, %d SMs, %d devices\n", prop.name, prop.major,
                prop.minor, prop.multiProcessorCount, count);
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
