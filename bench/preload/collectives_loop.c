/* An unmodified MPI timing loop (it calls only MPI) for MPI_Bcast (root 0), MPI_Reduce
 * (float sum, root 0), MPI_Allgather and MPI_Reduce_scatter_block (float sum), and their
 * forms with uneven blocks MPI_Allgatherv and MPI_Reduce_scatter (rank q's block is
 * 2n(q+1)/(P(P+1)) of the n elements, packed in rank order), MPI_Alltoall (the bytes:
 * one rank's whole send buffer, P blocks), and MPI_Gather and MPI_Scatter (root 0; the
 * bytes: the root's whole buffer, P blocks), and the uneven MPI_Alltoallv (rank r sends rank q
 * 2b((r+q) mod P + 1)/(P+1) of b = n/P elements per block, so every rank sends and receives
 * about n; the bytes: one rank's send blocks together), MPI_Gatherv and MPI_Scatterv (root 0,
 * rank q's block as MPI_Allgatherv's; the bytes: the root's blocks together), and
 * MPI_Barrier (timed once, at the first size: it moves no data), out of place,
 * from -b to -e
 * bytes (factor -f; the bytes are the collective's whole buffer: the broadcast or reduced
 * vector, all P gathered blocks, all P blocks reduced), one line per size on
 * rank 0:  collective size_bytes time_us (median over -r blocks of calls) wrong
 * -c 1 times cold buffers (as allreduce_loop.c -c 1: each call uses the next of a pool of
 * buffer pairs spanning at least twice 64 MiB); -c 0 (the default) reuses one pair (hot).
 * -C NAME,NAME,... times only those collectives (e.g. -C MPI_Gather,MPI_Scatter).
 * Run it with and without LD_PRELOAD=libtcoll_mpi.so (bench/preload/run_collectives.sh). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loop_common.h"

/* Is `name` one of the comma-separated names of `list`? */
static int loop_listed(const char* list, const char* name) {
  const size_t n = strlen(name);
  for (const char* p = list; *p;) {
    const char* end = strchr(p, ',');
    const size_t len = end ? (size_t)(end - p) : strlen(p);
    if (len == n && strncmp(p, name, n) == 0) return 1;
    if (!end) break;
    p = end + 1;
  }
  return 0;
}

static int rank, P;
static float *in_pool, *out_pool, *in, *out;
static size_t slots = 1, slot_floats = 0, next_slot = 0; /* the buffer pool (-c 1) */
static int *counts, *displs; /* the uneven blocks of MPI_Allgatherv and MPI_Reduce_scatter */
static int *a2a_sc, *a2a_sd, *a2a_rc, *a2a_rd; /* MPI_Alltoallv's, of this rank */

/* The uneven blocks of n elements: rank q's is 2n(q+1)/(P(P+1)), in rank order. */
static void uneven_blocks(int n) {
  int at = 0;
  for (int q = 0; q < P; ++q) {
    counts[q] = (int)(2.0 * n * (q + 1) / ((double)P * (P + 1)));
    displs[q] = at;
    at += counts[q];
  }
}

/* MPI_Alltoallv's block from rank `from` to rank `to` (elements; n in all, about, per rank). */
static int pair_block(int n, int from, int to) {
  return (int)(2.0 * (n / P) * ((from + to) % P + 1) / (P + 1));
}

/* Where rank `from` sends its block to rank `to`: after its blocks to lower ranks. */
static int pair_displ(int n, int from, int to) {
  int at = 0;
  for (int q = 0; q < to; ++q) at += pair_block(n, from, q);
  return at;
}

static void uneven_pairs(int n) {
  for (int q = 0; q < P; ++q) {
    a2a_sc[q] = pair_block(n, rank, q), a2a_sd[q] = pair_displ(n, rank, q);
    a2a_rc[q] = pair_block(n, q, rank), a2a_rd[q] = q == 0 ? 0 : a2a_rd[q - 1] + a2a_rc[q - 1];
  }
}

