#pragma once
/// \file
/// Where a pointer lives (host or device memory), asked of the CUDA driver without linking
/// it: host code that binds to a buffer once (an adaptor over a gradient pool) checks the
/// buffer here and throws a clear error instead of crashing in its first host loop over
/// device memory, or launching kernels on pageable host memory.
///
/// The driver (`libcuda.so.1`) is looked up with `dlopen(RTLD_NOLOAD)`: it is never loaded
/// by this check. If it is not loaded, the process has made no CUDA allocation, so no
/// device pointer can exist and every pointer is host memory. Once found, the driver's
/// `cuPointerGetAttribute` is cached. One query costs about a microsecond: call this where
/// a buffer is bound (construction), not per element or per call on hot paths.
#include <atomic>
#include <cstdint>
#include <string>

#if __has_include(<dlfcn.h>)
#include <dlfcn.h>
#define TCOLL_HAVE_DLFCN 1
#else
#define TCOLL_HAVE_DLFCN 0
#endif

#include "../core/error.hpp"

namespace tcoll::detail {

/// Where a pointer's memory lives, as far as the host and a GPU can reach it.
enum class memory_kind {
  host,            ///< ordinary (pageable) host memory, or no CUDA driver in the process
  host_registered, ///< page-locked host memory known to CUDA (cudaMallocHost, registered)
  managed,         ///< CUDA managed (unified) memory: reachable from the host and the GPU
  device,          ///< device memory: the host cannot dereference it
};

/// Name of a memory kind, for messages.
inline const char* to_string(memory_kind k) noexcept {
  switch (k) {
  case memory_kind::host:
    return "host memory";
  case memory_kind::host_registered:
    return "page-locked host memory";
  case memory_kind::managed:
    return "CUDA managed memory";
  case memory_kind::device:
    return "CUDA device memory";
  }
  return "unknown memory";
}

/// May host code read and write memory of kind `k`?
constexpr bool host_accessible(memory_kind k) noexcept {
  return k != memory_kind::device;
}
/// May a CUDA kernel read and write memory of kind `k`?
constexpr bool device_accessible(memory_kind k) noexcept {
  return k != memory_kind::host;
}

namespace cuda_driver {

/// `CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr)`
/// with the driver's enums as plain integers (this header includes no CUDA header).
using pointer_get_attribute_fn = int (*)(void*, int, unsigned long long);
inline constexpr int attribute_memory_type = 2;    ///< CU_POINTER_ATTRIBUTE_MEMORY_TYPE
inline constexpr int attribute_is_managed = 8;     ///< CU_POINTER_ATTRIBUTE_IS_MANAGED
inline constexpr unsigned memory_type_host = 1;    ///< CU_MEMORYTYPE_HOST
inline constexpr unsigned memory_type_device = 2;  ///< CU_MEMORYTYPE_DEVICE
inline constexpr unsigned memory_type_array = 3;   ///< CU_MEMORYTYPE_ARRAY
inline constexpr unsigned memory_type_unified = 4; ///< CU_MEMORYTYPE_UNIFIED

/// The loaded driver's `cuPointerGetAttribute`, or null when no driver is loaded. A miss is
/// not cached (the process may load the driver later); a hit is, and its handle is kept.
inline pointer_get_attribute_fn pointer_get_attribute() noexcept {
#if TCOLL_HAVE_DLFCN
  static std::atomic<pointer_get_attribute_fn> cached{nullptr};
  if (auto f = cached.load(std::memory_order_acquire)) return f;
  void* lib = ::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (!lib) return nullptr;
  auto f = reinterpret_cast<pointer_get_attribute_fn>(::dlsym(lib, "cuPointerGetAttribute"));
  if (!f) {
    ::dlclose(lib);
    return nullptr;
  }
  cached.store(f, std::memory_order_release); // a racing thread stores the same symbol
  return f;
#else
  return nullptr;
#endif
}

} // namespace cuda_driver

/// Where `p` lives (see the file comment). Null, pageable host memory, a process without a
/// loaded CUDA driver and any pointer the driver does not know are `host`.
inline memory_kind pointer_memory_kind(const void* p) noexcept {
  if (!p) return memory_kind::host;
  const auto get = cuda_driver::pointer_get_attribute();
  if (!get) return memory_kind::host;
  const auto addr = static_cast<unsigned long long>(reinterpret_cast<std::uintptr_t>(p));
  unsigned type = 0;
  // CUDA_ERROR_INVALID_VALUE for memory CUDA never saw, CUDA_ERROR_NOT_INITIALIZED when the
  // driver is loaded but unused: host memory either way
  if (get(&type, cuda_driver::attribute_memory_type, addr) != 0) return memory_kind::host;
  unsigned managed = 0;
  if (get(&managed, cuda_driver::attribute_is_managed, addr) == 0 && managed)
    return memory_kind::managed;
  switch (type) {
  case cuda_driver::memory_type_host:
    return memory_kind::host_registered;
  case cuda_driver::memory_type_unified:
    return memory_kind::managed;
  case cuda_driver::memory_type_device:
  case cuda_driver::memory_type_array:
    return memory_kind::device;
  default:
    return memory_kind::host;
  }
}

/// Throws `invalid_argument` naming `who`, `what` (the argument) and `rank` when memory of
/// kind `k` cannot be reached by host code (`host_code`) or by CUDA kernels (`!host_code`).
inline void require_memory(memory_kind k, bool host_code, const std::string& who,
                           const std::string& what, int rank = -1) {
  if (host_code && !host_accessible(k))
    throw invalid_argument(who + ": " + what + " is " + to_string(k) +
                               ", but it is used by host code (a host reducer or host_chunk_ops); "
                               "pass host memory, or use the device policies (cuda_reducer, "
                               "cuda_chunk_ops)",
                           rank);
  if (!host_code && !device_accessible(k))
    throw invalid_argument(who + ": " + what + " is " + to_string(k) +
                               ", but it is used by CUDA kernels (a device Ops policy); pass "
                               "device memory (a gradient_pool over cuda_reducer), or use "
                               "host_chunk_ops",
                           rank);
}

/// `require_memory(pointer_memory_kind(p), ...)`: one driver query.
inline void require_memory(const void* p, bool host_code, const std::string& who,
                           const std::string& what, int rank = -1) {
  if (!p) return;
  require_memory(pointer_memory_kind(p), host_code, who, what, rank);
}

} // namespace tcoll::detail
