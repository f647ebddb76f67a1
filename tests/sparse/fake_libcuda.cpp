// A stand-in for the CUDA driver (built with soname libcuda.so.1) for test_memory_check.cpp:
// it answers `cuPointerGetAttribute` like the real driver for two address ranges the test
// declares "device" and "managed" memory, and with CUDA_ERROR_INVALID_VALUE (memory the
// driver never saw) for every other address. It lets a machine without a GPU exercise the
// dlopen / dlsym path of include/tcoll/detail/memory_kind.hpp and the adaptor's check.
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace {
std::uintptr_t device_begin = 0, device_end = 0, managed_begin = 0, managed_end = 0;
std::atomic<int> queries{0};
} // namespace

extern "C" {

/// Declares [device, device + device_bytes) device memory and [managed, managed +
/// managed_bytes) managed memory (empty ranges: none).
__attribute__((visibility("default"))) void tcoll_fake_cuda_set(const void* device,
                                                                std::size_t device_bytes,
                                                                const void* managed,
                                                                std::size_t managed_bytes) {
  device_begin = reinterpret_cast<std::uintptr_t>(device);
  device_end = device_begin + device_bytes;
  managed_begin = reinterpret_cast<std::uintptr_t>(managed);
  managed_end = managed_begin + managed_bytes;
}

/// How many times cuPointerGetAttribute was called.
__attribute__((visibility("default"))) int tcoll_fake_cuda_queries() {
  return queries.load();
}

/// CU_POINTER_ATTRIBUTE_MEMORY_TYPE (2) and CU_POINTER_ATTRIBUTE_IS_MANAGED (8); results as the
/// driver's: CUDA_SUCCESS (0), CUDA_ERROR_INVALID_VALUE (1).
__attribute__((visibility("default"))) int cuPointerGetAttribute(void* data, int attribute,
                                                                 unsigned long long ptr) {
  ++queries;
  const auto p = static_cast<std::uintptr_t>(ptr);
  const bool device = p >= device_begin && p < device_end;
  const bool managed = p >= managed_begin && p < managed_end;
  if (!device && !managed) return 1;
  if (attribute == 2) {
    *static_cast<unsigned*>(data) = 2; // CU_MEMORYTYPE_DEVICE (managed memory reports it too)
    return 0;
  }
  if (attribute == 8) {
    *static_cast<unsigned*>(data) = managed ? 1u : 0u;
    return 0;
  }
  return 1;
}

} // extern "C"
