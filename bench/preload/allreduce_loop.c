/* An unmodified MPI timing loop (it calls only MPI): float-sum MPI_Allreduce, out of place,
 * from -b to -e bytes (factor -f), printing one line per size on rank 0:
 *   size_bytes  time_us (median over -r timed blocks of -n calls each)  busbw_GBps  wrong
 * -c 1 times cold buffers (as IMB's -off_cache and OSU's cache-off runs): each call uses the
 * next of a pool of buffer pairs spanning at least twice 64 MiB, more than this machine's
 * caches, so no call finds its data cached by the one before; -c 0 (the default) reuses one
 * pair (hot).
 * -p 1 times the persistent allreduce instead (MPI_Allreduce_init, or Open MPI 4's
 * MPIX_Allreduce_init, once per size; MPI_Start and MPI_Wait per call; hot buffers), at
 * MPI_THREAD_MULTIPLE (which the preload's persistent path needs) for every run alike.
 * Run it with and without LD_PRELOAD=libtcoll_mpi.so (bench/preload/run.sh does both). */
#include <mpi.h>
#if MPI_VERSION < 4 && defined(OPEN_MPI)
#include <mpi-ext.h> /* MPIX_Allreduce_init */
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loop_common.h"

static float *in, *out;
static int n;
static size_t slots = 1, slot_floats = 0, next_slot = 0; /* the buffer pool (-c 1) */
static MPI_Request persistent = MPI_REQUEST_NULL;           /* -p 1 */

#if MPI_VERSION >= 4
#define LOOP_ALLREDUCE_INIT MPI_Allreduce_init
#elif defined(OMPI_HAVE_MPI_EXT_PCOLLREQ) && OMPI_HAVE_MPI_EXT_PCOLLREQ
#define LOOP_ALLREDUCE_INIT MPIX_Allreduce_init
#endif

static void allreduce_once(void* unused) {
  (void)unused;
  if (persistent != MPI_REQUEST_NULL) {
    MPI_Start(&persistent);
    MPI_Wait(&persistent, MPI_STATUS_IGNORE);
    return;
  }
  const size_t at = next_slot * slot_floats;
  next_slot = (next_slot + 1) % slots;
  MPI_Allreduce(in + at, out + at, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}

int main(int argc, char** argv) {
  int use_persistent = 0;
  for (int i = 1; i + 1 < argc; i += 2)
    if (!strcmp(argv[i], "-p")) use_persistent = atoi(argv[i + 1]);
  if (use_persistent) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  } else {
    MPI_Init(&argc, &argv);
  }
#ifndef LOOP_ALLREDUCE_INIT
  if (use_persistent) {
    fprintf(stderr, "allreduce_loop: this MPI has no persistent allreduce\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
#endif
  int rank, P;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  size_t lo = 8, hi = 64u << 20, factor = 8;
  int blocks = 5, cold = 0;
  double budget = 0.2; /* seconds of timed calls per block, about */
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "-b")) lo = loop_parse_bytes(argv[i + 1]);
    if (!strcmp(argv[i], "-e")) hi = loop_parse_bytes(argv[i + 1]);
    if (!strcmp(argv[i], "-f")) factor = loop_parse_bytes(argv[i + 1]);
    if (!strcmp(argv[i], "-r")) blocks = atoi(argv[i + 1]);
    if (!strcmp(argv[i], "-t")) budget = atof(argv[i + 1]);
    if (!strcmp(argv[i], "-c")) cold = atoi(argv[i + 1]);
  }
  const size_t cache_bytes = (size_t)64 << 20;
  const size_t pool = cold ? 2 * (hi > cache_bytes ? hi : cache_bytes) + 4096 : hi;
  in = malloc(pool), out = malloc(pool);
  if (!in || !out) MPI_Abort(MPI_COMM_WORLD, 2);
  /* every slot holds the same input pattern, at its own offset */
  for (size_t i = 0; i < pool / sizeof(float); ++i) in[i] = 0;
  if (use_persistent) cold = 0;
  if (rank == 0)
    printf("# ranks %d, %s buffers%s\n# bytes time_us busbw_GBps wrong\n", P, cold ? "cold" : "hot",
           use_persistent ? ", persistent (MPI_Start + MPI_Wait)" : "");
  size_t sizes[64];
  int nsizes = 0;
  for (size_t b = lo; b <= hi && nsizes < 63; b *= factor) sizes[nsizes++] = b;
  if (nsizes == 0 || sizes[nsizes - 1] != hi) sizes[nsizes++] = hi; /* -e is always measured */
  for (int s = 0; s < nsizes; ++s) {
    const size_t bytes = sizes[s];
    n = (int)(bytes / sizeof(float));
    slot_floats = (bytes + 4095) / 4096 * 4096 / sizeof(float);
    slots = cold ? pool / (slot_floats * sizeof(float)) : 1;
    for (size_t k = 0; k < slots; ++k)
      for (int i = 0; i < n; ++i) in[k * slot_floats + i] = (float)((rank + i) % 7);
    next_slot = 0;
#ifdef LOOP_ALLREDUCE_INIT
    if (use_persistent)
      LOOP_ALLREDUCE_INIT(in, out, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL,
                          &persistent);
#endif
    const double med = loop_median_seconds(allreduce_once, NULL, blocks, budget);
    next_slot = 0;
    allreduce_once(NULL); /* the check reads slot 0 */
    long wrong = 0;
    for (int i = 0; i < n; ++i) {
      float want = 0;
      for (int q = 0; q < P; ++q) want += (float)((q + i) % 7);
      wrong += out[i] != want;
    }
    if (persistent != MPI_REQUEST_NULL) MPI_Request_free(&persistent);
    if (rank == 0) {
      printf("%zu %.3f %.3f %ld\n", bytes, med * 1e6, (double)bytes / med * 2.0 * (P - 1) / P / 1e9,
             wrong);
      fflush(stdout);
    }
  }
  free(in), free(out);
  MPI_Finalize();
  return 0;
}