/* One call of collective `c` on `bytes` of whole buffer, on the next slot of the pool. */
static void call(int c, size_t bytes) {
  const int n = (int)(bytes / sizeof(float)), block = n / P;
  in = in_pool + next_slot * slot_floats;
  out = out_pool + next_slot * slot_floats;
  next_slot = (next_slot + 1) % slots;
  if (c == 0) MPI_Bcast(in, n, MPI_FLOAT, 0, MPI_COMM_WORLD);
  if (c == 1) MPI_Reduce(in, out, n, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD);
  if (c == 2) MPI_Allgather(in, block, MPI_FLOAT, out, block, MPI_FLOAT, MPI_COMM_WORLD);
  if (c == 3) MPI_Reduce_scatter_block(in, out, block, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  if (c == 4)
    MPI_Allgatherv(in, counts[rank], MPI_FLOAT, out, counts, displs, MPI_FLOAT, MPI_COMM_WORLD);
  if (c == 5) MPI_Reduce_scatter(in, out, counts, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  if (c == 6) MPI_Alltoall(in, block, MPI_FLOAT, out, block, MPI_FLOAT, MPI_COMM_WORLD);
  if (c == 7) MPI_Gather(in, block, MPI_FLOAT, out, block, MPI_FLOAT, 0, MPI_COMM_WORLD);
  if (c == 8) MPI_Scatter(in, block, MPI_FLOAT, out, block, MPI_FLOAT, 0, MPI_COMM_WORLD);
  if (c == 9)
    MPI_Alltoallv(in, a2a_sc, a2a_sd, MPI_FLOAT, out, a2a_rc, a2a_rd, MPI_FLOAT, MPI_COMM_WORLD);
  if (c == 10)
    MPI_Gatherv(in, counts[rank], MPI_FLOAT, out, counts, displs, MPI_FLOAT, 0, MPI_COMM_WORLD);
  if (c == 11)
    MPI_Scatterv(in, counts, displs, MPI_FLOAT, out, counts[rank], MPI_FLOAT, 0, MPI_COMM_WORLD);
  if (c == 12) MPI_Barrier(MPI_COMM_WORLD);
}

struct args {
  int c;
  size_t bytes;
};
static void call_once(void* p) {
  const struct args* a = p;
  call(a->c, a->bytes);
}

/* Elements wrong after the last call (inputs are rank-dependent small integers). */
static long check(int c, size_t bytes) {
  const int n = (int)(bytes / sizeof(float)), block = n / P;
  long wrong = 0;
  if (c == 12) return 0; /* MPI_Barrier has no result */
  for (int i = 0; i < n; ++i) {
    float want = 0;
    if (c == 0) want = (float)(i % 7); /* root 0's values */
    if (c == 1 && rank != 0) break;
    if (c == 1)
      for (int q = 0; q < P; ++q) want += (float)((q + i) % 7);
    if (c == 2 && i >= block * P) break;
    if (c == 2) want = (float)((i / block + i % block) % 7);
    if (c == 3 && i >= block) break;
    if (c == 3)
      for (int q = 0; q < P; ++q) want += (float)((q + rank * block + i) % 7);
    if (c == 4 && i >= displs[P - 1] + counts[P - 1]) break;
    if (c ==
        4) { /* element i lies in the block of the last rank whose block starts at or before it */
      int q = P - 1;
      while (q > 0 && displs[q] > i) --q;
      want = (float)((q + i - displs[q]) % 7);
    }
    if (c == 6 && i >= block * P) break;
    if (c == 6) want = (float)((i / block + rank * block + i % block) % 7); /* q's block r */
    if (c == 7 && (rank != 0 || i >= block * P)) break;
    if (c == 7) want = (float)((i / block + i % block) % 7); /* q's first block */
    if (c == 8 && i >= block) break;
    if (c == 8) want = (float)((rank * block + i) % 7); /* block r of root 0's buffer */
    if (c == 9 && i >= a2a_rd[P - 1] + a2a_rc[P - 1]) break;
    if (c == 9) { /* from rank q, whose block for this rank starts at its pair_displ */
      int q = P - 1;
      while (q > 0 && a2a_rd[q] > i) --q;
      want = (float)((q + pair_displ(n, q, rank) + i - a2a_rd[q]) % 7);
    }
    if (c == 10 && (rank != 0 || i >= displs[P - 1] + counts[P - 1])) break;
    if (c == 10) { /* as MPI_Allgatherv's */
      int q = P - 1;
      while (q > 0 && displs[q] > i) --q;
      want = (float)((q + i - displs[q]) % 7);
    }
    if (c == 11 && i >= counts[rank]) break;
    if (c == 11) want = (float)((displs[rank] + i) % 7); /* root 0's elements */
    if (c == 5 && i >= counts[rank]) break;
    if (c == 5)
      for (int q = 0; q < P; ++q) want += (float)((q + displs[rank] + i) % 7);
    wrong += (c == 0 ? in[i] : out[i]) != want;
  }
  return wrong;
}

/* Fills every slot's input; the pool restarts at slot 0. */
static void reset(size_t bytes, int cold, size_t pool) {
  slot_floats = (bytes + 4095) / 4096 * 4096 / sizeof(float);
  slots = cold ? pool / (slot_floats * sizeof(float)) : 1;
  for (size_t k = 0; k < slots; ++k)
    for (size_t i = 0; i < bytes / sizeof(float); ++i)
      in_pool[k * slot_floats + i] = (float)((rank + i) % 7);
  next_slot = 0;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  size_t lo = 4096, hi = 16u << 20, factor = 4;
  int blocks = 5, cold = 0;
  const char* only = NULL; /* -C: the collectives to time, comma-separated names */
  double budget = 0.1;     /* seconds of timed calls per block, about */
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "-b")) lo = loop_parse_bytes(argv[i + 1]);
    if (!strcmp(argv[i], "-e")) hi = loop_parse_bytes(argv[i + 1]);
    if (!strcmp(argv[i], "-f")) factor = loop_parse_bytes(argv[i + 1]);
    if (!strcmp(argv[i], "-r")) blocks = atoi(argv[i + 1]);
    if (!strcmp(argv[i], "-t")) budget = atof(argv[i + 1]);
    if (!strcmp(argv[i], "-c")) cold = atoi(argv[i + 1]);
    if (!strcmp(argv[i], "-C")) only = argv[i + 1];
  }
  const size_t cache_bytes = (size_t)64 << 20;
  const size_t pool = cold ? 2 * (hi > cache_bytes ? hi : cache_bytes) + 4096 : hi;
  in_pool = malloc(pool), out_pool = malloc(pool);
  if (!in_pool || !out_pool) MPI_Abort(MPI_COMM_WORLD, 2);
  enum { ncoll = 13 };
  const char* names[ncoll] = {
      "MPI_Bcast",      "MPI_Reduce",         "MPI_Allgather", "MPI_Reduce_scatter_block",
      "MPI_Allgatherv", "MPI_Reduce_scatter", "MPI_Alltoall",  "MPI_Gather",
      "MPI_Scatter",    "MPI_Alltoallv",      "MPI_Gatherv",   "MPI_Scatterv",
      "MPI_Barrier"};
  counts = malloc(sizeof(int) * P), displs = malloc(sizeof(int) * P);
  a2a_sc = malloc(sizeof(int) * P), a2a_sd = malloc(sizeof(int) * P);
  a2a_rc = malloc(sizeof(int) * P), a2a_rd = malloc(sizeof(int) * P);
  if (!counts || !displs || !a2a_sc || !a2a_sd || !a2a_rc || !a2a_rd) MPI_Abort(MPI_COMM_WORLD, 2);
  if (rank == 0)
    printf("# ranks %d, %s buffers\n# collective bytes time_us wrong\n", P, cold ? "cold" : "hot");
  for (int c = 0; c < ncoll; ++c) {
    if (only && !loop_listed(only, names[c])) continue;
    for (size_t bytes = lo; bytes <= (c == 12 ? lo : hi); bytes *= factor) {
      if (bytes / sizeof(float) < (size_t)P) continue;
      uneven_blocks((int)(bytes / sizeof(float)));
      uneven_pairs((int)(bytes / sizeof(float)));
      reset(bytes, cold, pool);
      struct args a = {c, bytes};
      const double med = loop_median_seconds(call_once, &a, blocks, budget);
      next_slot = 0;
      call(c, bytes); /* the check reads slot 0 */
      long wrong = check(c, bytes), all = 0;
      MPI_Reduce(&wrong, &all, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
      if (rank == 0) {
        printf("%s %zu %.3f %ld\n", names[c], bytes, med * 1e6, all);
        fflush(stdout);
      }
    }
  }
  free(in_pool), free(out_pool), free(counts), free(displs);
  free(a2a_sc), free(a2a_sd), free(a2a_rc), free(a2a_rd);
  MPI_Finalize();
  return 0;
}
