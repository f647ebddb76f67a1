// Explicit instantiations declared in shm_cases.hpp. Built without MPI (TCOLL_NO_MPI), which
// leaves shm_transport the same class as in test_shm.cpp (built with MPI): its MPI
// constructor is a template on a trait, not an #ifdef.
#include "shm_cases.hpp"

namespace tcoll::testing {

template void allreduce_matrix<shm_transport, host_buffers>(shm_transport&, const matrix_options&,
                                                            const host_buffers&);
template void reduced_precision_rounding<shm_transport, host_buffers>(
    shm_transport&, const std::vector<std::size_t>&, const std::vector<std::string>&,
    const host_buffers&);
template void collectives_values<shm_transport, host_buffers>(shm_transport&,
                                                              const std::vector<std::size_t>&,
                                                              std::size_t, const host_buffers&);
template void alltoall_values<shm_transport, host_buffers>(shm_transport&,
                                                           const std::vector<std::size_t>&,
                                                           const host_buffers&);
template void gather_scatter_values<shm_transport, host_buffers>(shm_transport&,
                                                                 const std::vector<std::size_t>&,
                                                                 const host_buffers&);
template void uneven_block_values<shm_transport, host_buffers>(shm_transport&,
                                                               const std::vector<std::size_t>&,
                                                               const host_buffers&);

} // namespace tcoll::testing
