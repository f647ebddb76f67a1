#pragma once
/// \file
/// Single copy for `shm_transport`: a receiver reads a long message straight from the
/// sender's process with Linux cross-memory attach (`process_vm_readv`), where the ranks may
/// read each other's memory (ptrace permission, probed when the transport is built).
#include <sys/types.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "../../core/error.hpp"

namespace tcoll::detail::shm {

/// Copies `bytes` at `address` in process `pid` into `dst`, resuming after an interrupted or
/// short read; throws `transport_error` naming `rank` and `peer` when the kernel refuses.
inline void read_process(pid_t pid, void* dst, std::uint64_t address, std::size_t bytes, int rank,
                         int peer) {
  std::size_t done = 0;
  while (done < bytes) {
    iovec local{static_cast<unsigned char*>(dst) + done, bytes - done};
    iovec remote{reinterpret_cast<void*>(address + done), bytes - done};
    const ssize_t n = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw transport_error("single-copy read of " + std::to_string(bytes) +
                                " bytes from the peer's process failed: " +
                                (n < 0 ? std::strerror(errno) : "nothing read"),
                            rank, peer);
    done += static_cast<std::size_t>(n);
  }
}

/// Whether this process can read the word at `address` in process `pid` and finds `expected`
/// there (the single-copy probe).
inline bool can_read(pid_t pid, std::uint64_t address, std::uint64_t expected) noexcept {
  std::uint64_t value = 0;
  iovec local{&value, sizeof value};
  iovec remote{reinterpret_cast<void*>(address), sizeof value};
  return process_vm_readv(pid, &local, 1, &remote, 1, 0) == static_cast<ssize_t>(sizeof value) &&
         value == expected;
}

} // namespace tcoll::detail::shm
