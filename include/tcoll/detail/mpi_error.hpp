#pragma once
/// \file
/// MPI error codes as tcoll exceptions, written once for every MPI user in the library (the
/// transport, the shared-memory bootstrap, the elastic join).
#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>

#include "../core/error.hpp"

namespace tcoll::detail::mpi {

/// "MPI_ERR_RANK: invalid rank" style text of an MPI error code.
inline std::string error_string(int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<std::size_t>(std::max(0, len)));
}

/// Throws `transport_error` ("<what> failed: <MPI's text>", naming rank and peer) if `code`
/// is not MPI_SUCCESS.
inline void check(int code, std::string_view what, int rank, int peer = -1) {
  if (code != MPI_SUCCESS)
    throw transport_error(std::string(what) + " failed: " + error_string(code), rank, peer);
}

} // namespace tcoll::detail::mpi
