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

/// The name of an MPI error class ("MPI_ERR_TRUNCATE"), or "" for one this table lacks.
inline std::string_view error_class_name(int error_class) {
  struct entry {
    int error_class;
    std::string_view name;
  };
#define TCOLL_MPI_ERROR_CLASS(name)                                                                \
  entry {                                                                                          \
    name, #name                                                                                    \
  }
  static constexpr entry table[] = {
      TCOLL_MPI_ERROR_CLASS(MPI_ERR_BUFFER),   TCOLL_MPI_ERROR_CLASS(MPI_ERR_COUNT),
      TCOLL_MPI_ERROR_CLASS(MPI_ERR_TYPE),     TCOLL_MPI_ERROR_CLASS(MPI_ERR_TAG),
      TCOLL_MPI_ERROR_CLASS(MPI_ERR_COMM),     TCOLL_MPI_ERROR_CLASS(MPI_ERR_RANK),
      TCOLL_MPI_ERROR_CLASS(MPI_ERR_REQUEST),  TCOLL_MPI_ERROR_CLASS(MPI_ERR_ROOT),
      TCOLL_MPI_ERROR_CLASS(MPI_ERR_GROUP),    TCOLL_MPI_ERROR_CLASS(MPI_ERR_OP),
      TCOLL_MPI_ERROR_CLASS(MPI_ERR_ARG),      TCOLL_MPI_ERROR_CLASS(MPI_ERR_UNKNOWN),
      TCOLL_MPI_ERROR_CLASS(MPI_ERR_TRUNCATE), TCOLL_MPI_ERROR_CLASS(MPI_ERR_OTHER),
      TCOLL_MPI_ERROR_CLASS(MPI_ERR_INTERN),   TCOLL_MPI_ERROR_CLASS(MPI_ERR_IN_STATUS),
      TCOLL_MPI_ERROR_CLASS(MPI_ERR_PENDING),  TCOLL_MPI_ERROR_CLASS(MPI_ERR_NO_MEM),
      TCOLL_MPI_ERROR_CLASS(MPI_ERR_INFO),     TCOLL_MPI_ERROR_CLASS(MPI_ERR_KEYVAL),
      TCOLL_MPI_ERROR_CLASS(MPI_ERR_PORT),     TCOLL_MPI_ERROR_CLASS(MPI_ERR_SPAWN),
  };
#undef TCOLL_MPI_ERROR_CLASS
  for (const entry& e : table)
    if (e.error_class == error_class) return e.name;
  return {};
}

/// "MPI_ERR_RANK: invalid rank" style text of an MPI error code. Open MPI's own text starts
/// with the class name and MPICH's does not ("Invalid rank, error stack: ..."): the name is
/// added where missing, so a message names the class on every MPI.
inline std::string error_string(int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  std::string out(text, static_cast<std::size_t>(std::max(0, len)));
  int error_class = MPI_ERR_UNKNOWN;
  if (MPI_Error_class(code, &error_class) == MPI_SUCCESS) {
    const std::string_view name = error_class_name(error_class);
    if (!name.empty() && out.rfind(name, 0) != 0) out = std::string(name) + ": " + out;
  }
  return out;
}

/// Throws `transport_error` ("<what> failed: <MPI's text>", naming rank and peer) if `code`
/// is not MPI_SUCCESS.
inline void check(int code, std::string_view what, int rank, int peer = -1) {
  if (code != MPI_SUCCESS)
    throw transport_error(std::string(what) + " failed: " + error_string(code), rank, peer);
}

} // namespace tcoll::detail::mpi
