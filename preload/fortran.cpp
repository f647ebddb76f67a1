/// \file
/// libtcoll_mpi.so: the Fortran entry points of the collectives tcoll runs, on Open MPI.
///
/// Open MPI's Fortran bindings (`mpif.h`, `use mpi`: `mpi_allreduce_` and its other
/// manglings; `use mpi_f08`: `mpi_allreduce_f08_`, which calls `ompi_allreduce_f`) convert
/// their handles and call `PMPI_Allreduce` directly, so a C `MPI_Allreduce` wrapper never
/// sees a Fortran program's calls. These wrappers take the Fortran call instead (every
/// mangling, and `ompi_*_f` for the f08 bindings), convert its handles and MPI_IN_PLACE /
/// MPI_BOTTOM sentinels the way Open MPI's own bindings do, and call the C wrapper of this
/// library, which decides between tcoll and `PMPI_*` as for a C program. MPICH's Fortran
/// bindings call the C entry points themselves, all but the f08 bindings of MPI_Finalize,
/// MPI_Barrier, MPI_Ibarrier, MPI_Start, MPI_Startall and MPI_Request_free (which call
/// PMPI_*): only those are taken on MPICH.
#include "tcoll_mpi.hpp"

#include <algorithm>
#include <vector>

// (the standard ABI's build has no Fortran entry points: the ABI defines no Fortran handles)
#if defined(OPEN_MPI) || defined(MPICH_VERSION)

// the C wrappers of this library (persistent.cpp), not MPI's entry points
#undef MPI_Start
#undef MPI_Startall
#undef MPI_Request_free

namespace {

void set_ierr(MPI_Fint* ierr, int code) {
  if (ierr != nullptr) *ierr = static_cast<MPI_Fint>(code);
}

/// Fortran's MPI_START, MPI_STARTALL and MPI_REQUEST_FREE through the C wrappers, which hand
/// every request but tcoll's persistent collectives to MPI. Taken where an MPI's Fortran
/// bindings call PMPI_* directly (Open MPI's, MPICH's f08): that would activate a persistent
/// collective of tcoll's (MPI's own persistent receive) without queuing its run, and the
/// program would wait forever. Each returns the C call's code and writes the handles back.
int fortran_start(MPI_Fint* request) {
  MPI_Request r = PMPI_Request_f2c(*request);
  const int rc = MPI_Start(&r);
  *request = PMPI_Request_c2f(r);
  return rc;
}
int fortran_startall(MPI_Fint count, MPI_Fint* requests) {
  std::vector<MPI_Request> c(static_cast<std::size_t>(std::max(count, MPI_Fint{0})));
  for (std::size_t i = 0; i < c.size(); ++i) c[i] = PMPI_Request_f2c(requests[i]);
  const int rc = MPI_Startall(count, c.data());
  for (std::size_t i = 0; i < c.size(); ++i) requests[i] = PMPI_Request_c2f(c[i]);
  return rc;
}
int fortran_request_free(MPI_Fint* request) {
  MPI_Request r = PMPI_Request_f2c(*request);
  const int rc = MPI_Request_free(&r);
  *request = PMPI_Request_c2f(r); // MPI_REQUEST_NULL where it was freed
  return rc;
}

} // namespace

#endif

#if defined(OPEN_MPI) && !defined(MPICH_VERSION)

#include <dlfcn.h>

// the C wrappers of this library, not MPI's entry points (tcoll_mpi.hpp renames them for
// tcoll's own headers)
#undef MPI_Allreduce
#undef MPI_Iallreduce
#undef MPI_Reduce_scatter_block
#undef MPI_Reduce_scatter
#undef MPI_Allgather
#undef MPI_Allgatherv
#undef MPI_Bcast
#undef MPI_Reduce
#undef MPI_Barrier
#undef MPI_Finalize
#undef MPI_Alltoall
#undef MPI_Alltoallv
#undef MPI_Gather
#undef MPI_Gatherv
#undef MPI_Scatter
#undef MPI_Scatterv
#undef MPI_Ibcast
#undef MPI_Ireduce
#undef MPI_Iallgather
#undef MPI_Ireduce_scatter_block
#undef MPI_Ialltoall
#undef MPI_Igather
#undef MPI_Iscatter
#undef MPI_Ialltoallv
#undef MPI_Igatherv
#undef MPI_Iscatterv
#undef MPI_Ireduce_scatter
#undef MPI_Iallgatherv
#undef MPI_Ibarrier

namespace {

/// The address of a Fortran common block of Open MPI's (MPI_IN_PLACE, MPI_BOTTOM), where
/// the program has it; null otherwise.
const void* fortran_sentinel(const char* name) {
  return dlsym(RTLD_DEFAULT, name);
}

/// A Fortran buffer argument as C sees it: Fortran's MPI_IN_PLACE and MPI_BOTTOM are the
/// addresses of common blocks, C's are constants.
const void* c_buffer(const void* fortran) {
  static const void* const in_place = fortran_sentinel("mpi_fortran_in_place_");
  static const void* const bottom = fortran_sentinel("mpi_fortran_bottom_");
  if (fortran != nullptr && fortran == in_place) return MPI_IN_PLACE;
  if (fortran != nullptr && fortran == bottom) return MPI_BOTTOM;
  return fortran;
}
void* c_buffer(void* fortran) {
  return const_cast<void*>(c_buffer(static_cast<const void*>(fortran)));
}

/// Runs the non-blocking start `start(&c_request)` of a Fortran call: its request handed back as
/// Fortran's where it started, its code in `ierr`.
template <class Start>
void start_fortran(MPI_Fint* request, MPI_Fint* ierr, Start&& start) {
  MPI_Request r = MPI_REQUEST_NULL;
  const int rc = start(&r);
  if (rc == MPI_SUCCESS) *request = PMPI_Request_c2f(r);
  set_ierr(ierr, rc);
}

} // namespace

