#pragma once
/// \file
/// Registered memory of `shm_transport`: `shm_buffer<T>` (a buffer in shared memory that
/// every rank of the node maps, made by `shm_transport::allocate`), the collective mapping of
/// every rank's region, and the senders' lookup of their own regions.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <vector>

#include "../../core/error.hpp"
#include "../bootstrap.hpp"
#include "segment.hpp"

namespace tcoll {

class shm_transport;

namespace detail::shm {

/// One of this rank's registered buffers, for the senders' lookup; `alive` expires when
/// the buffer is destroyed (its address may then be reused by ordinary memory).
struct own_region {
  std::uint64_t id = 0;
  const unsigned char* base = nullptr;
  std::size_t bytes = 0;
  std::weak_ptr<mapping> alive;
};

/// This rank's live registered region holding [p, p + bytes) among `regions`, if any.
inline const own_region* find_region(const std::vector<own_region>& regions, const unsigned char* p,
                                     std::size_t bytes) {
  for (const auto& g : regions)
    if (p >= g.base && p < g.base + g.bytes &&
        bytes <= static_cast<std::size_t>(g.base + g.bytes - p) && !g.alive.expired())
      return &g;
  return nullptr;
}

/// The system's page size (registered regions are whole pages).
inline long page_size() {
  const long p = sysconf(_SC_PAGESIZE);
  return p > 0 ? p : 4096;
}

/// Collective over `boot`: every rank makes a segment of its own `bytes`, every rank maps every
/// rank's, and once all are mapped the names go (nothing stays in /dev/shm). The
/// mappings, indexed by rank; throws on every rank when any rank failed.
inline std::vector<std::shared_ptr<mapping>> map_region(tcoll::bootstrap& boot, std::size_t bytes) {
  const int rank = boot.rank();
  char name[64] = {};
  create_file(name, bytes, "r"); // empty: it failed (the others learn it)
  const auto P = static_cast<std::size_t>(boot.size());
  std::vector<char> names(P * sizeof name);
  std::vector<std::uint64_t> sizes(P);
  const std::uint64_t mine = name[0] ? bytes : 0;
  struct entry {
    char name[64];
    std::uint64_t bytes;
  } own{};
  std::memcpy(own.name, name, sizeof name);
  own.bytes = mine;
  const std::vector<std::uint8_t> all =
      boot.allgather({reinterpret_cast<const std::uint8_t*>(&own), sizeof own});
  for (std::size_t q = 0; q < P; ++q) {
    entry e;
    std::memcpy(&e, all.data() + q * sizeof e, sizeof e);
    std::memcpy(&names[q * sizeof name], e.name, sizeof name);
    sizes[q] = e.bytes;
  }
  std::vector<std::shared_ptr<mapping>> maps(P);
  int ok = 1, failed_rank = -1;
  for (std::size_t q = 0; q < P; ++q) {
    const char* n = &names[q * sizeof name];
    if (!n[0]) {
      ok = 0, failed_rank = static_cast<int>(q);
      continue;
    }
    unsigned char* p = map_file(n, sizes[q]);
    if (!p) {
      ok = 0, failed_rank = static_cast<int>(q);
      continue;
    }
    maps[q] = std::make_shared<mapping>(p, sizes[q]);
  }
  bool every = false;
  try {
    every = detail::bootstrap::all_of(boot, ok);
  } catch (...) {
    if (name[0]) shm_unlink(name);
    throw;
  }
  if (name[0]) shm_unlink(name); // everyone has mapped it or given up
  if (!every)
    throw transport_error("shm_transport::allocate: a registered segment of " +
                              std::to_string(bytes) + " bytes could not be made or mapped" +
                              (ok ? " on another rank" : " here") + " (/dev/shm too small?)",
                          rank, failed_rank);
  return maps;
}

} // namespace detail::shm

/// `count` elements of `T` in the node's shared memory, made by `shm_transport::allocate`
/// (a registered buffer): messages sent from it are read by the receiving process straight
/// from this memory. Owns this rank's mapping (movable, not copyable); starts zeroed. The
/// memory goes back to the system when this buffer and the transport are both gone (the
/// other ranks keep their mapping of it until their transport is destroyed).
template <class T>
class shm_buffer {
public:
  shm_buffer() = default;
  T* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  std::size_t size_bytes() const noexcept { return size_ * sizeof(T); }
  bool empty() const noexcept { return size_ == 0; }
  T* begin() const noexcept { return data_; }
  T* end() const noexcept { return data_ + size_; }
  T& operator[](std::size_t i) const noexcept { return data_[i]; }
  std::span<T> span() const noexcept { return {data_, size_}; }
  operator std::span<T>() const noexcept { return span(); }
  operator std::span<const T>() const noexcept { return {data_, size_}; }

private:
  friend class shm_transport;
  shm_buffer(std::shared_ptr<detail::shm::mapping> m, std::size_t count)
      : data_(count ? std::launder(reinterpret_cast<T*>(m->base)) : nullptr), size_(count),
        mapping_(std::move(m)) {}
  T* data_ = nullptr;
  std::size_t size_ = 0;
  std::shared_ptr<detail::shm::mapping> mapping_;
};

} // namespace tcoll
