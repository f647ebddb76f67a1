// The shared rank-level bodies of tests/common/collective_cases.hpp that both shm suites
// run (test_shm.cpp over MPI, test_shm_store.cpp over a file store), instantiated once for
// shm_transport in shm_cases.cpp instead of once in each suite: the heaviest part of either
// translation unit, compiled once and in parallel with the suites' own.
#pragma once

#include <tcoll/transport/shm.hpp>

#include "../common/collective_cases.hpp"

namespace tcoll::testing {

extern template void allreduce_matrix<shm_transport, host_buffers>(shm_transport&,
                                                                   const matrix_options&,
                                                                   const host_buffers&);
extern template void reduced_precision_rounding<shm_transport, host_buffers>(
    shm_transport&, const std::vector<std::size_t>&, const std::vector<std::string>&,
    const host_buffers&);
extern template void
collectives_values<shm_transport, host_buffers>(shm_transport&, const std::vector<std::size_t>&,
                                                std::size_t, const host_buffers&);
extern template void alltoall_values<shm_transport, host_buffers>(shm_transport&,
                                                                  const std::vector<std::size_t>&,
                                                                  const host_buffers&);
extern template void
gather_scatter_values<shm_transport, host_buffers>(shm_transport&, const std::vector<std::size_t>&,
                                                   const host_buffers&);
extern template void
uneven_block_values<shm_transport, host_buffers>(shm_transport&, const std::vector<std::size_t>&,
                                                 const host_buffers&);

} // namespace tcoll::testing