/// Defines `ompi_<lower>_f` (called by the f08 bindings) and the Fortran manglings
/// `<lower>`, `<lower>_`, `<lower>__` and `<UPPER>` as aliases of it.
#define TCOLL_FORTRAN_ALIASES(lower, upper)                                                        \
  TCOLL_FORTRAN_ALIAS(mpi_##lower, ompi_##lower##_f)                                               \
  TCOLL_FORTRAN_ALIAS(mpi_##lower##_, ompi_##lower##_f)                                            \
  TCOLL_FORTRAN_ALIAS(mpi_##lower##__, ompi_##lower##_f)                                           \
  TCOLL_FORTRAN_ALIAS(MPI_##upper, ompi_##lower##_f)
#define TCOLL_FORTRAN_ALIAS(name, target)                                                          \
  extern "C" __attribute__((visibility("default"), alias(#target))) decltype(target) name;

/// Fortran MPI_ALLREDUCE.
TCOLL_PRELOAD_EXPORT void ompi_allreduce_f(char* sendbuf, char* recvbuf, MPI_Fint* count,
                                           MPI_Fint* datatype, MPI_Fint* op, MPI_Fint* comm,
                                           MPI_Fint* ierr) {
  set_ierr(ierr, MPI_Allreduce(c_buffer(sendbuf), c_buffer(recvbuf), *count,
                               PMPI_Type_f2c(*datatype), PMPI_Op_f2c(*op), PMPI_Comm_f2c(*comm)));
}
TCOLL_FORTRAN_ALIASES(allreduce, ALLREDUCE)

/// Fortran MPI_IALLREDUCE.
TCOLL_PRELOAD_EXPORT void ompi_iallreduce_f(char* sendbuf, char* recvbuf, MPI_Fint* count,
                                            MPI_Fint* datatype, MPI_Fint* op, MPI_Fint* comm,
                                            MPI_Fint* request, MPI_Fint* ierr) {
  start_fortran(request, ierr, [&](MPI_Request* r) {
    return MPI_Iallreduce(c_buffer(sendbuf), c_buffer(recvbuf), *count, PMPI_Type_f2c(*datatype),
                          PMPI_Op_f2c(*op), PMPI_Comm_f2c(*comm), r);
  });
}
TCOLL_FORTRAN_ALIASES(iallreduce, IALLREDUCE)

/// Fortran MPI_REDUCE_SCATTER_BLOCK.
TCOLL_PRELOAD_EXPORT void ompi_reduce_scatter_block_f(char* sendbuf, char* recvbuf,
                                                      MPI_Fint* recvcount, MPI_Fint* datatype,
                                                      MPI_Fint* op, MPI_Fint* comm,
                                                      MPI_Fint* ierr) {
  set_ierr(ierr, MPI_Reduce_scatter_block(c_buffer(sendbuf), c_buffer(recvbuf), *recvcount,
                                          PMPI_Type_f2c(*datatype), PMPI_Op_f2c(*op),
                                          PMPI_Comm_f2c(*comm)));
}
TCOLL_FORTRAN_ALIASES(reduce_scatter_block, REDUCE_SCATTER_BLOCK)

/// Fortran MPI_REDUCE_SCATTER (MPI_Fint is int on Open MPI's default build: the counts pass
/// as they are).
TCOLL_PRELOAD_EXPORT void ompi_reduce_scatter_f(char* sendbuf, char* recvbuf, MPI_Fint* recvcounts,
                                                MPI_Fint* datatype, MPI_Fint* op, MPI_Fint* comm,
                                                MPI_Fint* ierr) {
  static_assert(sizeof(MPI_Fint) == sizeof(int), "tcoll: Fortran INTEGER is not a C int here");
  set_ierr(ierr, MPI_Reduce_scatter(
                     c_buffer(sendbuf), c_buffer(recvbuf), reinterpret_cast<const int*>(recvcounts),
                     PMPI_Type_f2c(*datatype), PMPI_Op_f2c(*op), PMPI_Comm_f2c(*comm)));
}
TCOLL_FORTRAN_ALIASES(reduce_scatter, REDUCE_SCATTER)

/// Fortran MPI_ALLGATHER.
TCOLL_PRELOAD_EXPORT void ompi_allgather_f(char* sendbuf, MPI_Fint* sendcount, MPI_Fint* sendtype,
                                           char* recvbuf, MPI_Fint* recvcount, MPI_Fint* recvtype,
                                           MPI_Fint* comm, MPI_Fint* ierr) {
  set_ierr(ierr,
           MPI_Allgather(c_buffer(sendbuf), *sendcount, PMPI_Type_f2c(*sendtype), c_buffer(recvbuf),
                         *recvcount, PMPI_Type_f2c(*recvtype), PMPI_Comm_f2c(*comm)));
}
TCOLL_FORTRAN_ALIASES(allgather, ALLGATHER)

/// Fortran MPI_ALLGATHERV.
TCOLL_PRELOAD_EXPORT void ompi_allgatherv_f(char* sendbuf, MPI_Fint* sendcount, MPI_Fint* sendtype,
                                            char* recvbuf, MPI_Fint* recvcounts, MPI_Fint* displs,
                                            MPI_Fint* recvtype, MPI_Fint* comm, MPI_Fint* ierr) {
  set_ierr(ierr, MPI_Allgatherv(c_buffer(sendbuf), *sendcount, PMPI_Type_f2c(*sendtype),
                                c_buffer(recvbuf), reinterpret_cast<const int*>(recvcounts),
                                reinterpret_cast<const int*>(displs), PMPI_Type_f2c(*recvtype),
                                PMPI_Comm_f2c(*comm)));
}
TCOLL_FORTRAN_ALIASES(allgatherv, ALLGATHERV)

/// Fortran MPI_BCAST.
TCOLL_PRELOAD_EXPORT void ompi_bcast_f(char* buffer, MPI_Fint* count, MPI_Fint* datatype,
                                       MPI_Fint* root, MPI_Fint* comm, MPI_Fint* ierr) {
  set_ierr(ierr, MPI_Bcast(c_buffer(buffer), *count, PMPI_Type_f2c(*datatype), *root,
                           PMPI_Comm_f2c(*comm)));
}
TCOLL_FORTRAN_ALIASES(bcast, BCAST)

/// Fortran MPI_REDUCE.
TCOLL_PRELOAD_EXPORT void ompi_reduce_f(char* sendbuf, char* recvbuf, MPI_Fint* count,
                                        MPI_Fint* datatype, MPI_Fint* op, MPI_Fint* root,
                                        MPI_Fint* comm, MPI_Fint* ierr) {
  set_ierr(ierr, MPI_Reduce(c_buffer(sendbuf), c_buffer(recvbuf), *count, PMPI_Type_f2c(*datatype),
                            PMPI_Op_f2c(*op), *root, PMPI_Comm_f2c(*comm)));
}
TCOLL_FORTRAN_ALIASES(reduce, REDUCE)

/// Fortran MPI_ALLTOALL.
TCOLL_PRELOAD_EXPORT void ompi_alltoall_f(char* sendbuf, MPI_Fint* sendcount, MPI_Fint* sendtype,
                                          char* recvbuf, MPI_Fint* recvcount, MPI_Fint* recvtype,
                                          MPI_Fint* comm, MPI_Fint* ierr) {
  set_ierr(ierr,
           MPI_Alltoall(c_buffer(sendbuf), *sendcount, PMPI_Type_f2c(*sendtype), c_buffer(recvbuf),
                        *recvcount, PMPI_Type_f2c(*recvtype), PMPI_Comm_f2c(*comm)));
}
TCOLL_FORTRAN_ALIASES(alltoall, ALLTOALL)

/// Fortran MPI_ALLTOALLV.
TCOLL_PRELOAD_EXPORT void ompi_alltoallv_f(char* sendbuf, MPI_Fint* sendcounts, MPI_Fint* sdispls,
                                           MPI_Fint* sendtype, char* recvbuf, MPI_Fint* recvcounts,
                                           MPI_Fint* rdispls, MPI_Fint* recvtype, MPI_Fint* comm,
                                           MPI_Fint* ierr) {
  set_ierr(ierr, MPI_Alltoallv(c_buffer(sendbuf), reinterpret_cast<const int*>(sendcounts),
                               reinterpret_cast<const int*>(sdispls), PMPI_Type_f2c(*sendtype),
                               c_buffer(recvbuf), reinterpret_cast<const int*>(recvcounts),
                               reinterpret_cast<const int*>(rdispls), PMPI_Type_f2c(*recvtype),
                               PMPI_Comm_f2c(*comm)));
}
TCOLL_FORTRAN_ALIASES(alltoallv, ALLTOALLV)

/// Fortran MPI_GATHER.
TCOLL_PRELOAD_EXPORT void ompi_gather_f(char* sendbuf, MPI_Fint* sendcount, MPI_Fint* sendtype,
                                        char* recvbuf, MPI_Fint* recvcount, MPI_Fint* recvtype,
                                        MPI_Fint* root, MPI_Fint* comm, MPI_Fint* ierr) {
  set_ierr(ierr,
           MPI_Gather(c_buffer(sendbuf), *sendcount, PMPI_Type_f2c(*sendtype), c_buffer(recvbuf),
                      *recvcount, PMPI_Type_f2c(*recvtype), *root, PMPI_Comm_f2c(*comm)));
}
TCOLL_FORTRAN_ALIASES(gather, GATHER)

/// Fortran MPI_GATHERV.
TCOLL_PRELOAD_EXPORT void ompi_gatherv_f(char* sendbuf, MPI_Fint* sendcount, MPI_Fint* sendtype,
                                         char* recvbuf, MPI_Fint* recvcounts, MPI_Fint* displs,
                                         MPI_Fint* recvtype, MPI_Fint* root, MPI_Fint* comm,
                                         MPI_Fint* ierr) {
  set_ierr(ierr, MPI_Gatherv(c_buffer(sendbuf), *sendcount, PMPI_Type_f2c(*sendtype),
                             c_buffer(recvbuf), reinterpret_cast<const int*>(recvcounts),
                             reinterpret_cast<const int*>(displs), PMPI_Type_f2c(*recvtype), *root,
                             PMPI_Comm_f2c(*comm)));
}
TCOLL_FORTRAN_ALIASES(gatherv, GATHERV)

/// Fortran MPI_SCATTER.
TCOLL_PRELOAD_EXPORT void ompi_scatter_f(char* sendbuf, MPI_Fint* sendcount, MPI_Fint* sendtype,
                                         char* recvbuf, MPI_Fint* recvcount, MPI_Fint* recvtype,
                                         MPI_Fint* root, MPI_Fint* comm, MPI_Fint* ierr) {
  set_ierr(ierr,
           MPI_Scatter(c_buffer(sendbuf), *sendcount, PMPI_Type_f2c(*sendtype), c_buffer(recvbuf),
                       *recvcount, PMPI_Type_f2c(*recvtype), *root, PMPI_Comm_f2c(*comm)));
}
TCOLL_FORTRAN_ALIASES(scatter, SCATTER)

/// Fortran MPI_SCATTERV.
TCOLL_PRELOAD_EXPORT void ompi_scatterv_f(char* sendbuf, MPI_Fint* sendcounts, MPI_Fint* displs,
                                          MPI_Fint* sendtype, char* recvbuf, MPI_Fint* recvcount,
                                          MPI_Fint* recvtype, MPI_Fint* root, MPI_Fint* comm,
                                          MPI_Fint* ierr) {
  set_ierr(ierr, MPI_Scatterv(c_buffer(sendbuf), reinterpret_cast<const int*>(sendcounts),
                              reinterpret_cast<const int*>(displs), PMPI_Type_f2c(*sendtype),
                              c_buffer(recvbuf), *recvcount, PMPI_Type_f2c(*recvtype), *root,
                              PMPI_Comm_f2c(*comm)));
}
TCOLL_FORTRAN_ALIASES(scatterv, SCATTERV)

/// Fortran MPI_IBCAST.
TCOLL_PRELOAD_EXPORT void ompi_ibcast_f(char* buffer, MPI_Fint* count, MPI_Fint* datatype,
                                        MPI_Fint* root, MPI_Fint* comm, MPI_Fint* request,
                                        MPI_Fint* ierr) {
  start_fortran(request, ierr, [&](MPI_Request* r) {
    return MPI_Ibcast(c_buffer(buffer), *count, PMPI_Type_f2c(*datatype), *root,
                      PMPI_Comm_f2c(*comm), r);
  });
}
TCOLL_FORTRAN_ALIASES(ibcast, IBCAST)

/// Fortran MPI_IREDUCE.
TCOLL_PRELOAD_EXPORT void ompi_ireduce_f(char* sendbuf, char* recvbuf, MPI_Fint* count,
                                         MPI_Fint* datatype, MPI_Fint* op, MPI_Fint* root,
                                         MPI_Fint* comm, MPI_Fint* request, MPI_Fint* ierr) {
  start_fortran(request, ierr, [&](MPI_Request* r) {
    return MPI_Ireduce(c_buffer(sendbuf), c_buffer(recvbuf), *count, PMPI_Type_f2c(*datatype),
                       PMPI_Op_f2c(*op), *root, PMPI_Comm_f2c(*comm), r);
  });
}
TCOLL_FORTRAN_ALIASES(ireduce, IREDUCE)

/// Fortran MPI_IALLGATHER.
TCOLL_PRELOAD_EXPORT void ompi_iallgather_f(char* sendbuf, MPI_Fint* sendcount, MPI_Fint* sendtype,
                                            char* recvbuf, MPI_Fint* recvcount, MPI_Fint* recvtype,
                                            MPI_Fint* comm, MPI_Fint* request, MPI_Fint* ierr) {
  start_fortran(request, ierr, [&](MPI_Request* r) {
    return MPI_Iallgather(c_buffer(sendbuf), *sendcount, PMPI_Type_f2c(*sendtype),
                          c_buffer(recvbuf), *recvcount, PMPI_Type_f2c(*recvtype),
                          PMPI_Comm_f2c(*comm), r);
  });
}
TCOLL_FORTRAN_ALIASES(iallgather, IALLGATHER)

/// Fortran MPI_IREDUCE_SCATTER_BLOCK.
TCOLL_PRELOAD_EXPORT void ompi_ireduce_scatter_block_f(char* sendbuf, char* recvbuf,
                                                       MPI_Fint* recvcount, MPI_Fint* datatype,
                                                       MPI_Fint* op, MPI_Fint* comm,
                                                       MPI_Fint* request, MPI_Fint* ierr) {
  start_fortran(request, ierr, [&](MPI_Request* r) {
    return MPI_Ireduce_scatter_block(c_buffer(sendbuf), c_buffer(recvbuf), *recvcount,
                                     PMPI_Type_f2c(*datatype), PMPI_Op_f2c(*op),
                                     PMPI_Comm_f2c(*comm), r);
  });
}
TCOLL_FORTRAN_ALIASES(ireduce_scatter_block, IREDUCE_SCATTER_BLOCK)

/// Fortran MPI_IALLTOALL.
TCOLL_PRELOAD_EXPORT void ompi_ialltoall_f(char* sendbuf, MPI_Fint* sendcount, MPI_Fint* sendtype,
                                           char* recvbuf, MPI_Fint* recvcount, MPI_Fint* recvtype,
                                           MPI_Fint* comm, MPI_Fint* request, MPI_Fint* ierr) {
  start_fortran(request, ierr, [&](MPI_Request* r) {
    return MPI_Ialltoall(c_buffer(sendbuf), *sendcount, PMPI_Type_f2c(*sendtype), c_buffer(recvbuf),
                         *recvcount, PMPI_Type_f2c(*recvtype), PMPI_Comm_f2c(*comm), r);
  });
}
TCOLL_FORTRAN_ALIASES(ialltoall, IALLTOALL)

/// Fortran MPI_IGATHER.
TCOLL_PRELOAD_EXPORT void ompi_igather_f(char* sendbuf, MPI_Fint* sendcount, MPI_Fint* sendtype,
                                         char* recvbuf, MPI_Fint* recvcount, MPI_Fint* recvtype,
                                         MPI_Fint* root, MPI_Fint* comm, MPI_Fint* request,
                                         MPI_Fint* ierr) {
  start_fortran(request, ierr, [&](MPI_Request* r) {
    return MPI_Igather(c_buffer(sendbuf), *sendcount, PMPI_Type_f2c(*sendtype), c_buffer(recvbuf),
                       *recvcount, PMPI_Type_f2c(*recvtype), *root, PMPI_Comm_f2c(*comm), r);
  });
}
TCOLL_FORTRAN_ALIASES(igather, IGATHER)

/// Fortran MPI_ISCATTER.
TCOLL_PRELOAD_EXPORT void ompi_iscatter_f(char* sendbuf, MPI_Fint* sendcount, MPI_Fint* sendtype,
                                          char* recvbuf, MPI_Fint* recvcount, MPI_Fint* recvtype,
                                          MPI_Fint* root, MPI_Fint* comm, MPI_Fint* request,
                                          MPI_Fint* ierr) {
  start_fortran(request, ierr, [&](MPI_Request* r) {
    return MPI_Iscatter(c_buffer(sendbuf), *sendcount, PMPI_Type_f2c(*sendtype), c_buffer(recvbuf),
                        *recvcount, PMPI_Type_f2c(*recvtype), *root, PMPI_Comm_f2c(*comm), r);
  });
}
TCOLL_FORTRAN_ALIASES(iscatter, ISCATTER)

/// Fortran MPI_IALLTOALLV.
TCOLL_PRELOAD_EXPORT void ompi_ialltoallv_f(char* sendbuf, MPI_Fint* sendcounts, MPI_Fint* sdispls,
                                            MPI_Fint* sendtype, char* recvbuf, MPI_Fint* recvcounts,
                                            MPI_Fint* rdispls, MPI_Fint* recvtype, MPI_Fint* comm,
                                            MPI_Fint* request, MPI_Fint* ierr) {
  start_fortran(request, ierr, [&](MPI_Request* r) {
    return MPI_Ialltoallv(c_buffer(sendbuf), reinterpret_cast<const int*>(sendcounts),
                          reinterpret_cast<const int*>(sdispls), PMPI_Type_f2c(*sendtype),
                          c_buffer(recvbuf), reinterpret_cast<const int*>(recvcounts),
                          reinterpret_cast<const int*>(rdispls), PMPI_Type_f2c(*recvtype),
                          PMPI_Comm_f2c(*comm), r);
  });
}
TCOLL_FORTRAN_ALIASES(ialltoallv, IALLTOALLV)

/// Fortran MPI_IGATHERV.
TCOLL_PRELOAD_EXPORT void ompi_igatherv_f(char* sendbuf, MPI_Fint* sendcount, MPI_Fint* sendtype,
                                          char* recvbuf, MPI_Fint* recvcounts, MPI_Fint* displs,
                                          MPI_Fint* recvtype, MPI_Fint* root, MPI_Fint* comm,
                                          MPI_Fint* request, MPI_Fint* ierr) {
  start_fortran(request, ierr, [&](MPI_Request* r) {
    return MPI_Igatherv(c_buffer(sendbuf), *sendcount, PMPI_Type_f2c(*sendtype), c_buffer(recvbuf),
                        reinterpret_cast<const int*>(recvcounts),
                        reinterpret_cast<const int*>(displs), PMPI_Type_f2c(*recvtype), *root,
                        PMPI_Comm_f2c(*comm), r);
  });
}
TCOLL_FORTRAN_ALIASES(igatherv, IGATHERV)

/// Fortran MPI_ISCATTERV.
TCOLL_PRELOAD_EXPORT void ompi_iscatterv_f(char* sendbuf, MPI_Fint* sendcounts, MPI_Fint* displs,
                                           MPI_Fint* sendtype, char* recvbuf, MPI_Fint* recvcount,
                                           MPI_Fint* recvtype, MPI_Fint* root, MPI_Fint* comm,
                                           MPI_Fint* request, MPI_Fint* ierr) {
  start_fortran(request, ierr, [&](MPI_Request* r) {
    return MPI_Iscatterv(c_buffer(sendbuf), reinterpret_cast<const int*>(sendcounts),
                         reinterpret_cast<const int*>(displs), PMPI_Type_f2c(*sendtype),
                         c_buffer(recvbuf), *recvcount, PMPI_Type_f2c(*recvtype), *root,
                         PMPI_Comm_f2c(*comm), r);
  });
}
TCOLL_FORTRAN_ALIASES(iscatterv, ISCATTERV)

/// Fortran MPI_IREDUCE_SCATTER.
TCOLL_PRELOAD_EXPORT void ompi_ireduce_scatter_f(char* sendbuf, char* recvbuf, MPI_Fint* recvcounts,
                                                 MPI_Fint* datatype, MPI_Fint* op, MPI_Fint* comm,
                                                 MPI_Fint* request, MPI_Fint* ierr) {
  start_fortran(request, ierr, [&](MPI_Request* r) {
    return MPI_Ireduce_scatter(c_buffer(sendbuf), c_buffer(recvbuf),
                               reinterpret_cast<const int*>(recvcounts), PMPI_Type_f2c(*datatype),
                               PMPI_Op_f2c(*op), PMPI_Comm_f2c(*comm), r);
  });
}
TCOLL_FORTRAN_ALIASES(ireduce_scatter, IREDUCE_SCATTER)

/// Fortran MPI_IALLGATHERV.
TCOLL_PRELOAD_EXPORT void ompi_iallgatherv_f(char* sendbuf, MPI_Fint* sendcount, MPI_Fint* sendtype,
                                             char* recvbuf, MPI_Fint* recvcounts, MPI_Fint* displs,
                                             MPI_Fint* recvtype, MPI_Fint* comm, MPI_Fint* request,
                                             MPI_Fint* ierr) {
  start_fortran(request, ierr, [&](MPI_Request* r) {
    return MPI_Iallgatherv(c_buffer(sendbuf), *sendcount, PMPI_Type_f2c(*sendtype),
                           c_buffer(recvbuf), reinterpret_cast<const int*>(recvcounts),
                           reinterpret_cast<const int*>(displs), PMPI_Type_f2c(*recvtype),
                           PMPI_Comm_f2c(*comm), r);
  });
}
TCOLL_FORTRAN_ALIASES(iallgatherv, IALLGATHERV)

/// Fortran MPI_IBARRIER.
TCOLL_PRELOAD_EXPORT void ompi_ibarrier_f(MPI_Fint* comm, MPI_Fint* request, MPI_Fint* ierr) {
  start_fortran(request, ierr,
                [&](MPI_Request* r) { return MPI_Ibarrier(PMPI_Comm_f2c(*comm), r); });
}
TCOLL_FORTRAN_ALIASES(ibarrier, IBARRIER)

/// Fortran MPI_BARRIER (MPI's own barrier; a pending set-up is created first, as for C).
TCOLL_PRELOAD_EXPORT void ompi_barrier_f(MPI_Fint* comm, MPI_Fint* ierr) {
  set_ierr(ierr, MPI_Barrier(PMPI_Comm_f2c(*comm)));
}
TCOLL_FORTRAN_ALIASES(barrier, BARRIER)

/// Fortran MPI_FINALIZE: frees tcoll's state while MPI still works and prints the
/// TCOLL_DEBUG summary, as for C.
TCOLL_PRELOAD_EXPORT void ompi_finalize_f(MPI_Fint* ierr) {
  set_ierr(ierr, MPI_Finalize());
}
TCOLL_FORTRAN_ALIASES(finalize, FINALIZE)

/// Fortran MPI_START, MPI_STARTALL and MPI_REQUEST_FREE: Open MPI's bindings call PMPI_*
/// (see `fortran_start`).
TCOLL_PRELOAD_EXPORT void ompi_start_f(MPI_Fint* request, MPI_Fint* ierr) {
  set_ierr(ierr, fortran_start(request));
}
TCOLL_FORTRAN_ALIASES(start, START)

TCOLL_PRELOAD_EXPORT void ompi_startall_f(MPI_Fint* count, MPI_Fint* requests, MPI_Fint* ierr) {
  set_ierr(ierr, fortran_startall(*count, requests));
}
TCOLL_FORTRAN_ALIASES(startall, STARTALL)

TCOLL_PRELOAD_EXPORT void ompi_request_free_f(MPI_Fint* request, MPI_Fint* ierr) {
  set_ierr(ierr, fortran_request_free(request));
}
TCOLL_FORTRAN_ALIASES(request_free, REQUEST_FREE)

#if TCOLL_PRELOAD_PERSISTENT
/// The persistent collectives from Fortran: Open MPI's bindings call PMPI_<name>_init (Open
/// MPI 5, MPI-4's names: `ompi_<name>_init_f` and the manglings of `mpi_<name>_init`) or
/// PMPIX_<name>_init (Open MPI 4's pcollreq extension, `use mpi_f08_ext`:
/// `ompix_<name>_init_f` and the manglings of `mpix_<name>_init`) directly; these call the C
/// wrappers, as for a C program.
#if TCOLL_PRELOAD_PERSISTENT == 1
#define TCOLL_C_INIT(Name) MPI_##Name##_init
#define TCOLL_FORTRAN_INIT(lower) ompi_##lower##_init_f
#define TCOLL_FORTRAN_INIT_ALIASES(lower, upper) TCOLL_FORTRAN_ALIASES(lower##_init, upper##_INIT)
#else
#define TCOLL_C_INIT(Name) MPIX_##Name##_init
#define TCOLL_FORTRAN_INIT(lower) ompix_##lower##_init_f
#define TCOLL_FORTRAN_INIT_ALIASES(lower, upper)                                                   \
  TCOLL_FORTRAN_ALIAS(mpix_##lower##_init, ompix_##lower##_init_f)                                 \
  TCOLL_FORTRAN_ALIAS(mpix_##lower##_init_, ompix_##lower##_init_f)                                \
  TCOLL_FORTRAN_ALIAS(mpix_##lower##_init__, ompix_##lower##_init_f)                               \
  TCOLL_FORTRAN_ALIAS(MPIX_##upper##_INIT, ompix_##lower##_init_f)
#endif

TCOLL_PRELOAD_EXPORT void TCOLL_FORTRAN_INIT(allreduce)(char* sendbuf, char* recvbuf,
                                                        MPI_Fint* count, MPI_Fint* datatype,
                                                        MPI_Fint* op, MPI_Fint* comm,
                                                        MPI_Fint* info, MPI_Fint* request,
                                                        MPI_Fint* ierr) {
  start_fortran(request, ierr, [&](MPI_Request* r) {
    return TCOLL_C_INIT(Allreduce)(c_buffer(sendbuf), c_buffer(recvbuf), *count,
                                   PMPI_Type_f2c(*datatype), PMPI_Op_f2c(*op), PMPI_Comm_f2c(*comm),
                                   PMPI_Info_f2c(*info), r);
  });
}
TCOLL_FORTRAN_INIT_ALIASES(allreduce, ALLREDUCE)

TCOLL_PRELOAD_EXPORT void TCOLL_FORTRAN_INIT(bcast)(char* buffer, MPI_Fint* count,
                                                    MPI_Fint* datatype, MPI_Fint* root,
                                                    MPI_Fint* comm, MPI_Fint* info,
                                                    MPI_Fint* request, MPI_Fint* ierr) {
  start_fortran(request, ierr, [&](MPI_Request* r) {
    return TCOLL_C_INIT(Bcast)(c_buffer(buffer), *count, PMPI_Type_f2c(*datatype), *root,
                               PMPI_Comm_f2c(*comm), PMPI_Info_f2c(*info), r);
  });
}
TCOLL_FORTRAN_INIT_ALIASES(bcast, BCAST)

TCOLL_PRELOAD_EXPORT void TCOLL_FORTRAN_INIT(reduce)(char* sendbuf, char* recvbuf, MPI_Fint* count,
                                                     MPI_Fint* datatype, MPI_Fint* op,
                                                     MPI_Fint* root, MPI_Fint* comm, MPI_Fint* info,
                                                     MPI_Fint* request, MPI_Fint* ierr) {
  start_fortran(request, ierr, [&](MPI_Request* r) {
    return TCOLL_C_INIT(Reduce)(c_buffer(sendbuf), c_buffer(recvbuf), *count,
                                PMPI_Type_f2c(*datatype), PMPI_Op_f2c(*op), *root,
                                PMPI_Comm_f2c(*comm), PMPI_Info_f2c(*info), r);
  });
}
TCOLL_FORTRAN_INIT_ALIASES(reduce, REDUCE)

TCOLL_PRELOAD_EXPORT void TCOLL_FORTRAN_INIT(allgather)(char* sendbuf, MPI_Fint* sendcount,
                                                        MPI_Fint* sendtype, char* recvbuf,
                                                        MPI_Fint* recvcount, MPI_Fint* recvtype,
                                                        MPI_Fint* comm, MPI_Fint* info,
                                                        MPI_Fint* request, MPI_Fint* ierr) {
  start_fortran(request, ierr, [&](MPI_Request* r) {
    return TCOLL_C_INIT(Allgather)(c_buffer(sendbuf), *sendcount, PMPI_Type_f2c(*sendtype),
                                   c_buffer(recvbuf), *recvcount, PMPI_Type_f2c(*recvtype),
                                   PMPI_Comm_f2c(*comm), PMPI_Info_f2c(*info), r);
  });
}
TCOLL_FORTRAN_INIT_ALIASES(allgather, ALLGATHER)

TCOLL_PRELOAD_EXPORT void
TCOLL_FORTRAN_INIT(reduce_scatter_block)(char* sendbuf, char* recvbuf, MPI_Fint* recvcount,
                                         MPI_Fint* datatype, MPI_Fint* op, MPI_Fint* comm,
                                         MPI_Fint* info, MPI_Fint* request, MPI_Fint* ierr) {
  start_fortran(request, ierr, [&](MPI_Request* r) {
    return TCOLL_C_INIT(Reduce_scatter_block)(c_buffer(sendbuf), c_buffer(recvbuf), *recvcount,
                                              PMPI_Type_f2c(*datatype), PMPI_Op_f2c(*op),
                                              PMPI_Comm_f2c(*comm), PMPI_Info_f2c(*info), r);
  });
}
TCOLL_FORTRAN_INIT_ALIASES(reduce_scatter_block, REDUCE_SCATTER_BLOCK)

TCOLL_PRELOAD_EXPORT void TCOLL_FORTRAN_INIT(alltoall)(char* sendbuf, MPI_Fint* sendcount,
                                                       MPI_Fint* sendtype, char* recvbuf,
                                                       MPI_Fint* recvcount, MPI_Fint* recvtype,
                                                       MPI_Fint* comm, MPI_Fint* info,
                                                       MPI_Fint* request, MPI_Fint* ierr) {
  start_fortran(request, ierr, [&](MPI_Request* r) {
    return TCOLL_C_INIT(Alltoall)(c_buffer(sendbuf), *sendcount, PMPI_Type_f2c(*sendtype),
                                  c_buffer(recvbuf), *recvcount, PMPI_Type_f2c(*recvtype),
                                  PMPI_Comm_f2c(*comm), PMPI_Info_f2c(*info), r);
  });
}
TCOLL_FORTRAN_INIT_ALIASES(alltoall, ALLTOALL)

TCOLL_PRELOAD_EXPORT void TCOLL_FORTRAN_INIT(gather)(char* sendbuf, MPI_Fint* sendcount,
                                                     MPI_Fint* sendtype, char* recvbuf,
                                                     MPI_Fint* recvcount, MPI_Fint* recvtype,
                                                     MPI_Fint* root, MPI_Fint* comm, MPI_Fint* info,
                                                     MPI_Fint* request, MPI_Fint* ierr) {
  start_fortran(request, ierr, [&](MPI_Request* r) {
    return TCOLL_C_INIT(Gather)(c_buffer(sendbuf), *sendcount, PMPI_Type_f2c(*sendtype),
                                c_buffer(recvbuf), *recvcount, PMPI_Type_f2c(*recvtype), *root,
                                PMPI_Comm_f2c(*comm), PMPI_Info_f2c(*info), r);
  });
}
TCOLL_FORTRAN_INIT_ALIASES(gather, GATHER)

TCOLL_PRELOAD_EXPORT void
TCOLL_FORTRAN_INIT(scatter)(char* sendbuf, MPI_Fint* sendcount, MPI_Fint* sendtype, char* recvbuf,
                            MPI_Fint* recvcount, MPI_Fint* recvtype, MPI_Fint* root, MPI_Fint* comm,
                            MPI_Fint* info, MPI_Fint* request, MPI_Fint* ierr) {
  start_fortran(request, ierr, [&](MPI_Request* r) {
    return TCOLL_C_INIT(Scatter)(c_buffer(sendbuf), *sendcount, PMPI_Type_f2c(*sendtype),
                                 c_buffer(recvbuf), *recvcount, PMPI_Type_f2c(*recvtype), *root,
                                 PMPI_Comm_f2c(*comm), PMPI_Info_f2c(*info), r);
  });
}
TCOLL_FORTRAN_INIT_ALIASES(scatter, SCATTER)

TCOLL_PRELOAD_EXPORT void TCOLL_FORTRAN_INIT(alltoallv)(char* sendbuf, MPI_Fint* sendcounts,
                                                        MPI_Fint* sdispls, MPI_Fint* sendtype,
                                                        char* recvbuf, MPI_Fint* recvcounts,
                                                        MPI_Fint* rdispls, MPI_Fint* recvtype,
                                                        MPI_Fint* comm, MPI_Fint* info,
                                                        MPI_Fint* request, MPI_Fint* ierr) {
  start_fortran(request, ierr, [&](MPI_Request* r) {
    return TCOLL_C_INIT(Alltoallv)(c_buffer(sendbuf), reinterpret_cast<const int*>(sendcounts),
                                   reinterpret_cast<const int*>(sdispls), PMPI_Type_f2c(*sendtype),
                                   c_buffer(recvbuf), reinterpret_cast<const int*>(recvcounts),
                                   reinterpret_cast<const int*>(rdispls), PMPI_Type_f2c(*recvtype),
                                   PMPI_Comm_f2c(*comm), PMPI_Info_f2c(*info), r);
  });
}
TCOLL_FORTRAN_INIT_ALIASES(alltoallv, ALLTOALLV)

TCOLL_PRELOAD_EXPORT void TCOLL_FORTRAN_INIT(gatherv)(char* sendbuf, MPI_Fint* sendcount,
                                                      MPI_Fint* sendtype, char* recvbuf,
                                                      MPI_Fint* recvcounts, MPI_Fint* displs,
                                                      MPI_Fint* recvtype, MPI_Fint* root,
                                                      MPI_Fint* comm, MPI_Fint* info,
                                                      MPI_Fint* request, MPI_Fint* ierr) {
  start_fortran(request, ierr, [&](MPI_Request* r) {
    return TCOLL_C_INIT(Gatherv)(c_buffer(sendbuf), *sendcount, PMPI_Type_f2c(*sendtype),
                                 c_buffer(recvbuf), reinterpret_cast<const int*>(recvcounts),
                                 reinterpret_cast<const int*>(displs), PMPI_Type_f2c(*recvtype),
                                 *root, PMPI_Comm_f2c(*comm), PMPI_Info_f2c(*info), r);
  });
}
TCOLL_FORTRAN_INIT_ALIASES(gatherv, GATHERV)

TCOLL_PRELOAD_EXPORT void TCOLL_FORTRAN_INIT(scatterv)(char* sendbuf, MPI_Fint* sendcounts,
                                                       MPI_Fint* displs, MPI_Fint* sendtype,
                                                       char* recvbuf, MPI_Fint* recvcount,
                                                       MPI_Fint* recvtype, MPI_Fint* root,
                                                       MPI_Fint* comm, MPI_Fint* info,
                                                       MPI_Fint* request, MPI_Fint* ierr) {
  start_fortran(request, ierr, [&](MPI_Request* r) {
    return TCOLL_C_INIT(Scatterv)(c_buffer(sendbuf), reinterpret_cast<const int*>(sendcounts),
                                  reinterpret_cast<const int*>(displs), PMPI_Type_f2c(*sendtype),
                                  c_buffer(recvbuf), *recvcount, PMPI_Type_f2c(*recvtype), *root,
                                  PMPI_Comm_f2c(*comm), PMPI_Info_f2c(*info), r);
  });
}
TCOLL_FORTRAN_INIT_ALIASES(scatterv, SCATTERV)

TCOLL_PRELOAD_EXPORT void TCOLL_FORTRAN_INIT(reduce_scatter)(char* sendbuf, char* recvbuf,
                                                             MPI_Fint* recvcounts,
                                                             MPI_Fint* datatype, MPI_Fint* op,
                                                             MPI_Fint* comm, MPI_Fint* info,
                                                             MPI_Fint* request, MPI_Fint* ierr) {
  start_fortran(request, ierr, [&](MPI_Request* r) {
    return TCOLL_C_INIT(Reduce_scatter)(
        c_buffer(sendbuf), c_buffer(recvbuf), reinterpret_cast<const int*>(recvcounts),
        PMPI_Type_f2c(*datatype), PMPI_Op_f2c(*op), PMPI_Comm_f2c(*comm), PMPI_Info_f2c(*info), r);
  });
}
TCOLL_FORTRAN_INIT_ALIASES(reduce_scatter, REDUCE_SCATTER)

TCOLL_PRELOAD_EXPORT void TCOLL_FORTRAN_INIT(allgatherv)(char* sendbuf, MPI_Fint* sendcount,
                                                         MPI_Fint* sendtype, char* recvbuf,
                                                         MPI_Fint* recvcounts, MPI_Fint* displs,
                                                         MPI_Fint* recvtype, MPI_Fint* comm,
                                                         MPI_Fint* info, MPI_Fint* request,
                                                         MPI_Fint* ierr) {
  start_fortran(request, ierr, [&](MPI_Request* r) {
    return TCOLL_C_INIT(Allgatherv)(c_buffer(sendbuf), *sendcount, PMPI_Type_f2c(*sendtype),
                                    c_buffer(recvbuf), reinterpret_cast<const int*>(recvcounts),
                                    reinterpret_cast<const int*>(displs), PMPI_Type_f2c(*recvtype),
                                    PMPI_Comm_f2c(*comm), PMPI_Info_f2c(*info), r);
  });
}
TCOLL_FORTRAN_INIT_ALIASES(allgatherv, ALLGATHERV)

TCOLL_PRELOAD_EXPORT void TCOLL_FORTRAN_INIT(barrier)(MPI_Fint* comm, MPI_Fint* info,
                                                      MPI_Fint* request, MPI_Fint* ierr) {
  start_fortran(request, ierr, [&](MPI_Request* r) {
    return TCOLL_C_INIT(Barrier)(PMPI_Comm_f2c(*comm), PMPI_Info_f2c(*info), r);
  });
}
TCOLL_FORTRAN_INIT_ALIASES(barrier, BARRIER)
#endif

#elif defined(MPICH_VERSION)

#undef MPI_Finalize

/// MPICH's f08 MPI_FINALIZE: frees tcoll's state while MPI still works and prints the
/// TCOLL_DEBUG summary, as for C (MPICH's own binding calls PMPI_Finalize).
TCOLL_PRELOAD_EXPORT void mpi_finalize_f08_(MPI_Fint* ierr) {
  set_ierr(ierr, MPI_Finalize());
}

#undef MPI_Barrier
#undef MPI_Ibarrier

/// MPICH's f08 MPI_BARRIER and MPI_IBARRIER: their bindings (no buffer to describe) call
/// PMPI_Barrier and PMPI_Ibarrier themselves (seen in MPICH 4.0.2's libmpichfort), so they
/// would skip the C wrappers; these take the C wrappers' paths. `comm` points to the
/// handle inside `type(MPI_Comm)`, `request` to the one inside `type(MPI_Request)`, and
/// `ierr` may be null (an absent optional argument).
TCOLL_PRELOAD_EXPORT void mpi_barrier_f08_(MPI_Fint* comm, MPI_Fint* ierr) {
  set_ierr(ierr, MPI_Barrier(PMPI_Comm_f2c(*comm)));
}
TCOLL_PRELOAD_EXPORT void mpi_ibarrier_f08_(MPI_Fint* comm, MPI_Fint* request, MPI_Fint* ierr) {
  MPI_Request r = MPI_REQUEST_NULL;
  const int rc = MPI_Ibarrier(PMPI_Comm_f2c(*comm), &r);
  *request = PMPI_Request_c2f(r);
  set_ierr(ierr, rc);
}

/// MPICH's f08 MPI_START, MPI_STARTALL and MPI_REQUEST_FREE call PMPI_* themselves too (seen
/// in MPICH 4.0.2's libmpichfort; see `fortran_start`). `request(s)` point to the handles
/// inside `type(MPI_Request)`; `ierr` may be null.
TCOLL_PRELOAD_EXPORT void mpi_start_f08_(MPI_Fint* request, MPI_Fint* ierr) {
  set_ierr(ierr, fortran_start(request));
}
TCOLL_PRELOAD_EXPORT void mpi_startall_f08_(MPI_Fint* count, MPI_Fint* requests, MPI_Fint* ierr) {
  set_ierr(ierr, fortran_startall(*count, requests));
}
TCOLL_PRELOAD_EXPORT void mpi_request_free_f08_(MPI_Fint* request, MPI_Fint* ierr) {
  set_ierr(ierr, fortran_request_free(request));
}

#endif
