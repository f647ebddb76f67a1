/* The preload's own cost per call where it hands the call to MPI: one process, 8-byte
 * MPI_Bcast, MPI_Allgather, MPI_Allreduce, MPI_Reduce, MPI_Alltoall, MPI_Gather, MPI_Scatter,
 * MPI_Reduce_scatter_block and the forms with count arrays (MPI_Allgatherv, MPI_Alltoallv,
 * MPI_Gatherv, MPI_Scatterv, MPI_Reduce_scatter) on MPI_COMM_WORLD and on a duplicate of it, 10^6
 * calls each (the MPI's work at one rank is a few ns to a few tens), printed as "collective
 * communicator ns_per_call". bench/preload/run_wrapper_cost.sh runs it with and without
 * libtcoll_mpi.so. Plain C, MPI calls only. */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char** argv) {
  int provided;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm dup;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  char in[64] = {0}, out[64 * 8];
  const int calls = 1000000;
  const char* names[] = {
      "MPI_Bcast",         "MPI_Allgather", "MPI_Allreduce", "MPI_Reduce",
      "MPI_Alltoall",      "MPI_Gather",    "MPI_Scatter",   "MPI_Reduce_scatter_block",
      "MPI_Allgatherv",    "MPI_Alltoallv", "MPI_Gatherv",   "MPI_Scatterv",
      "MPI_Reduce_scatter"};
  const int counts[1] = {8}, floats[1] = {2}, displs[1] = {0}; /* one rank's block */
  for (int c = 0; c < 2; ++c) {
    MPI_Comm comm = c == 0 ? MPI_COMM_WORLD : dup;
    for (int k = 0; k < 13; ++k) {
      const double start = MPI_Wtime();
      for (int i = 0; i < calls; ++i) {
        if (k == 0) MPI_Bcast(in, 8, MPI_BYTE, 0, comm);
        if (k == 1) MPI_Allgather(in, 8, MPI_BYTE, out, 8, MPI_BYTE, comm);
        if (k == 2) MPI_Allreduce(in, out, 2, MPI_FLOAT, MPI_SUM, comm);
        if (k == 3) MPI_Reduce(in, out, 2, MPI_FLOAT, MPI_SUM, 0, comm);
        if (k == 4) MPI_Alltoall(in, 8, MPI_BYTE, out, 8, MPI_BYTE, comm);
        if (k == 5) MPI_Gather(in, 8, MPI_BYTE, out, 8, MPI_BYTE, 0, comm);
        if (k == 6) MPI_Scatter(in, 8, MPI_BYTE, out, 8, MPI_BYTE, 0, comm);
        if (k == 7) MPI_Reduce_scatter_block(in, out, 2, MPI_FLOAT, MPI_SUM, comm);
        if (k == 8) MPI_Allgatherv(in, 8, MPI_BYTE, out, counts, displs, MPI_BYTE, comm);
        if (k == 9)
          MPI_Alltoallv(in, counts, displs, MPI_BYTE, out, counts, displs, MPI_BYTE, comm);
        if (k == 10) MPI_Gatherv(in, 8, MPI_BYTE, out, counts, displs, MPI_BYTE, 0, comm);
        if (k == 11) MPI_Scatterv(in, counts, displs, MPI_BYTE, out, 8, MPI_BYTE, 0, comm);
        if (k == 12) MPI_Reduce_scatter(in, out, floats, MPI_FLOAT, MPI_SUM, comm);
      }
      printf("%s %s %.1f\n", names[k], c == 0 ? "world" : "dup",
             (MPI_Wtime() - start) / calls * 1e9);
    }
  }
  MPI_Comm_free(&dup);
  MPI_Finalize();
  return 0;
}
