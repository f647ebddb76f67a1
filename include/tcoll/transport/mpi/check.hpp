#pragma once
/// \file
/// `check_mpi`: how tcoll reports a failed MPI call, public for code that makes its own MPI
/// calls beside tcoll's (the preload's set-up, the PyTorch backend's MPI link). Needs
/// `<mpi.h>`; light enough to include without the MPI transport.
#include <mpi.h>

#include <string_view>

#include "../../detail/mpi_error.hpp"

namespace tcoll {

/// Throws `transport_error` ("<what> failed: <MPI's text>", naming `rank` and `peer`) if
/// `code` is not MPI_SUCCESS.
inline void check_mpi(int code, std::string_view what, int rank, int peer = -1) {
  detail::mpi::check(code, what, rank, peer);
}

} // namespace tcoll
