#define _POSIX_C_SOURCE 200809L /* nanosleep */
/* An unmodified MPI program (it calls only MPI) that checks the results of MPI_Allreduce,
 * MPI_Iallreduce, the persistent MPI_Allreduce_init, MPI_Reduce_scatter_block and
 * MPI_Reduce_scatter, MPI_Allgatherv, MPI_Reduce, MPI_Allgather, MPI_Alltoall, MPI_Gather,
 * MPI_Scatter, the uneven MPI_Alltoallv, MPI_Gatherv and MPI_Scatterv, and MPI_Bcast for every
 * predefined C integer and floating type x every predefined op MPI allows on it x in place or not x
 * several communicators (the world, halves with reversed rank order, a singleton and the rest,
 * MPI_COMM_SELF, short-lived duplicates) x counts 0, 1, 7 and a large one. It also makes the calls
 * libtcoll_mpi.so must leave to MPI (a user op, derived datatypes, MAXLOC, an intercommunicator)
 * and checks those results too.
 *
 * Run under mpirun with or without LD_PRELOAD=libtcoll_mpi.so; the test runner
 * (run_preload.py) checks that the preload was active from its TCOLL_DEBUG summary.
 * Arguments: [full|quick] [multiple|serialized|funneled|single] (MPI_Init_thread level;
 * single: MPI_Init; serialized: the checks run on a second thread).
 * Every rank prints its error count; the exit code is non-zero if any check failed. */
#define _GNU_SOURCE /* RTLD_DEFAULT */
#include <dirent.h>
#include <dlfcn.h>
#include <mpi.h>
/* Open MPI 5 has MPI-4's persistent collectives while it reports MPI_VERSION 3 */
#if MPI_VERSION >= 4 || (defined(OMPI_MAJOR_VERSION) && OMPI_MAJOR_VERSION >= 5)
#define HAVE_MPI4_PERSISTENT 1
#else
#define HAVE_MPI4_PERSISTENT 0
#endif
#if !HAVE_MPI4_PERSISTENT && defined(OPEN_MPI)
#include <mpi-ext.h> /* Open MPI 4's persistent collectives: MPIX_Allreduce_init */
#endif
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int errors = 0;
static long checks = 0;
static int world_rank = 0;
static int quick = 0;

enum { OP_SUM, OP_PROD, OP_MIN, OP_MAX, OP_BAND, OP_BOR, OP_BXOR, OP_LAND, OP_LOR, OP_LXOR, OP_N };
static const char* const op_names[OP_N] = {"SUM", "PROD", "MIN",  "MAX", "BAND",
                                           "BOR", "BXOR", "LAND", "LOR", "LXOR"};

static MPI_Op mpi_op(int o) {
  switch (o) {
  case OP_SUM:
    return MPI_SUM;
  case OP_PROD:
    return MPI_PROD;
  case OP_MIN:
    return MPI_MIN;
  case OP_MAX:
    return MPI_MAX;
  case OP_BAND:
    return MPI_BAND;
  case OP_BOR:
    return MPI_BOR;
  case OP_BXOR:
    return MPI_BXOR;
  case OP_LAND:
    return MPI_LAND;
  case OP_LOR:
    return MPI_LOR;
  default:
    return MPI_LXOR;
  }
}

/* Rank r's input at element i for op o: small values, so no signed type overflows (at most
 * 8 ranks: |sum| <= 64, |prod| <= 8) and every float result is exact in any order. */
static int minmax_nonneg = 0; /* see the types table */
static long long input(int o, int r, long long i) {
  switch (o) {
  case OP_MIN:
  case OP_MAX:
    if (minmax_nonneg) return (long long)((r * 7 + i * 3) % 17);
    return (long long)((r * 7 + i * 3) % 17) - 8;
  case OP_PROD:
    return ((r + i) % 3 == 0) ? 2 : (((r + i) % 2) ? -1 : 1);
  case OP_BAND:
  case OP_BOR:
  case OP_BXOR:
    return (long long)((r * 37 + i * 11 + 5) & 0x7f);
  case OP_LAND:
  case OP_LOR:
  case OP_LXOR:
    return ((r + i) % 3 == 0) ? 0 : (r + 2 * i) % 5 + 1;
  default:
    return (long long)((r * 7 + i * 3) % 17) - 8;
  }
}

/* One element type: how to store, fold and compare values of it. */
typedef struct {
  const char* name;
  MPI_Datatype type;
  size_t size;
  int kind;   /* 0: integer (all ops), 1: floating (sum, prod, min, max), 2: MPI_BYTE (bitwise) */
  int nonneg; /* min and max only on non-negative values (see below) */
  void (*set)(void* buf, size_t i, long long v);
  void (*fold)(int o, void* acc, size_t i, long long v); /* acc[i] = op(acc[i], v) */
  int (*eq)(const void* a, const void* b, size_t i);
  double (*value)(const void* a, size_t i);
} tdesc;

#define INT_TYPE(NAME, CT)                                                                         \
  static void NAME##_set(void* b, size_t i, long long v) {                                         \
    ((CT*)b)[i] = (CT)v;                                                                           \
  }                                                                                                \
  static void NAME##_fold(int o, void* acc, size_t i, long long v) {                               \
    CT a = ((CT*)acc)[i], b = (CT)v, r;                                                            \
    switch (o) {                                                                                   \
    case OP_SUM:                                                                                   \
      r = (CT)((unsigned long long)a + (unsigned long long)b);                                     \
      break;                                                                                       \
    case OP_PROD:                                                                                  \
      r = (CT)((unsigned long long)a * (unsigned long long)b);                                     \
      break;                                                                                       \
    case OP_MIN:                                                                                   \
      r = b < a ? b : a;                                                                           \
      break;                                                                                       \
    case OP_MAX:                                                                                   \
      r = a < b ? b : a;                                                                           \
      break;                                                                                       \
    case OP_BAND:                                                                                  \
      r = (CT)(a & b);                                                                             \
      break;                                                                                       \
    case OP_BOR:                                                                                   \
      r = (CT)(a | b);                                                                             \
      break;                                                                                       \
    case OP_BXOR:                                                                                  \
      r = (CT)(a ^ b);                                                                             \
      break;                                                                                       \
    case OP_LAND:                                                                                  \
      r = (CT)((a != 0) && (b != 0));                                                              \
      break;                                                                                       \
    case OP_LOR:                                                                                   \
      r = (CT)((a != 0) || (b != 0));                                                              \
      break;                                                                                       \
    default:                                                                                       \
      r = (CT)((a != 0) != (b != 0));                                                              \
      break;                                                                                       \
    }                                                                                              \
    ((CT*)acc)[i] = r;                                                                             \
  }                                                                                                \
  static int NAME##_eq(const void* a, const void* b, size_t i) {                                   \
    return ((const CT*)a)[i] == ((const CT*)b)[i];                                                 \
  }                                                                                                \
  static double NAME##_value(const void* a, size_t i) {                                            \
    return (double)((const CT*)a)[i];                                                              \
  }

#define FLOAT_TYPE(NAME, CT)                                                                       \
  static void NAME##_set(void* b, size_t i, long long v) {                                         \
    ((CT*)b)[i] = (CT)v;                                                                           \
  }                                                                                                \
  static void NAME##_fold(int o, void* acc, size_t i, long long v) {                               \
    CT a = ((CT*)acc)[i], b = (CT)v, r;                                                            \
    switch (o) {                                                                                   \
    case OP_SUM:                                                                                   \
      r = a + b;                                                                                   \
      break;                                                                                       \
    case OP_PROD:                                                                                  \
      r = a * b;                                                                                   \
      break;                                                                                       \
    case OP_MIN:                                                                                   \
      r = b < a ? b : a;                                                                           \
      break;                                                                                       \
    default:                                                                                       \
      r = a < b ? b : a;                                                                           \
      break;                                                                                       \
    }                                                                                              \
    ((CT*)acc)[i] = r;                                                                             \
  }                                                                                                \
  static int NAME##_eq(const void* a, const void* b, size_t i) {                                   \
    return ((const CT*)a)[i] == ((const CT*)b)[i];                                                 \
  }                                                                                                \
  static double NAME##_value(const void* a, size_t i) {                                            \
    return (double)((const CT*)a)[i];                                                              \
  }

INT_TYPE(schar, signed char)
INT_TYPE(uchar, unsigned char)
INT_TYPE(sshort, short)
INT_TYPE(ushort, unsigned short)
INT_TYPE(sint, int)
INT_TYPE(uint, unsigned)
INT_TYPE(slong, long)
INT_TYPE(ulong, unsigned long)
INT_TYPE(sllong, long long)
INT_TYPE(ullong, unsigned long long)
INT_TYPE(i8, int8_t)
INT_TYPE(i16, int16_t)
INT_TYPE(i32, int32_t)
INT_TYPE(i64, int64_t)
INT_TYPE(u8, uint8_t)
INT_TYPE(u16, uint16_t)
INT_TYPE(u32, uint32_t)
INT_TYPE(u64, uint64_t)
INT_TYPE(aint, MPI_Aint)
INT_TYPE(offset, MPI_Offset)
INT_TYPE(count, MPI_Count)
FLOAT_TYPE(flt, float)
FLOAT_TYPE(dbl, double)
FLOAT_TYPE(ldbl, long double)

#define DESC(NAME, CT, MT, KIND)                                                                   \
  { #MT, MT, sizeof(CT), KIND, 0, NAME##_set, NAME##_fold, NAME##_eq, NAME##_value }
/* Some MPIs compute MPI_MIN and MPI_MAX wrongly on some integer types themselves: Open MPI
 * 4.1.4 on MPI_UNSIGNED_LONG (as if signed, open-mpi/ompi#10525) and MPI_OFFSET (as if
 * unsigned), MPICH 4.0.2 on every unsigned type (pmodels/mpich#6083): min(2, (unsigned)-5)
 * comes back as (unsigned)-5. probe_minmax() asks the MPI in use (MPI_Reduce_local) and gives
 * the types it gets wrong non-negative min/max inputs, so that the checks hold at passthrough
 * sizes (where MPI computes) too; tcoll gets them right either way. */
static tdesc types[] = {
    DESC(schar, signed char, MPI_SIGNED_CHAR, 0),
    DESC(uchar, unsigned char, MPI_UNSIGNED_CHAR, 0),
    DESC(sshort, short, MPI_SHORT, 0),
    DESC(ushort, unsigned short, MPI_UNSIGNED_SHORT, 0),
    DESC(sint, int, MPI_INT, 0),
    DESC(uint, unsigned, MPI_UNSIGNED, 0),
    DESC(slong, long, MPI_LONG, 0),
    DESC(ulong, unsigned long, MPI_UNSIGNED_LONG, 0),
    DESC(sllong, long long, MPI_LONG_LONG, 0),
    DESC(ullong, unsigned long long, MPI_UNSIGNED_LONG_LONG, 0),
    DESC(i8, int8_t, MPI_INT8_T, 0),
    DESC(i16, int16_t, MPI_INT16_T, 0),
    DESC(i32, int32_t, MPI_INT32_T, 0),
    DESC(i64, int64_t, MPI_INT64_T, 0),
    DESC(u8, uint8_t, MPI_UINT8_T, 0),
    DESC(u16, uint16_t, MPI_UINT16_T, 0),
    DESC(u32, uint32_t, MPI_UINT32_T, 0),
    DESC(u64, uint64_t, MPI_UINT64_T, 0),
    DESC(aint, MPI_Aint, MPI_AINT, 0),
    DESC(offset, MPI_Offset, MPI_OFFSET, 0),
    DESC(count, MPI_Count, MPI_COUNT, 0),
    DESC(flt, float, MPI_FLOAT, 1),
    DESC(dbl, double, MPI_DOUBLE, 1),
    DESC(ldbl, long double, MPI_LONG_DOUBLE, 1),
    DESC(uchar, unsigned char, MPI_BYTE, 2),
};
#define NTYPES ((int)(sizeof types / sizeof types[0]))

/* Marks the integer types whose MPI_MIN or MPI_MAX this MPI computes wrongly on mixed-sign
 * values (see above); world rank 0 names them. */
static void probe_minmax(void) {
  enum { n = 64 }; /* long enough for vectorised op paths (Open MPI's AVX ops start at 16) */
  for (int k = 0; k < NTYPES; ++k) {
    tdesc* t = &types[k];
    if (t->kind != 0) continue;
    for (int o = OP_MIN; o <= OP_MAX; ++o) {
      char in[n * 16], inout[n * 16], want[n * 16];
      for (size_t i = 0; i < n; ++i) {
        t->set(in, i, -5);
        t->set(inout, i, 2);
        t->set(want, i, 2);
        t->fold(o, want, i, -5);
      }
      MPI_Reduce_local(in, inout, n, t->type, mpi_op(o));
      int wrong = 0;
      for (size_t i = 0; i < n; ++i) wrong |= !t->eq(inout, want, i);
      if (wrong && !t->nonneg) {
        t->nonneg = 1;
        if (world_rank == 0)
          printf("note: this MPI computes %s on %s wrongly itself; its min/max inputs are "
                 "kept non-negative\n",
                 o == OP_MIN ? "MPI_MIN" : "MPI_MAX", t->name);
      }
    }
  }
}

static int op_allowed(const tdesc* t, int o) {
  if (t->kind == 0) return 1;
  if (t->kind == 1) return o <= OP_MAX;
  return o == OP_BAND || o == OP_BOR || o == OP_BXOR;
}

static void* xmalloc(size_t n) {
  void* p = malloc(n ? n : 1);
  if (!p) {
    fprintf(stderr, "rank %d: out of memory\n", world_rank);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  return p;
}

/* Compares n elements of got with want; reports the first mismatch. */
static void compare(const tdesc* t, const void* got, const void* want, size_t n, const char* what,
                    int o, int inplace, MPI_Comm comm) {
  int r, P;
  MPI_Comm_rank(comm, &r);
  MPI_Comm_size(comm, &P);
  ++checks;
  for (size_t i = 0; i < n; ++i)
    if (!t->eq(got, want, i)) {
      if (errors < 20)
        fprintf(stderr,
                "rank %d (%d of %d): %s %s %s%s count %zu: element %zu is %g, expected %g\n",
                world_rank, r, P, what, t->name, o >= 0 ? op_names[o] : "-",
                inplace ? " in place" : "", n, i, t->value(got, i), t->value(want, i));
      ++errors;
      return;
    }
}

static void check_call(int rc, const char* what) {
  if (rc != MPI_SUCCESS) {
    fprintf(stderr, "rank %d: %s returned %d\n", world_rank, what, rc);
    ++errors;
  }
}

/* expect[i] = op over ranks 0..P-1 of input(o, q, base + i). */
static void expected(const tdesc* t, int o, int P, size_t n, size_t base, void* expect) {
  for (size_t i = 0; i < n; ++i) {
    t->set(expect, i, input(o, 0, (long long)(base + i)));
    for (int q = 1; q < P; ++q) t->fold(o, expect, i, input(o, q, (long long)(base + i)));
  }
}

/* Section 5 of run_checks repeats calls through MPI-4's large-count entry points
 * (MPI_Allreduce_c, ...), which MPI-4 clients such as mpi4py 4 call, where the MPI has them. */
#if MPI_VERSION >= 4
static int large_count = 0;
#define COLL(name, ...) (large_count ? name##_c(__VA_ARGS__) : name(__VA_ARGS__))
#else
#define COLL(name, ...) name(__VA_ARGS__)
#endif

static void check_allreduce(MPI_Comm comm, const tdesc* t, int o, int inplace, size_t n) {
  int r, P;
  MPI_Comm_rank(comm, &r);
  MPI_Comm_size(comm, &P);
  char *in = xmalloc(n * t->size), *out = xmalloc(n * t->size), *want = xmalloc(n * t->size),
       *keep = xmalloc(n * t->size);
  for (size_t i = 0; i < n; ++i) t->set(in, i, input(o, r, (long long)i));
  memcpy(keep, in, n * t->size);
  expected(t, o, P, n, 0, want);
  if (inplace) {
    memcpy(out, in, n * t->size);
    check_call(COLL(MPI_Allreduce, MPI_IN_PLACE, out, (int)n, t->type, mpi_op(o), comm),
               "MPI_Allreduce");
  } else {
    memset(out, 0x5a, n * t->size);
    check_call(COLL(MPI_Allreduce, in, out, (int)n, t->type, mpi_op(o), comm), "MPI_Allreduce");
    compare(t, in, keep, n, "MPI_Allreduce (input unchanged)", o, 0, comm);
  }
  compare(t, out, want, n, "MPI_Allreduce", o, inplace, comm);
  free(in), free(out), free(want), free(keep);
}

/* Three MPI_Iallreduce in flight with a blocking MPI_Allreduce between them. */
static void check_iallreduce(MPI_Comm comm, const tdesc* t, int o, size_t n) {
  int r, P;
  MPI_Comm_rank(comm, &r);
  MPI_Comm_size(comm, &P);
  const size_t b = n * t->size;
  char *in = xmalloc(b), *out[3], *want = xmalloc(b), *mid = xmalloc(b);
  for (size_t i = 0; i < n; ++i) t->set(in, i, input(o, r, (long long)i));
  expected(t, o, P, n, 0, want);
  MPI_Request q[3];
  for (int k = 0; k < 3; ++k) {
    out[k] = xmalloc(b);
    memcpy(out[k], in, b);
    if (k == 1)
      check_call(
          COLL(MPI_Iallreduce, MPI_IN_PLACE, out[k], (int)n, t->type, mpi_op(o), comm, &q[k]),
          "MPI_Iallreduce");
    else
      check_call(COLL(MPI_Iallreduce, in, out[k], (int)n, t->type, mpi_op(o), comm, &q[k]),
                 "MPI_Iallreduce");
    if (k == 1) {
      check_call(COLL(MPI_Allreduce, in, mid, (int)n, t->type, mpi_op(o), comm), "MPI_Allreduce");
      compare(t, mid, want, n, "MPI_Allreduce between MPI_Iallreduce", o, 0, comm);
    }
  }
  check_call(MPI_Waitall(3, q, MPI_STATUSES_IGNORE), "MPI_Waitall");
  for (int k = 0; k < 3; ++k) {
    compare(t, out[k], want, n, "MPI_Iallreduce", o, k == 1, comm);
    free(out[k]);
  }
  free(in), free(want), free(mid);
}

/* Persistent allreduce: MPI-4's MPI_Allreduce_init, or Open MPI 4's MPIX_Allreduce_init. */
#if HAVE_MPI4_PERSISTENT
#define HAVE_PERSISTENT 1
#define ALLREDUCE_INIT(...) COLL(MPI_Allreduce_init, __VA_ARGS__)
#elif defined(OMPI_HAVE_MPI_EXT_PCOLLREQ) && OMPI_HAVE_MPI_EXT_PCOLLREQ
#define HAVE_PERSISTENT 1
#define ALLREDUCE_INIT(...) MPIX_Allreduce_init(__VA_ARGS__)
#else
#define HAVE_PERSISTENT 0
#endif

#if HAVE_PERSISTENT
/* Two persistent allreduce requests (one in place) started three times with new inputs each
 * round: with MPI_Startall, with MPI_Start and a blocking MPI_Allreduce while they run, and
 * mixed in one MPI_Startall with a persistent point-to-point pair and again a
 * blocking MPI_Allreduce; then freed (inactive: freeing an active persistent collective
 * request is erroneous in MPI). */
static void check_persistent(MPI_Comm comm, const tdesc* t, int o, size_t n) {
  int r, P;
  MPI_Comm_rank(comm, &r);
  MPI_Comm_size(comm, &P);
  const size_t b = n * t->size;
  char *in = xmalloc(b), *out = xmalloc(b), *io = xmalloc(b), *want = xmalloc(b), *mid = xmalloc(b),
       *keep = xmalloc(b);
  MPI_Request q[4];
  check_call(ALLREDUCE_INIT(in, out, (int)n, t->type, mpi_op(o), comm, MPI_INFO_NULL, &q[0]),
             "MPI_Allreduce_init");
  check_call(
      ALLREDUCE_INIT(MPI_IN_PLACE, io, (int)n, t->type, mpi_op(o), comm, MPI_INFO_NULL, &q[1]),
      "MPI_Allreduce_init (in place)");
  int token_out = r, token_in = -1; /* a persistent ring exchange started with them */
  MPI_Send_init(&token_out, 1, MPI_INT, (r + 1) % P, 77, comm, &q[2]);
  MPI_Recv_init(&token_in, 1, MPI_INT, (r + P - 1) % P, 77, comm, &q[3]);
  for (int round = 0; round < 3; ++round) {
    for (size_t i = 0; i < n; ++i) t->set(in, i, input(o, r, (long long)(i + (size_t)round)));
    memcpy(io, in, b);
    memcpy(keep, in, b);
    memset(out, 0x5a, b);
    expected(t, o, P, n, (size_t)round, want);
    if (round == 0) {
      check_call(MPI_Startall(2, q), "MPI_Startall");
    } else if (round == 1) {
      check_call(MPI_Start(&q[1]), "MPI_Start");
      check_call(MPI_Start(&q[0]), "MPI_Start");
    } else {
      check_call(MPI_Startall(4, q), "MPI_Startall (mixed)");
    }
    if (round > 0) {
      check_call(COLL(MPI_Allreduce, keep, mid, (int)n, t->type, mpi_op(o), comm), "MPI_Allreduce");
      compare(t, mid, want, n, "MPI_Allreduce while MPI_Allreduce_init runs", o, 0, comm);
    }
    check_call(MPI_Waitall(round == 2 ? 4 : 2, q, MPI_STATUSES_IGNORE), "MPI_Waitall");
    compare(t, out, want, n, "MPI_Allreduce_init", o, 0, comm);
    compare(t, io, want, n, "MPI_Allreduce_init", o, 1, comm);
    compare(t, in, keep, n, "MPI_Allreduce_init (input unchanged)", o, 0, comm);
    if (round == 2 && token_in != (r + P - 1) % P) {
      fprintf(stderr, "rank %d: persistent receive started with MPI_Startall got %d\n", world_rank,
              token_in);
      ++errors;
    }
  }
  for (int k = 0; k < 4; ++k) {
    MPI_Request_free(&q[k]);
    if (q[k] != MPI_REQUEST_NULL) {
      fprintf(stderr, "rank %d: MPI_Request_free left a handle\n", world_rank);
      ++errors;
    }
  }
  free(in), free(out), free(io), free(want), free(mid), free(keep);
}
#endif

static void check_reduce_scatter(MPI_Comm comm, const tdesc* t, int o, int inplace, size_t n) {
  int r, P;
  MPI_Comm_rank(comm, &r);
  MPI_Comm_size(comm, &P);
  const size_t all = n * (size_t)P;
  char *in = xmalloc(all * t->size), *out = xmalloc(all * t->size), *want = xmalloc(n * t->size);
  for (size_t i = 0; i < all; ++i) t->set(in, i, input(o, r, (long long)i));
  expected(t, o, P, n, (size_t)r * n, want);
  if (inplace) {
    memcpy(out, in, all * t->size);
    check_call(COLL(MPI_Reduce_scatter_block, MPI_IN_PLACE, out, (int)n, t->type, mpi_op(o), comm),
               "MPI_Reduce_scatter_block");
  } else {
    memset(out, 0x5a, n * t->size);
    check_call(COLL(MPI_Reduce_scatter_block, in, out, (int)n, t->type, mpi_op(o), comm),
               "MPI_Reduce_scatter_block");
  }
  compare(t, out, want, n, "MPI_Reduce_scatter_block", o, inplace, comm);
  free(in), free(out), free(want);
}

/* MPI_Reduce_scatter: blocks of n elements each (through tcoll, as MPI_Reduce_scatter_block),
 * or, with `uneven`, rank q's block n + P - 1 - q elements (left to MPI). Decreasing: in place,
 * MPICH 4.0 moves a rank's block to the front of recvbuf with memcpy, which aborts where
 * the block is longer than the blocks before it (overlapping ranges). */
static void check_reduce_scatter_v(MPI_Comm comm, const tdesc* t, int o, int inplace, size_t n,
                                   int uneven) {
  int r, P;
  MPI_Comm_rank(comm, &r);
  MPI_Comm_size(comm, &P);
  int* counts = xmalloc(sizeof(int) * (size_t)P);
  size_t all = 0, mine = 0;
  for (int q = 0; q < P; ++q) {
    counts[q] = (int)n + (uneven ? P - 1 - q : 0);
    if (q < r) mine += (size_t)counts[q];
    all += (size_t)counts[q];
  }
  const size_t own = (size_t)counts[r];
  char *in = xmalloc(all * t->size), *out = xmalloc(all * t->size), *want = xmalloc(own * t->size);
  for (size_t i = 0; i < all; ++i) t->set(in, i, input(o, r, (long long)i));
  expected(t, o, P, own, mine, want);
  if (inplace) {
    memcpy(out, in, all * t->size);
    check_call(MPI_Reduce_scatter(MPI_IN_PLACE, out, counts, t->type, mpi_op(o), comm),
               "MPI_Reduce_scatter");
  } else {
    memset(out, 0x5a, own * t->size);
    check_call(MPI_Reduce_scatter(in, out, counts, t->type, mpi_op(o), comm), "MPI_Reduce_scatter");
  }
  compare(t, out, want, own, uneven ? "MPI_Reduce_scatter (uneven)" : "MPI_Reduce_scatter", o,
          inplace, comm);
  free(in), free(out), free(want), free(counts);
}

/* MPI_Allgatherv: blocks of n elements in rank order (through tcoll, as MPI_Allgather); with
 * `form` 1, rank q's block n + q elements; with `form` 2, blocks of n elements that the odd
 * ranks receive in reverse rank order with gaps of 3 elements (their form is tcoll's
 * allgatherv, the even ranks' MPI_Allgather's: both must choose and run alike), the gaps
 * left as they were. */
static void check_allgatherv(MPI_Comm comm, const tdesc* t, int inplace, size_t n, int form) {
  int r, P;
  MPI_Comm_rank(comm, &r);
  MPI_Comm_size(comm, &P);
  int *counts = xmalloc(sizeof(int) * (size_t)P), *displs = xmalloc(sizeof(int) * (size_t)P);
  const int uneven = form == 1, scattered = form == 2 && r % 2 == 1;
  size_t all = 0;
  for (int q = 0; q < P; ++q) {
    counts[q] = (int)n + (uneven ? q : 0);
    displs[q] = scattered ? (P - 1 - q) * ((int)n + 3) + 3 : (int)all;
    all += (size_t)counts[q] + (scattered ? 3 : 0);
  }
  all += scattered ? 3 : 0;
  char *in = xmalloc((size_t)counts[r] * t->size), *out = xmalloc(all * t->size),
       *want = xmalloc(all * t->size);
  for (int i = 0; i < counts[r]; ++i) t->set(in, (size_t)i, input(OP_SUM, r, i));
  memset(out, 0x5a, all * t->size);
  for (size_t i = 0; i < all; ++i) t->set(want, i, 99); /* the gaps */
  for (size_t i = 0; scattered && i < all; ++i) t->set(out, i, 99);
  for (int q = 0; q < P; ++q)
    for (int i = 0; i < counts[q]; ++i) {
      t->set(want, (size_t)displs[q] + (size_t)i, input(OP_SUM, q, i));
      memset(out + ((size_t)displs[q] + (size_t)i) * t->size, 0x5a, t->size);
    }
  if (inplace) {
    memcpy(out + (size_t)displs[r] * t->size, in, (size_t)counts[r] * t->size);
    check_call(
        MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, out, counts, displs, t->type, comm),
        "MPI_Allgatherv");
  } else {
    check_call(MPI_Allgatherv(in, counts[r], t->type, out, counts, displs, t->type, comm),
               "MPI_Allgatherv");
  }
  compare(t, out, want, all,
          uneven ? "MPI_Allgatherv (uneven)"
          : form ? "MPI_Allgatherv (one size, odd ranks reversed with gaps)"
                 : "MPI_Allgatherv",
          -1, inplace, comm);
  free(in), free(out), free(want), free(counts), free(displs);
}

static void check_reduce(MPI_Comm comm, const tdesc* t, int o, int inplace, size_t n, int root) {
  int r, P;
  MPI_Comm_rank(comm, &r);
  MPI_Comm_size(comm, &P);
  char *in = xmalloc(n * t->size), *out = xmalloc(n * t->size), *want = xmalloc(n * t->size);
  for (size_t i = 0; i < n; ++i) t->set(in, i, input(o, r, (long long)i));
  expected(t, o, P, n, 0, want);
  memset(out, 0x5a, n * t->size);
  if (inplace && r == root) {
    memcpy(out, in, n * t->size);
    check_call(COLL(MPI_Reduce, MPI_IN_PLACE, out, (int)n, t->type, mpi_op(o), root, comm),
               "MPI_Reduce");
  } else {
    check_call(COLL(MPI_Reduce, in, r == root ? out : NULL, (int)n, t->type, mpi_op(o), root, comm),
               "MPI_Reduce");
  }
  if (r == root) compare(t, out, want, n, "MPI_Reduce", o, inplace, comm);
  free(in), free(out), free(want);
}

static void check_allgather(MPI_Comm comm, const tdesc* t, int inplace, size_t n) {
  int r, P;
  MPI_Comm_rank(comm, &r);
  MPI_Comm_size(comm, &P);
  const size_t all = n * (size_t)P;
  char *in = xmalloc(n * t->size), *out = xmalloc(all * t->size), *want = xmalloc(all * t->size);
  for (size_t i = 0; i < n; ++i) t->set(in, i, input(OP_SUM, r, (long long)i));
  for (int q = 0; q < P; ++q)
    for (size_t i = 0; i < n; ++i) t->set(want, (size_t)q * n + i, input(OP_SUM, q, (long long)i));
  memset(out, 0x5a, all * t->size);
  if (inplace) {
    memcpy(out + (size_t)r * n * t->size, in, n * t->size);
    check_call(COLL(MPI_Allgather, MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, out, (int)n, t->type, comm),
               "MPI_Allgather");
  } else {
    check_call(COLL(MPI_Allgather, in, (int)n, t->type, out, (int)n, t->type, comm),
               "MPI_Allgather");
  }
  compare(t, out, want, all, "MPI_Allgather", -1, inplace, comm);
  free(in), free(out), free(want);
}

/* MPI_Alltoall: rank r's block for q holds input(SUM, r * P + q, i), so every (sender,
 * receiver) pair's block differs. */
static void check_alltoall(MPI_Comm comm, const tdesc* t, int inplace, size_t n) {
  int r, P;
  MPI_Comm_rank(comm, &r);
  MPI_Comm_size(comm, &P);
  const size_t all = n * (size_t)P;
  char *in = xmalloc(all * t->size), *out = xmalloc(all * t->size), *want = xmalloc(all * t->size);
  for (int q = 0; q < P; ++q)
    for (size_t i = 0; i < n; ++i) {
      t->set(in, (size_t)q * n + i, input(OP_SUM, r * P + q, (long long)i));
      t->set(want, (size_t)q * n + i, input(OP_SUM, q * P + r, (long long)i));
    }
  if (inplace) {
    memcpy(out, in, all * t->size);
    check_call(COLL(MPI_Alltoall, MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, out, (int)n, t->type, comm),
               "MPI_Alltoall");
  } else {
    memset(out, 0x5a, all * t->size);
    check_call(COLL(MPI_Alltoall, in, (int)n, t->type, out, (int)n, t->type, comm), "MPI_Alltoall");
  }
  compare(t, out, want, all, "MPI_Alltoall", -1, inplace, comm);
  free(in), free(out), free(want);
}

/* The data of MPI_Gather and MPI_Scatter: element i of rank q's block, fractional on the
 * floating types (exact in each), integers elsewhere; the blocks of different ranks differ. */
static void set_block_value(const tdesc* t, void* buf, size_t at, int q, size_t i) {
  const long long v = input(OP_SUM, q, (long long)i);
  if (t->type == MPI_FLOAT)
    ((float*)buf)[at] = (float)v + 0.375f;
  else if (t->type == MPI_DOUBLE)
    ((double*)buf)[at] = (double)v - 0.625;
  else if (t->type == MPI_LONG_DOUBLE)
    ((long double*)buf)[at] = (long double)v + 0.125L;
  else
    t->set(buf, at, v);
}

/* MPI_Gather to `root`: rank q's block lands as block q of the root's buffer, compared with
 * the blocks computed here. In place: the root's block already sits in its buffer. The other
 * ranks pass receive arguments MPI ignores there (null buffer, count -1, no datatype). */
static void check_gather(MPI_Comm comm, const tdesc* t, int inplace, size_t n, int root) {
  int r, P;
  MPI_Comm_rank(comm, &r);
  MPI_Comm_size(comm, &P);
  const size_t all = n * (size_t)P;
  char *in = xmalloc(n * t->size), *out = xmalloc(all * t->size), *want = xmalloc(all * t->size);
  for (size_t i = 0; i < n; ++i) set_block_value(t, in, i, r, i);
  for (int q = 0; q < P; ++q)
    for (size_t i = 0; i < n; ++i) set_block_value(t, want, (size_t)q * n + i, q, i);
  memset(out, 0x5a, all * t->size);
  if (r != root) {
    check_call(COLL(MPI_Gather, in, (int)n, t->type, NULL, -1, MPI_DATATYPE_NULL, root, comm),
               "MPI_Gather");
  } else if (inplace) {
    memcpy(out + (size_t)r * n * t->size, in, n * t->size);
    check_call(
        COLL(MPI_Gather, MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, out, (int)n, t->type, root, comm),
        "MPI_Gather");
  } else {
    check_call(COLL(MPI_Gather, in, (int)n, t->type, out, (int)n, t->type, root, comm),
               "MPI_Gather");
  }
  if (r == root) compare(t, out, want, all, "MPI_Gather", -1, inplace, comm);
  free(in), free(out), free(want);
}

/* MPI_Scatter from `root`: block q of the root's buffer lands at rank q. In place: the root
 * keeps its block where it is (its buffer is checked unchanged). The other ranks pass send
 * arguments MPI ignores there. */
static void check_scatter(MPI_Comm comm, const tdesc* t, int inplace, size_t n, int root) {
  int r, P;
  MPI_Comm_rank(comm, &r);
  MPI_Comm_size(comm, &P);
  const size_t all = n * (size_t)P;
  char *in = xmalloc(all * t->size), *keep = xmalloc(all * t->size), *out = xmalloc(n * t->size),
       *want = xmalloc(n * t->size);
  for (int q = 0; q < P; ++q)
    for (size_t i = 0; i < n; ++i) set_block_value(t, in, (size_t)q * n + i, q, i);
  memcpy(keep, in, all * t->size);
  for (size_t i = 0; i < n; ++i) set_block_value(t, want, i, r, i);
  memset(out, 0x5a, n * t->size);
  if (r != root) {
    check_call(COLL(MPI_Scatter, NULL, -1, MPI_DATATYPE_NULL, out, (int)n, t->type, root, comm),
               "MPI_Scatter");
    compare(t, out, want, n, "MPI_Scatter", -1, inplace, comm);
  } else if (inplace) {
    check_call(
        COLL(MPI_Scatter, in, (int)n, t->type, MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, root, comm),
        "MPI_Scatter");
    compare(t, in, keep, all, "MPI_Scatter (the root's buffer)", -1, inplace, comm);
  } else {
    check_call(COLL(MPI_Scatter, in, (int)n, t->type, out, (int)n, t->type, root, comm),
               "MPI_Scatter");
    compare(t, out, want, n, "MPI_Scatter", -1, inplace, comm);
    compare(t, in, keep, all, "MPI_Scatter (the root's buffer)", -1, inplace, comm);
  }
  free(in), free(keep), free(out), free(want);
}

/* The uneven collectives (MPI_Alltoallv, MPI_Gatherv, MPI_Scatterv). Block sizes differ by
 * rank and some are zero; the blocks lie in reverse rank order with gaps of GAP elements
 * (before the first too), which must keep the value GAP_VALUE. The references are computed
 * here from the known inputs (set_block_value: fractional on the floating types). Under
 * large_count the _c forms run, with MPI_Count counts and MPI_Aint displacements. */
enum { GAP = 2, GAP_VALUE = 99 };

/* Rank q's block of a gatherv or scatterv with base count n: none for q = 1, 4, 7, ... */
static int v_count(int q, size_t n) {
  return q % 3 == 1 ? 0 : (int)n + q;
}

/* The block rank `from` sends rank `to` in an alltoallv with base count n: nothing at all
 * from rank 1 (its send side is empty, it still receives), none for some other pairs too.
 * `symmetric` (the in-place form, where a pair's two blocks share recvcounts): the same both
 * ways, nothing to or from rank 1. */
static int pair_count(int from, int to, size_t n, int symmetric) {
  if (symmetric) return from == 1 || to == 1 || (from + to) % 4 == 3 ? 0 : (int)n + (from + to) % 3;
  return from == 1 || (from + 2 * to) % 4 == 3 ? 0 : (int)n + (from + to) % 3;
}

/* Blocks of counts[q] elements in reverse rank order, GAP elements before each: displs;
 * returns the buffer's length (elements, GAP after the last too). */
static size_t reverse_layout(const int* counts, int P, int* displs) {
  size_t at = GAP;
  for (int q = P - 1; q >= 0; --q) {
    displs[q] = (int)at;
    at += (size_t)counts[q] + GAP;
  }
  return at;
}

static void fill_gaps(const tdesc* t, void* buf, size_t len) {
  for (size_t i = 0; i < len; ++i) t->set(buf, i, GAP_VALUE);
}

#if MPI_VERSION >= 4
/* The large-count copies of counts and displacements (NULL stays NULL). */
static MPI_Count* to_counts(const int* c, int P) {
  if (!c) return NULL;
  MPI_Count* out = xmalloc(sizeof(MPI_Count) * (size_t)P);
  for (int q = 0; q < P; ++q) out[q] = c[q];
  return out;
}
static MPI_Aint* to_displs(const int* d, int P) {
  if (!d) return NULL;
  MPI_Aint* out = xmalloc(sizeof(MPI_Aint) * (size_t)P);
  for (int q = 0; q < P; ++q) out[q] = d[q];
  return out;
}
#endif

static int call_alltoallv(const void* sb, const int* sc, const int* sd, MPI_Datatype st, void* rb,
                          const int* rc, const int* rd, MPI_Datatype rt, MPI_Comm comm) {
#if MPI_VERSION >= 4
  if (large_count) {
    int P;
    MPI_Comm_size(comm, &P);
    MPI_Count *sc_c = to_counts(sc, P), *rc_c = to_counts(rc, P);
    MPI_Aint *sd_c = to_displs(sd, P), *rd_c = to_displs(rd, P);
    const int rc_ = MPI_Alltoallv_c(sb, sc_c, sd_c, st, rb, rc_c, rd_c, rt, comm);
    free(sc_c), free(rc_c), free(sd_c), free(rd_c);
    return rc_;
  }
#endif
  return MPI_Alltoallv(sb, sc, sd, st, rb, rc, rd, rt, comm);
}

static int call_gatherv(const void* sb, int sc, MPI_Datatype st, void* rb, const int* rc,
                        const int* rd, MPI_Datatype rt, int root, MPI_Comm comm) {
#if MPI_VERSION >= 4
  if (large_count) {
    int P;
    MPI_Comm_size(comm, &P);
    MPI_Count* rc_c = to_counts(rc, P);
    MPI_Aint* rd_c = to_displs(rd, P);
    const int rc_ = MPI_Gatherv_c(sb, sc, st, rb, rc_c, rd_c, rt, root, comm);
    free(rc_c), free(rd_c);
    return rc_;
  }
#endif
  return MPI_Gatherv(sb, sc, st, rb, rc, rd, rt, root, comm);
}

static int call_scatterv(const void* sb, const int* sc, const int* sd, MPI_Datatype st, void* rb,
                         int rc, MPI_Datatype rt, int root, MPI_Comm comm) {
#if MPI_VERSION >= 4
  if (large_count) {
    int P;
    MPI_Comm_size(comm, &P);
    MPI_Count* sc_c = to_counts(sc, P);
    MPI_Aint* sd_c = to_displs(sd, P);
    const int rc_ = MPI_Scatterv_c(sb, sc_c, sd_c, st, rb, rc, rt, root, comm);
    free(sc_c), free(sd_c);
    return rc_;
  }
#endif
  return MPI_Scatterv(sb, sc, sd, st, rb, rc, rt, root, comm);
}

/* MPI_Alltoallv: rank r's block for q holds set_block_value(r * P + q, i); sent from and
 * received into blocks in reverse rank order with gaps.
 * In place: the blocks to send sit in recvbuf (symmetric counts); sendcounts, sdispls and
 * sendtype are passed as NULL and MPI_DATATYPE_NULL (MPI ignores them). */
static void check_alltoallv(MPI_Comm comm, const tdesc* t, int inplace, size_t n) {
  int r, P;
  MPI_Comm_rank(comm, &r);
  MPI_Comm_size(comm, &P);
  int *sc = xmalloc(sizeof(int) * (size_t)P), *sd = xmalloc(sizeof(int) * (size_t)P),
      *rc = xmalloc(sizeof(int) * (size_t)P), *rd = xmalloc(sizeof(int) * (size_t)P);
  for (int q = 0; q < P; ++q) {
    sc[q] = pair_count(r, q, n, inplace);
    rc[q] = pair_count(q, r, n, inplace);
  }
  const size_t slen = reverse_layout(sc, P, sd), rlen = reverse_layout(rc, P, rd);
  char *in = xmalloc(slen * t->size), *out = xmalloc(rlen * t->size),
       *want = xmalloc(rlen * t->size), *keep = xmalloc(slen * t->size);
  fill_gaps(t, in, slen);
  fill_gaps(t, want, rlen);
  fill_gaps(t, out, rlen);
  for (int q = 0; q < P; ++q) {
    for (int i = 0; i < sc[q]; ++i)
      set_block_value(t, in, (size_t)(sd[q] + i), r * P + q, (size_t)i);
    for (int i = 0; i < rc[q]; ++i)
      set_block_value(t, want, (size_t)(rd[q] + i), q * P + r, (size_t)i);
  }
  memcpy(keep, in, slen * t->size);
  if (inplace) { /* symmetric: the send layout is the receive layout */
    memcpy(out, in, rlen * t->size);
    check_call(
        call_alltoallv(MPI_IN_PLACE, NULL, NULL, MPI_DATATYPE_NULL, out, rc, rd, t->type, comm),
        "MPI_Alltoallv");
  } else {
    check_call(call_alltoallv(in, sc, sd, t->type, out, rc, rd, t->type, comm), "MPI_Alltoallv");
    compare(t, in, keep, slen, "MPI_Alltoallv (input unchanged)", -1, 0, comm);
  }
  compare(t, out, want, rlen, "MPI_Alltoallv", -1, inplace, comm);
  free(in), free(out), free(want), free(keep), free(sc), free(sd), free(rc), free(rd);
}

/* MPI_Gatherv to `root`: rank q's v_count(q, n) elements land at displs[q] of the root's
 * buffer (reverse rank order, gaps). In place: the root's block already sits there. The
 * other ranks pass receive arguments MPI ignores there (NULL, NULL, NULL, no datatype). */
static void check_gatherv(MPI_Comm comm, const tdesc* t, int inplace, size_t n, int root) {
  int r, P;
  MPI_Comm_rank(comm, &r);
  MPI_Comm_size(comm, &P);
  int *counts = xmalloc(sizeof(int) * (size_t)P), *displs = xmalloc(sizeof(int) * (size_t)P);
  for (int q = 0; q < P; ++q) counts[q] = v_count(q, n);
  const size_t len = reverse_layout(counts, P, displs);
  char *in = xmalloc((size_t)counts[r] * t->size), *out = xmalloc(len * t->size),
       *want = xmalloc(len * t->size);
  for (int i = 0; i < counts[r]; ++i) set_block_value(t, in, (size_t)i, r, (size_t)i);
  fill_gaps(t, want, len);
  fill_gaps(t, out, len);
  for (int q = 0; q < P; ++q)
    for (int i = 0; i < counts[q]; ++i)
      set_block_value(t, want, (size_t)(displs[q] + i), q, (size_t)i);
  if (r != root) {
    check_call(
        call_gatherv(in, counts[r], t->type, NULL, NULL, NULL, MPI_DATATYPE_NULL, root, comm),
        "MPI_Gatherv");
  } else if (inplace) {
    memcpy(out + (size_t)displs[r] * t->size, in, (size_t)counts[r] * t->size);
    check_call(
        call_gatherv(MPI_IN_PLACE, -1, MPI_DATATYPE_NULL, out, counts, displs, t->type, root, comm),
        "MPI_Gatherv");
  } else {
    check_call(call_gatherv(in, counts[r], t->type, out, counts, displs, t->type, root, comm),
               "MPI_Gatherv");
  }
  if (r == root) compare(t, out, want, len, "MPI_Gatherv", -1, inplace, comm);
  free(in), free(out), free(want), free(counts), free(displs);
}

/* MPI_Scatterv from `root`: the block at displs[q] of the root's buffer (v_count(q, n)
 * elements, reverse rank order, gaps) lands at rank q. In place: the root's buffer stays as
 * it was. The other ranks pass send arguments MPI ignores there. */
static void check_scatterv(MPI_Comm comm, const tdesc* t, int inplace, size_t n, int root) {
  int r, P;
  MPI_Comm_rank(comm, &r);
  MPI_Comm_size(comm, &P);
  int *counts = xmalloc(sizeof(int) * (size_t)P), *displs = xmalloc(sizeof(int) * (size_t)P);
  for (int q = 0; q < P; ++q) counts[q] = v_count(q, n);
  const size_t len = reverse_layout(counts, P, displs);
  const size_t own = (size_t)counts[r];
  char *in = xmalloc(len * t->size), *keep = xmalloc(len * t->size),
       *out = xmalloc((own + 1) * t->size), *want = xmalloc((own + 1) * t->size);
  fill_gaps(t, in, len);
  for (int q = 0; q < P; ++q)
    for (int i = 0; i < counts[q]; ++i)
      set_block_value(t, in, (size_t)(displs[q] + i), q, (size_t)i);
  memcpy(keep, in, len * t->size);
  fill_gaps(t, out, own + 1); /* one element past the block: not written */
  fill_gaps(t, want, own + 1);
  for (size_t i = 0; i < own; ++i) set_block_value(t, want, i, r, i);
  if (r != root) {
    check_call(
        call_scatterv(NULL, NULL, NULL, MPI_DATATYPE_NULL, out, (int)own, t->type, root, comm),
        "MPI_Scatterv");
    compare(t, out, want, own + 1, "MPI_Scatterv", -1, inplace, comm);
  } else if (inplace) {
    check_call(
        call_scatterv(in, counts, displs, t->type, MPI_IN_PLACE, -1, MPI_DATATYPE_NULL, root, comm),
        "MPI_Scatterv");
    compare(t, in, keep, len, "MPI_Scatterv (the root's buffer)", -1, inplace, comm);
  } else {
    check_call(call_scatterv(in, counts, displs, t->type, out, (int)own, t->type, root, comm),
               "MPI_Scatterv");
    compare(t, out, want, own + 1, "MPI_Scatterv", -1, inplace, comm);
    compare(t, in, keep, len, "MPI_Scatterv (the root's buffer)", -1, inplace, comm);
  }
  free(in), free(keep), free(out), free(want), free(counts), free(displs);
}

/* The uneven collectives with datatypes that differ between ranks and matching signatures:
 * even ranks send pairs (a contiguous type of 2 MPI_INT) and receive into `spaced` (2 MPI_INT
 * with a gap of one between, extent 4 MPI_INT: derived and not contiguous), odd ranks
 * MPI_INT on both sides. Block sizes in MPI_INT are even, zero for some ranks. */
static void check_v_signatures(MPI_Comm comm) {
  int r, P;
  MPI_Comm_rank(comm, &r);
  MPI_Comm_size(comm, &P);
  const tdesc* t = &types[4]; /* MPI_INT */
  MPI_Datatype pair, spaced_vector, spaced;
  MPI_Type_contiguous(2, MPI_INT, &pair);
  MPI_Type_vector(2, 1, 2, MPI_INT, &spaced_vector);
  MPI_Type_create_resized(spaced_vector, 0, (MPI_Aint)(4 * sizeof(int)), &spaced);
  MPI_Type_commit(&pair);
  MPI_Type_commit(&spaced);
  const int even = r % 2 == 0;
  /* ints of each block: 2 (q % 3), so none for q = 0, 3, ... */
  int *ints = xmalloc(sizeof(int) * (size_t)P), *counts = xmalloc(sizeof(int) * (size_t)P),
      *displs = xmalloc(sizeof(int) * (size_t)P);
  size_t all = 0;
  for (int q = 0; q < P; ++q) ints[q] = 2 * (q % 3), all += (size_t)ints[q];
  /* the root's buffer: in MPI_INT, block q (reverse order) at 2 * displs; as `spaced`, each
   * unit of 2 ints spans 4, so an even root's buffer is twice as long */
  const size_t len = 4 * all + 8 * (size_t)P + 8;
  int *buf = xmalloc(sizeof(int) * len), *want = xmalloc(sizeof(int) * len),
      *mine = xmalloc(sizeof(int) * 8), *got = xmalloc(sizeof(int) * 8);
  for (int i = 0; i < 2 * ints[r] && i < 8; ++i) mine[i] = 1000 * r + i;
  for (int k = 0; k < 2; ++k)
    for (int inplace = 0; inplace < 2; ++inplace) {
      const int root = k == 0 ? 0 : P - 1, at_root = r == root, in_place = inplace && at_root;
      /* the root's layout in its own units: MPI_INT (odd) or spaced (even: 2 ints a unit) */
      const int unit = even ? 2 : 1, stride = even ? 4 : 1; /* ints per unit, and per extent */
      size_t at = 1;
      for (int q = P - 1; q >= 0; --q) {
        counts[q] = ints[q] / unit;
        displs[q] = (int)at;
        at += (size_t)counts[q] + 1;
      }
      for (size_t i = 0; i < len; ++i) buf[i] = want[i] = -5;
      for (int q = 0; q < P; ++q)
        for (int i = 0; i < ints[q]; ++i) {
          const size_t pos = (size_t)displs[q] * (size_t)stride +
                             (even ? (size_t)(i / 2) * 4 + (size_t)(i % 2) * 2 : (size_t)i);
          want[pos] = 1000 * q + i;
          if (in_place && q == r) buf[pos] = want[pos];
        }
      /* gatherv: the others send ints[r] MPI_INT (odd) or ints[r] / 2 pairs (even) */
      check_call(call_gatherv(in_place ? MPI_IN_PLACE : (const void*)mine, ints[r] / unit,
                              even ? pair : MPI_INT, at_root ? buf : NULL, at_root ? counts : NULL,
                              at_root ? displs : NULL,
                              at_root ? (even ? spaced : MPI_INT) : MPI_DATATYPE_NULL, root, comm),
                 "MPI_Gatherv(spaced at an even root, pairs and MPI_INT mixed)");
      if (at_root)
        compare(t, buf, want, len, "MPI_Gatherv(spaced at an even root, pairs and MPI_INT mixed)",
                -1, inplace, comm);
      /* scatterv back from the same layout */
      for (size_t i = 0; i < len; ++i) buf[i] = at_root ? want[i] : -9;
      for (int i = 0; i < 8; ++i) got[i] = -7;
      check_call(call_scatterv(at_root ? buf : NULL, at_root ? counts : NULL,
                               at_root ? displs : NULL,
                               at_root ? (even ? spaced : MPI_INT) : MPI_DATATYPE_NULL,
                               in_place ? MPI_IN_PLACE : (void*)got, ints[r] / unit,
                               even ? pair : MPI_INT, root, comm),
                 "MPI_Scatterv(spaced at an even root, pairs and MPI_INT mixed)");
      if (in_place)
        compare(t, buf, want, len, "MPI_Scatterv(spaced at the root, in place: unchanged)", -1,
                inplace, comm);
      else
        compare(t, got, mine, (size_t)ints[r],
                "MPI_Scatterv(spaced at an even root, pairs and MPI_INT mixed)", -1, inplace, comm);
    }
  /* alltoallv: rank r sends 2 ((r + q) % 3) ints to q, as pairs (even) or MPI_INT (odd),
   * element i of it 1000 r + 10 q + i; receives into `spaced` (even) or MPI_INT (odd), the
   * blocks in reverse rank order with a gap of one unit. In place and not. */
  int *sc = xmalloc(sizeof(int) * (size_t)P), *sd = xmalloc(sizeof(int) * (size_t)P),
      *rc = xmalloc(sizeof(int) * (size_t)P), *rd = xmalloc(sizeof(int) * (size_t)P);
  const size_t alen = 8 * 4 * (size_t)P + 8;
  int *sendbuf = xmalloc(sizeof(int) * alen), *recvbuf = xmalloc(sizeof(int) * alen),
      *expect = xmalloc(sizeof(int) * alen);
  const int unit = even ? 2 : 1, stride = even ? 4 : 1;
  for (int inplace = 0; inplace < 2; ++inplace) {
    size_t sat = 0, rat = 1;
    for (int q = P - 1; q >= 0; --q) {
      const int s_ints = 2 * ((r + q) % 3), r_ints = 2 * ((q + r) % 3);
      sc[q] = s_ints / unit, sd[q] = (int)sat, sat += (size_t)sc[q];
      rc[q] = r_ints / unit, rd[q] = (int)rat, rat += (size_t)rc[q] + 1;
    }
    for (size_t i = 0; i < alen; ++i) sendbuf[i] = recvbuf[i] = expect[i] = -3;
    for (int q = 0; q < P; ++q) {
      for (int i = 0; i < sc[q] * unit; ++i)
        sendbuf[(size_t)sd[q] * (size_t)unit + (size_t)i] = 1000 * r + 10 * q + i;
      for (int i = 0; i < rc[q] * unit; ++i) {
        const size_t pos = (size_t)rd[q] * (size_t)stride +
                           (even ? (size_t)(i / 2) * 4 + (size_t)(i % 2) * 2 : (size_t)i);
        expect[pos] = 1000 * q + 10 * r + i;
        if (inplace) recvbuf[pos] = 1000 * r + 10 * q + i; /* symmetric: sent from here */
      }
    }
    check_call(call_alltoallv(inplace ? MPI_IN_PLACE : (const void*)sendbuf, sc, sd,
                              even ? pair : MPI_INT, recvbuf, rc, rd, even ? spaced : MPI_INT,
                              comm),
               "MPI_Alltoallv(pairs and spaced on even ranks, MPI_INT on odd)");
    compare(t, recvbuf, expect, alen,
            "MPI_Alltoallv(pairs and spaced on even ranks, MPI_INT on odd)", -1, inplace, comm);
  }
  free(sc), free(sd), free(rc), free(rd), free(sendbuf), free(recvbuf), free(expect);
  free(ints), free(counts), free(displs), free(buf), free(want), free(mine), free(got);
  MPI_Type_free(&spaced);
  MPI_Type_free(&spaced_vector);
  MPI_Type_free(&pair);
}

static void check_bcast(MPI_Comm comm, const tdesc* t, size_t n, int root) {
  int r;
  MPI_Comm_rank(comm, &r);
  char *buf = xmalloc(n * t->size), *want = xmalloc(n * t->size);
  for (size_t i = 0; i < n; ++i) t->set(want, i, input(OP_SUM, root, (long long)i));
  if (r == root)
    memcpy(buf, want, n * t->size);
  else
    memset(buf, 0x5a, n * t->size);
  check_call(COLL(MPI_Bcast, buf, (int)n, t->type, root, comm), "MPI_Bcast");
  compare(t, buf, want, n, "MPI_Bcast", -1, 1, comm);
  free(buf), free(want);
}

/* Every collective for type t on comm: all allowed ops (or `ops` if non-zero, a bit mask),
 * in place or not, the given counts. */
static void check_type(MPI_Comm comm, const tdesc* t, const size_t* counts, int ncounts, int ops,
                       int nonblocking) {
  int r, P;
  MPI_Comm_rank(comm, &r);
  MPI_Comm_size(comm, &P);
  minmax_nonneg = t->nonneg;
  for (int c = 0; c < ncounts; ++c) {
    const size_t n = counts[c];
    for (int o = 0; o < OP_N; ++o) {
      if (!op_allowed(t, o) || (ops && !(ops & (1 << o)))) continue;
      /* reduce_scatter_block and reduce share allreduce's type and op dispatch: one op of
       * each family (arithmetic, order, bitwise, logical) is enough for them */
      const int family = o == OP_SUM || o == OP_MIN || o == OP_BAND || o == OP_LOR ||
                         (t->kind == 2 && o == OP_BXOR);
      for (int inplace = 0; inplace < 2; ++inplace) {
        check_allreduce(comm, t, o, inplace, n);
        if (!family) continue;
        check_reduce_scatter(comm, t, o, inplace, n);
        check_reduce_scatter_v(comm, t, o, inplace, n, o == OP_SUM);
        check_reduce(comm, t, o, inplace, n, (int)((n + (size_t)o) % (size_t)P));
      }
      if (nonblocking) check_iallreduce(comm, t, o, n);
#if HAVE_PERSISTENT
      if (nonblocking) check_persistent(comm, t, o, n);
#endif
    }
    for (int inplace = 0; inplace < 2; ++inplace) {
      check_allgather(comm, t, inplace, n);
      for (int form = 0; form < 3; ++form) check_allgatherv(comm, t, inplace, n, form);
      check_alltoall(comm, t, inplace, n);
      check_gather(comm, t, inplace, n, (int)((n + (size_t)inplace) % (size_t)P));
      check_scatter(comm, t, inplace, n, (int)((n + 1 + (size_t)inplace) % (size_t)P));
      check_alltoallv(comm, t, inplace, n);
      check_gatherv(comm, t, inplace, n, (int)((n + 2 + (size_t)inplace) % (size_t)P));
      check_scatterv(comm, t, inplace, n, (int)((n + 3 + (size_t)inplace) % (size_t)P));
    }
    check_bcast(comm, t, n, (int)(n % (size_t)P));
    check_bcast(comm, t, n, P - 1);
  }
}

/* The calls libtcoll_mpi.so leaves to MPI, with their results checked. */
static void user_sum(void* in, void* inout, int* len, MPI_Datatype* type) {
  (void)type;
  for (int i = 0; i < *len; ++i) ((int*)inout)[i] += ((int*)in)[i];
}

static void check_fallbacks(MPI_Comm comm) {
  int r, P;
  MPI_Comm_rank(comm, &r);
  MPI_Comm_size(comm, &P);
  enum { N = 5 };
  int in[2 * N], out[2 * N], want[2 * N];
  /* a user-defined op */
  MPI_Op op;
  MPI_Op_create(user_sum, 1, &op);
  for (int i = 0; i < N; ++i) in[i] = r + i, want[i] = P * (P - 1) / 2 + P * i;
  check_call(MPI_Allreduce(in, out, N, MPI_INT, op, comm), "MPI_Allreduce(user op)");
  compare(&types[4], out, want, N, "MPI_Allreduce(user op)", OP_SUM, 0, comm);
  MPI_Op_free(&op);
  /* a derived datatype: pairs of ints, gathered */
  MPI_Datatype pair;
  MPI_Type_contiguous(2, MPI_INT, &pair);
  MPI_Type_commit(&pair);
  int *all = xmalloc(sizeof(int) * 2 * (size_t)P), *all_want = xmalloc(sizeof(int) * 2 * (size_t)P);
  for (int q = 0; q < 2 * P; ++q) all_want[q] = 100 * (q / 2) + q % 2;
  in[0] = 100 * r, in[1] = 100 * r + 1;
  check_call(MPI_Allgather(in, 1, pair, all, 1, pair, comm), "MPI_Allgather(derived type)");
  compare(&types[4], all, all_want, 2 * (size_t)P, "MPI_Allgather(derived type)", -1, 0, comm);
  free(all), free(all_want);
  /* a strided broadcast */
  MPI_Datatype strided;
  MPI_Type_vector(N, 1, 2, MPI_INT, &strided);
  MPI_Type_commit(&strided);
  for (int i = 0; i < 2 * N; ++i) {
    out[i] = r == 0 ? 1000 + i : -7 - i;
    want[i] = (i % 2 == 0 || r == 0) ? 1000 + i : -7 - i; /* odd elements are not sent */
  }
  check_call(MPI_Bcast(out, 1, strided, 0, comm), "MPI_Bcast(vector type)");
  compare(&types[4], out, want, 2 * N, "MPI_Bcast(vector type)", -1, 1, comm);
  MPI_Type_free(&strided);
  MPI_Type_free(&pair);
  /* MPI_C_FLOAT_COMPLEX: a predefined datatype tcoll does not reduce */
  {
    float cin[2 * N], cout[2 * N], cwant[2 * N];
    for (int i = 0; i < N; ++i) {
      cin[2 * i] = (float)(r + i);
      cin[2 * i + 1] = (float)(2 * r - i);
      cwant[2 * i] = (float)(P * (P - 1) / 2 + P * i);
      cwant[2 * i + 1] = (float)(P * (P - 1) - P * i);
    }
    check_call(MPI_Allreduce(cin, cout, N, MPI_C_FLOAT_COMPLEX, MPI_SUM, comm),
               "MPI_Allreduce(MPI_C_FLOAT_COMPLEX)");
    compare(&types[21], cout, cwant, 2 * N, "MPI_Allreduce(MPI_C_FLOAT_COMPLEX)", OP_SUM, 0, comm);
  }
  /* MPI_MAXLOC on MPI_2INT: a predefined op tcoll does not run */
  int loc_in[2] = {r % 3, r}, loc_out[2] = {-1, -1};
  check_call(MPI_Allreduce(loc_in, loc_out, 1, MPI_2INT, MPI_MAXLOC, comm),
             "MPI_Allreduce(MAXLOC)");
  {
    int best = -1, at = -1;
    for (int q = 0; q < P; ++q)
      if (q % 3 > best) best = q % 3, at = q;
    int w[2] = {best, at};
    compare(&types[4], loc_out, w, 2, "MPI_Allreduce(MAXLOC)", OP_MAX, 0, comm);
  }
  /* an intercommunicator between the lower and the upper half: each side receives the sum
   * over the other side */
  if (P >= 2) {
    const int low = r < P / 2;
    MPI_Comm half, inter;
    MPI_Comm_split(comm, low, r, &half);
    MPI_Intercomm_create(half, 0, comm, low ? P / 2 : 0, 77, &inter);
    int mine = r + 1, got = -1, other = 0;
    for (int q = 0; q < P; ++q)
      if ((q < P / 2) != low) other += q + 1;
    check_call(MPI_Allreduce(&mine, &got, 1, MPI_INT, MPI_SUM, inter),
               "MPI_Allreduce(intercommunicator)");
    compare(&types[4], &got, &other, 1, "MPI_Allreduce(intercommunicator)", OP_SUM, 0, comm);
    MPI_Comm_free(&inter);
    MPI_Comm_free(&half);
  }
}

/* MPI requires matching type signatures, not identical datatypes, and the preload decides its
 * path from what every rank shares: the root broadcasts one contiguous derived type of N ints
 * while the others receive N MPI_INT, then N MPI_INT into a strided vector type on the others;
 * an allgather where even ranks send a derived pair and receive ints and odd ranks the reverse,
 * also in place. Before the preload chose from each rank's own datatype, these hung: the
 * derived-type ranks handed the call to MPI while the others waited in tcoll. */
static void check_signatures(MPI_Comm comm) {
  int r, P;
  MPI_Comm_rank(comm, &r);
  MPI_Comm_size(comm, &P);
  enum { N = 6 };
  MPI_Datatype run, strided, pair;
  MPI_Type_contiguous(N, MPI_INT, &run);
  MPI_Type_vector(N, 1, 2, MPI_INT, &strided);
  MPI_Type_contiguous(2, MPI_INT, &pair);
  MPI_Type_commit(&run);
  MPI_Type_commit(&strided);
  MPI_Type_commit(&pair);
  int buf[2 * N], want[2 * N];
  for (int root = 0; root < P && root < 2; ++root) {
    for (int i = 0; i < N; ++i) buf[i] = r == root ? 500 + i : -1, want[i] = 500 + i;
    check_call(MPI_Bcast(buf, r == root ? 1 : N, r == root ? run : MPI_INT, root, comm),
               "MPI_Bcast(derived root, MPI_INT others)");
    compare(&types[4], buf, want, N, "MPI_Bcast(derived root, MPI_INT others)", -1, 0, comm);
    for (int i = 0; i < 2 * N; ++i) {
      buf[i] = r == root ? 700 + i : -3;
      want[i] = r == root ? 700 + i : (i % 2 == 0 ? 700 + i / 2 : -3);
    }
    check_call(MPI_Bcast(buf, r == root ? N : 1, r == root ? MPI_INT : strided, root, comm),
               "MPI_Bcast(MPI_INT root, vector others)");
    compare(&types[4], buf, want, 2 * N, "MPI_Bcast(MPI_INT root, vector others)", -1, 0, comm);
  }
  int mine[2] = {10 * r, 10 * r + 1};
  int* all = xmalloc(sizeof(int) * 2 * (size_t)P);
  int* all_want = xmalloc(sizeof(int) * 2 * (size_t)P);
  for (int q = 0; q < 2 * P; ++q) all_want[q] = 10 * (q / 2) + q % 2;
  const int even = r % 2 == 0;
  for (int q = 0; q < 2 * P; ++q) all[q] = -5;
  check_call(MPI_Allgather(mine, even ? 1 : 2, even ? pair : MPI_INT, all, even ? 2 : 1,
                           even ? MPI_INT : pair, comm),
             "MPI_Allgather(pair and MPI_INT mixed)");
  compare(&types[4], all, all_want, 2 * (size_t)P, "MPI_Allgather(pair and MPI_INT mixed)", -1, 0,
          comm);
  /* other values than the call before: a packed own block must be packed again, not found
   * where the previous call left it */
  for (int q = 0; q < 2 * P; ++q) all_want[q] += 1000;
  for (int q = 0; q < 2 * P; ++q) all[q] = q / 2 == r ? all_want[q] : -5;
  check_call(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, all, even ? 2 : 1,
                           even ? MPI_INT : pair, comm),
             "MPI_Allgather(in place, pair and MPI_INT mixed)");
  compare(&types[4], all, all_want, 2 * (size_t)P,
          "MPI_Allgather(in place, pair and MPI_INT mixed)", -1, 1, comm);
  free(all), free(all_want);
  /* MPI_Gather into and MPI_Scatter from the columns of the root's 2 x P row-major matrix
   * (a resized vector type there), the others sending or receiving two MPI_INT or one pair;
   * in place at the root and not */
  MPI_Datatype column_vector, column;
  MPI_Type_vector(2, 1, P, MPI_INT, &column_vector);
  MPI_Type_create_resized(column_vector, 0, (MPI_Aint)sizeof(int), &column);
  MPI_Type_commit(&column);
  int* matrix = xmalloc(sizeof(int) * 2 * (size_t)P);
  int* matrix_want = xmalloc(sizeof(int) * 2 * (size_t)P);
  for (int row = 0; row < 2; ++row)
    for (int q = 0; q < P; ++q) matrix_want[row * P + q] = 10 * q + row;
  for (int inplace = 0; inplace < 2; ++inplace)
    for (int k = 0; k < 2; ++k) {
      const int root = k == 0 ? 0 : P - 1, at_root = r == root;
      const int in_place = inplace && at_root;
      for (int q = 0; q < 2 * P; ++q) matrix[q] = -5;
      if (in_place) matrix[r] = 10 * r, matrix[P + r] = 10 * r + 1;
      check_call(MPI_Gather(in_place ? MPI_IN_PLACE : (const void*)mine, even ? 1 : 2,
                            even ? pair : MPI_INT, matrix, 1, column, root, comm),
                 "MPI_Gather(columns at the root, pair and MPI_INT mixed)");
      if (at_root)
        compare(&types[4], matrix, matrix_want, 2 * (size_t)P,
                "MPI_Gather(columns at the root, pair and MPI_INT mixed)", -1, inplace, comm);
      int got[2] = {-7, -7};
      for (int q = 0; q < 2 * P; ++q) matrix[q] = at_root ? matrix_want[q] : -9;
      check_call(MPI_Scatter(matrix, 1, column, in_place ? MPI_IN_PLACE : (void*)got, even ? 1 : 2,
                             even ? pair : MPI_INT, root, comm),
                 "MPI_Scatter(columns at the root, pair and MPI_INT mixed)");
      if (in_place)
        compare(&types[4], matrix, matrix_want, 2 * (size_t)P,
                "MPI_Scatter(columns at the root, in place: unchanged)", -1, inplace, comm);
      else
        compare(&types[4], got, mine, 2, "MPI_Scatter(columns at the root, pair and MPI_INT mixed)",
                -1, inplace, comm);
    }
  /* MPI_Alltoall: even ranks send one pair per block and receive into the columns of a
   * 2 x P row-major matrix (the resized vector type), odd ranks send and receive two MPI_INT
   * per block; in place and not. Block r of rank q's send buffer is {100 q + 2 r, +1}. */
  int* sends = xmalloc(sizeof(int) * 2 * (size_t)P);
  for (int inplace = 0; inplace < 2; ++inplace) {
    for (int q = 0; q < 2 * P; ++q) sends[q] = 100 * r + q;
    for (int q = 0; q < P; ++q)
      for (int k = 0; k < 2; ++k) {
        const int from = 100 * q + 2 * r + k, own = 100 * r + 2 * q + k;
        const int at = even ? k * P + q : 2 * q + k; /* column q, or block q */
        matrix_want[at] = from;
        matrix[at] = inplace ? own : -11;
      }
    check_call(MPI_Alltoall(inplace ? MPI_IN_PLACE : (const void*)sends, even ? 1 : 2,
                            even ? pair : MPI_INT, matrix, even ? 1 : 2, even ? column : MPI_INT,
                            comm),
               "MPI_Alltoall(columns and pairs on even ranks, MPI_INT on odd)");
    compare(&types[4], matrix, matrix_want, 2 * (size_t)P,
            "MPI_Alltoall(columns and pairs on even ranks, MPI_INT on odd)", -1, inplace, comm);
  }
  free(sends);
  free(matrix), free(matrix_want);
  MPI_Type_free(&column);
  MPI_Type_free(&column_vector);
  MPI_Type_free(&pair);
  MPI_Type_free(&strided);
  MPI_Type_free(&run);
}

/* Modes "stall" and "stall_first": rank 0 starts a 1 MiB MPI_Allreduce that no other rank
 * joins (they sleep, then finalize), after one good call or as the very first call (then the
 * creation of tcoll's transport waits). Under MPI alone that hangs; under the preload the tcoll
 * call must fail after TCOLL_TIMEOUT with an error naming the peer (the test expects that message).
 */
static int stall(int first) {
  enum { N = 1 << 18 };
  float* buf = xmalloc(sizeof(float) * N);
  for (int i = 0; i < N; ++i) buf[i] = 1.0f;
  if (!first) /* one good call first: the stall then hits tcoll's own waits, not its setup */
    MPI_Allreduce(MPI_IN_PLACE, buf, N, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  if (world_rank == 0) {
    MPI_Allreduce(MPI_IN_PLACE, buf, N, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    fprintf(stderr, "rank 0: the stalled MPI_Allreduce returned\n");
  } else {
    for (int i = 0; i < 30; ++i) {
      struct timespec t = {1, 0};
      nanosleep(&t, NULL);
    }
  }
  free(buf);
  MPI_Finalize();
  return 1;
}

/* Mode "stall_nonblocking": rank 0 queues two 1 MiB MPI_Iallreduce calls that no other rank
 * joins. The first times out and breaks the communicator's tcoll transport while the second
 * waits behind it; both requests must still complete, with an error, so MPI_Waitall returns
 * instead of hanging (the second never communicates). Under MPI alone this hangs. */
static int stall_nonblocking(void) {
  enum { N = 1 << 18 };
  float* a = xmalloc(sizeof(float) * N);
  float* b = xmalloc(sizeof(float) * N);
  for (int i = 0; i < N; ++i) a[i] = b[i] = 1.0f;
  MPI_Allreduce(MPI_IN_PLACE, a, N, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); /* setup done */
  int failed = 0;
  if (world_rank == 0) {
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Request req[2];
    MPI_Status st[2];
    check_call(MPI_Iallreduce(MPI_IN_PLACE, a, N, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req[0]),
               "MPI_Iallreduce(first)");
    check_call(MPI_Iallreduce(MPI_IN_PLACE, b, N, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req[1]),
               "MPI_Iallreduce(second)");
    const int rc = MPI_Waitall(2, req, st);
    for (int k = 0; k < 2; ++k) {
      const int code = rc == MPI_ERR_IN_STATUS ? st[k].MPI_ERROR : rc;
      fprintf(stderr, "rank 0: MPI_Iallreduce %d completed, %s\n", k + 1,
              code == MPI_SUCCESS ? "succeeded" : "with an error");
      failed += code != MPI_SUCCESS;
    }
    if (failed == 2)
      fprintf(stderr, "rank 0: both stalled MPI_Iallreduce calls completed with errors\n");
  } else { /* past rank 0's TCOLL_TIMEOUT (2 s in the tests), then finalize */
    for (int i = 0; i < 6; ++i) {
      struct timespec t = {1, 0};
      nanosleep(&t, NULL);
    }
  }
  free(a);
  free(b);
  MPI_Finalize();
  return 1;
}

#if HAVE_PERSISTENT
/* Mode "stall_persistent": every rank makes a persistent 1 MiB allreduce, rank 0 starts it
 * twice and no other rank ever does. The first run times out and breaks the transport; its
 * MPI_Wait must return with an error (not hang), and so must the second start's. Under MPI
 * alone this hangs. */
static int stall_persistent(void) {
  enum { N = 1 << 18 };
  float* a = xmalloc(sizeof(float) * N);
  for (int i = 0; i < N; ++i) a[i] = 1.0f;
  MPI_Allreduce(MPI_IN_PLACE, a, N, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); /* setup done */
  MPI_Request req;
  check_call(
      ALLREDUCE_INIT(MPI_IN_PLACE, a, N, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL, &req),
      "MPI_Allreduce_init");
  int failed = 0;
  if (world_rank == 0) {
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    for (int k = 0; k < 2; ++k) {
      const int started = MPI_Start(&req);
      const int rc = started == MPI_SUCCESS ? MPI_Wait(&req, MPI_STATUS_IGNORE) : started;
      fprintf(stderr, "rank 0: persistent run %d %s\n", k + 1,
              rc == MPI_SUCCESS ? "succeeded" : "completed with an error");
      failed += rc != MPI_SUCCESS;
    }
    if (failed == 2)
      fprintf(stderr, "rank 0: both stalled persistent runs completed with errors\n");
  } else { /* past rank 0's TCOLL_TIMEOUT (2 s in the tests), then finalize */
    for (int i = 0; i < 6; ++i) {
      struct timespec t = {1, 0};
      nanosleep(&t, NULL);
    }
  }
  MPI_Request_free(&req);
  free(a);
  MPI_Finalize();
  return 1;
}
#endif

/* Mode "announce_serialized": MPI_THREAD_SERIALIZED, every MPI call on a thread that is not
 * the main one. Rank 0's 1 MiB MPI_Allreduce times out (rank 1 joins 3 s late, past
 * TCOLL_TIMEOUT of 2 s); its failure announcement must reach rank 1 at once, so rank 1's
 * late MPI_Allreduce fails naming rank 0 instead of timing out itself (rank 0 makes no MPI
 * call until 9 s: an announcement deferred to its next call would come too late). */
static void* announce_serialized_worker(void* result) {
  enum { N = 1 << 18 };
  float* a = xmalloc(sizeof(float) * N);
  for (int i = 0; i < N; ++i) a[i] = 1.0f;
  MPI_Allreduce(MPI_IN_PLACE, a, N, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); /* setup done */
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  struct timespec late = {world_rank == 1 ? 3 : 0, 0}, idle = {9, 0};
  nanosleep(&late, NULL);
  const double start = MPI_Wtime();
  const int rc = MPI_Allreduce(MPI_IN_PLACE, a, N, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  fprintf(stderr, "rank %d: the allreduce %s after %.1f s\n", world_rank,
          rc == MPI_SUCCESS ? "succeeded" : "failed", MPI_Wtime() - start);
  if (world_rank == 0) nanosleep(&idle, NULL);
  *(int*)result = rc != MPI_SUCCESS;
  free(a);
  return NULL;
}

static int announce_serialized(void) {
  pthread_t worker;
  int failed = 0;
  if (pthread_create(&worker, NULL, announce_serialized_worker, &failed) != 0) {
    fprintf(stderr, "rank %d: pthread_create failed\n", world_rank);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  pthread_join(worker, NULL);
  MPI_Finalize();
  return failed ? 1 : 0;
}

/* Mode "local_start": starting a non-blocking collective is a local operation in MPI. Rank 0
 * starts MPI_Iallreduce on a new communicator, then sends to rank 1, which receives that
 * message before it starts its own MPI_Iallreduce; under MPI alone this completes. Round 0 is
 * the communicator's first collective (tcoll has no state for it yet: the preload must not
 * create it there, since that waits for every rank), round 1 follows a blocking MPI_Allreduce
 * (which creates it; the call runs through tcoll), or with `barrier`, an MPI_Barrier (which
 * creates it too). */
static int local_start(int barrier) {
  enum { N = 4099 };
  int P;
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MPI_Comm_size(comm, &P);
  double* in = xmalloc(sizeof(double) * N);
  double* out = xmalloc(sizeof(double) * N);
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < N; ++i) in[i] = (double)((i * 7 + world_rank * 3 + round) % 101);
    MPI_Request q = MPI_REQUEST_NULL;
    int token = 40 + round;
    if (world_rank == 0) {
      check_call(MPI_Iallreduce(in, out, N, MPI_DOUBLE, MPI_SUM, comm, &q), "MPI_Iallreduce");
      check_call(MPI_Send(&token, 1, MPI_INT, 1, round, MPI_COMM_WORLD), "MPI_Send");
    } else if (world_rank == 1) {
      check_call(MPI_Recv(&token, 1, MPI_INT, 0, round, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
                 "MPI_Recv");
      if (token != 40 + round) {
        fprintf(stderr, "rank 1: token %d, want %d\n", token, 40 + round);
        ++errors;
      }
      check_call(MPI_Iallreduce(in, out, N, MPI_DOUBLE, MPI_SUM, comm, &q), "MPI_Iallreduce");
    } else {
      check_call(MPI_Iallreduce(in, out, N, MPI_DOUBLE, MPI_SUM, comm, &q), "MPI_Iallreduce");
    }
    check_call(MPI_Wait(&q, MPI_STATUS_IGNORE), "MPI_Wait");
    for (int i = 0; i < N; ++i) {
      double want = 0;
      for (int r = 0; r < P; ++r) want += (double)((i * 7 + r * 3 + round) % 101);
      if (out[i] != want) {
        fprintf(stderr, "rank %d round %d: element %d is %g, want %g\n", world_rank, round, i,
                out[i], want);
        ++errors;
        break;
      }
    }
    ++checks;
    if (round == 0 && barrier) {
      check_call(MPI_Barrier(comm), "MPI_Barrier");
    } else if (round == 0) { /* a blocking collective: every rank reaches it in the same order */
      int one = 1, sum = 0;
      check_call(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, comm), "MPI_Allreduce");
      if (sum != P) ++errors;
    }
  }
  MPI_Comm_free(&comm);
  free(in);
  free(out);
  if (world_rank == 0) fprintf(stderr, "local_start: %s\n", errors ? "FAILED" : "completed");
  MPI_Finalize();
  return errors ? 1 : 0;
}

/* A fractional value of rank r at element i, exact in double: sums of a few are exact in any
 * order, so a reduction's result has one right bit pattern. */
/* CLOCK_MONOTONIC: one clock for every process of the node. */
static double now_seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void sleep_ms(long ms) {
  nanosleep(&(struct timespec){ms / 1000, (ms % 1000) * 1000 * 1000}, NULL);
}

/* Added to every value of nonblocking_others: a persistent request's second run gets new
 * inputs (a multiple of 1/16 keeps every sum exact). */
static double frac_shift = 0.0;

static double frac(int r, int i) {
  return 0.5 + r + (double)i / 1024.0 + frac_shift;
}

/* Mode "persistent_others" makes every start of nonblocking_others a persistent request's
 * init (MPI-4's MPI_<name>_init, Open MPI 4's MPIX_<name>_init), run twice with MPI_Startall.
 * START(MPI_Ibcast, Bcast, (arguments), request) starts either, through the large-count form
 * where `large_count` asks for it; START_AS names both functions. */
static int persistent_mode = 0;

/* A derived type of nonblocking_others, freed by the user right after a non-blocking start
 * (the preload keeps its own duplicate), or, for a persistent request, once the request is
 * freed: MPI's own persistent collectives read it at every start (Open MPI 4.1's report
 * MPI_ERR_TRUNCATE when it was freed after the init), and MPI does not promise that a type
 * may go before the persistent requests that use it. With PRELOAD_CHECK_FREE_EARLY=1 a
 * persistent request's types are freed right after the init too, from round 1 on, where
 * rules send every call to tcoll (which duplicates them): that checks the duplicates. */
static MPI_Datatype deferred_types[8];
static int deferred_count = 0;
static int free_early = 0;
static void release_type(MPI_Datatype* type) {
  if (!persistent_mode || free_early) {
    MPI_Type_free(type);
    return;
  }
  deferred_types[deferred_count++] = *type;
  *type = MPI_DATATYPE_NULL;
}
#define UNPAREN(...) __VA_ARGS__
#if MPI_VERSION >= 4
#define INIT_CALL(Name, ...)                                                                       \
  (large_count ? MPI_##Name##_init_c(__VA_ARGS__) : MPI_##Name##_init(__VA_ARGS__))
#define INIT_NAME(Name) MPI_##Name##_init
#elif HAVE_MPI4_PERSISTENT
#define INIT_CALL(Name, ...) MPI_##Name##_init(__VA_ARGS__)
#define INIT_NAME(Name) MPI_##Name##_init
#elif HAVE_PERSISTENT
#define INIT_CALL(Name, ...) MPIX_##Name##_init(__VA_ARGS__)
#define INIT_NAME(Name) MPIX_##Name##_init
#endif
#if HAVE_PERSISTENT
#define START(Iname, Name, args, request)                                                          \
  (persistent_mode ? INIT_CALL(Name, UNPAREN args, MPI_INFO_NULL, request)                         \
                   : COLL(Iname, UNPAREN args, request))
#define START_AS(nonblocking, init, args, request)                                                 \
  (persistent_mode ? init(UNPAREN args, MPI_INFO_NULL, request)                                    \
                   : nonblocking(UNPAREN args, request))
#else
#define START(Iname, Name, args, request) COLL(Iname, UNPAREN args, request)
#define START_AS(nonblocking, init, args, request) nonblocking(UNPAREN args, request)
#endif

/* Compares n doubles at got (every `stride`-th) with want(i); one error per mismatching call. */
static void expect_values(const double* got, int n, int stride, double (*want)(int, int), int a,
                          const char* what) {
  ++checks;
  for (int i = 0; i < n; ++i)
    if (got[(size_t)i * stride] != want(a, i)) {
      fprintf(stderr, "rank %d: %s: element %d is %.17g, want %.17g\n", world_rank, what, i,
              got[(size_t)i * stride], want(a, i));
      ++errors;
      return;
    }
}

/* Mode "nonblocking_others": MPI_Ibarrier (after a late rank's sleep), MPI_Ibcast, MPI_Ireduce,
 * MPI_Iallgather,
 * MPI_Ireduce_scatter_block, MPI_Ialltoall, MPI_Igather and MPI_Iscatter on the world (8 KiB per
 * block), and MPI_Ialltoallv, MPI_Igatherv, MPI_Iscatterv, MPI_Ireduce_scatter and
 * MPI_Iallgatherv (uneven blocks, some empty, with gaps; the last two in place in round 1),
 * and MPI_Iallgatherv with blocks of one size that the even ranks receive in rank order and the
 * odd ranks in reverse order with gaps (the even ranks' call is MPI_Iallgather's form, the odd
 * ranks' the v form: both must choose and run alike), started together
 * with a blocking MPI_Allreduce among the starts, every result checked against values computed
 * here from fractional inputs. Round 0 finds the communicator's tcoll state missing (a start
 * is local: MPI runs it, and the next blocking call creates the state); rounds 1 and 2 run
 * where the environment's rules say, round 2 through the large-count forms where MPI has them. On
 * odd ranks MPI_Ibcast receives into a strided vector type and MPI_Iallgather into one contiguous
 * type per block, both freed right after the start (the preload packs and unpacks around tcoll's
 * collective, with its own duplicate); odd ranks also send their MPI_Igather block and receive
 * their MPI_Iscatter block through the strided type, and an odd root gathers into and scatters
 * from one contiguous type per block; odd ranks send and receive their MPI_Ialltoallv,
 * MPI_Igatherv and MPI_Iscatterv blocks as pairs of doubles (a derived type, freed at once).
 * Mode "persistent_others" makes the same calls through their persistent forms (`START`):
 * every round's requests are made once (the derived types freed right after their init, the
 * barrier's init after the late rank's sleep), started twice with MPI_Startall, on new inputs
 * and cleared outputs the second time (`frac_shift`), checked after each run, and freed. */
static int nonblocking_others(void) {
  enum { N = 1024 };
  int P, r;
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  const int odd = r % 2 == 1;
  double* bc = xmalloc(sizeof(double) * 2 * N); /* strided on odd ranks */
  double* rd = xmalloc(sizeof(double) * N);
  double* rd_out = xmalloc(sizeof(double) * N);
  double* ag_in = xmalloc(sizeof(double) * N);
  double* ag = xmalloc(sizeof(double) * N * P);
  double* rs_in = xmalloc(sizeof(double) * N * P);
  double* rs = xmalloc(sizeof(double) * N);
  double* a2a_in = xmalloc(sizeof(double) * N * P);
  double* a2a = xmalloc(sizeof(double) * N * P);
  double* ga_in = xmalloc(sizeof(double) * 2 * N); /* strided on odd ranks */
  double* ga = xmalloc(sizeof(double) * N * P);
  double* sc_in = xmalloc(sizeof(double) * N * P);
  double* sc = xmalloc(sizeof(double) * 2 * N); /* strided on odd ranks */
  /* MPI_Ialltoallv: rank r sends rank q ((r + 2q) % 3) * 64 doubles (none for some pairs),
   * block q at 200 q; odd ranks send and receive pairs of doubles (a derived type) */
  enum { V = 200 };
  double* av_in = xmalloc(sizeof(double) * V * P);
  double* av = xmalloc(sizeof(double) * V * P);
  int* av_sc = xmalloc(sizeof(int) * P);
  int* av_sd = xmalloc(sizeof(int) * P);
  int* av_rc = xmalloc(sizeof(int) * P);
  int* av_rd = xmalloc(sizeof(int) * P);
  /* MPI_Igatherv and MPI_Iscatterv: rank k's block is (k % 3) * 64 doubles (rank 0's empty),
   * at k V of the root's buffer; odd ranks (and an odd root) use pairs of doubles */
  double* gv_in = xmalloc(sizeof(double) * V);
  double* gv = xmalloc(sizeof(double) * V * P);
  double* sv_in = xmalloc(sizeof(double) * V * P);
  double* sv = xmalloc(sizeof(double) * V);
  int* v_counts = xmalloc(sizeof(int) * P);
  int* v_displs = xmalloc(sizeof(int) * P);
  /* MPI_Ireduce_scatter: rank k's block has (k % 3) * 64 doubles (rank 0's empty), in place
   * in round 1 (on every rank, as MPI asks); MPI_Iallgatherv: rank k's block (k % 3) * 64
   * doubles at (P - 1 - k) V (reverse rank order, gaps between), in place in round 1, odd
   * ranks send and receive pairs of doubles */
  double* rv_in = xmalloc(sizeof(double) * V * P);
  double* rv = xmalloc(sizeof(double) * V * P);
  double* gav_in = xmalloc(sizeof(double) * V);
  double* gav = xmalloc(sizeof(double) * V * P);
  int* rv_counts = xmalloc(sizeof(int) * P);
  int* gav_counts = xmalloc(sizeof(int) * P);
  int* gav_displs = xmalloc(sizeof(int) * P);
  /* MPI_Iallgatherv with blocks of E doubles: block k at k E on even ranks, at (P - 1 - k)
   * (E + 3) on odd ones (gaps of 3, which stay untouched) */
  enum { E = 64 };
  double* gae_in = xmalloc(sizeof(double) * E);
  double* gae = xmalloc(sizeof(double) * (E + 3) * P);
  int* gae_counts = xmalloc(sizeof(int) * P);
  int* gae_displs = xmalloc(sizeof(int) * P);
#if MPI_VERSION >= 4
  MPI_Count* rv_counts_c = xmalloc(sizeof(MPI_Count) * P);
  MPI_Count* gav_counts_c = xmalloc(sizeof(MPI_Count) * P);
  MPI_Aint* gav_displs_c = xmalloc(sizeof(MPI_Aint) * P);
  MPI_Count* v_counts_c = xmalloc(sizeof(MPI_Count) * P);
  MPI_Aint* v_displs_c = xmalloc(sizeof(MPI_Aint) * P);
  MPI_Count* av_sc_c = xmalloc(sizeof(MPI_Count) * P);
  MPI_Count* av_rc_c = xmalloc(sizeof(MPI_Count) * P);
  MPI_Aint* av_sd_c = xmalloc(sizeof(MPI_Aint) * P);
  MPI_Aint* av_rd_c = xmalloc(sizeof(MPI_Aint) * P);
#endif
  for (int round = 0; round < 3; ++round) {
#if MPI_VERSION >= 4
    large_count = round == 2; /* the _c forms */
#endif
    const int root = round == 0 ? 0 : P - 1;
    const char* early = getenv("PRELOAD_CHECK_FREE_EARLY");
    free_early = persistent_mode && round > 0 && early != NULL && strcmp(early, "1") == 0;
    MPI_Request q[14];
    /* a persistent request runs twice, on new inputs the second time */
    for (int run = 0; run < (persistent_mode ? 2 : 1); ++run) {
      frac_shift = 0.0625 * run;
      for (int i = 0; i < 2 * N; ++i) bc[i] = -1.0;
      if (r == root)
        for (int i = 0; i < N; ++i) bc[i] = frac(root, i);
      for (int i = 0; i < N; ++i) {
        rd[i] = frac(r, i);
        rd_out[i] = -1.0;
        ag_in[i] = frac(r, i);
        rs[i] = -1.0;
      }
      for (int i = 0; i < N * P; ++i) {
        ag[i] = -1.0;
        rs_in[i] = frac(r, i);
        a2a_in[i] = frac(r, i) + 0.25 * (i / N); /* block q: for rank q */
        a2a[i] = -1.0;
        ga[i] = -1.0;
        sc_in[i] = frac(root, i) + 0.5;
      }
      for (int i = 0; i < 2 * N; ++i) {
        ga_in[i] = -1.0;
        sc[i] = -1.0;
      }
      for (int i = 0; i < N; ++i) ga_in[odd ? 2 * i : i] = frac(r, i) + 0.75;
      const int unit = odd ? 2 : 1; /* doubles per element of this rank's type */
      for (int k = 0; k < P; ++k) {
        av_sc[k] = ((r + 2 * k) % 3) * 64 / unit;
        av_rc[k] = ((k + 2 * r) % 3) * 64 / unit;
        av_sd[k] = av_rd[k] = k * V / unit;
#if MPI_VERSION >= 4
        av_sc_c[k] = av_sc[k];
        av_rc_c[k] = av_rc[k];
        av_sd_c[k] = av_sd[k];
        av_rd_c[k] = av_rd[k];
#endif
      }
      for (int i = 0; i < V * P; ++i) {
        av_in[i] = frac(r, (i / V) * 1000 + i % V) + 0.125;
        av[i] = -1.0;
        gv[i] = -1.0;
        sv_in[i] = frac(root, 7000 + i) + 0.625;
      }
      const int root_unit = root % 2 == 1 ? 2 : 1;
      for (int k = 0; k < P; ++k) {
        v_counts[k] = (k % 3) * 64 / root_unit;
        v_displs[k] = k * V / root_unit;
#if MPI_VERSION >= 4
        v_counts_c[k] = v_counts[k];
        v_displs_c[k] = v_displs[k];
#endif
      }
      for (int i = 0; i < V; ++i) {
        gv_in[i] = frac(r, 5000 + i) + 0.375;
        sv[i] = -1.0;
      }
      const int in_place_v = round == 1;
      int rv_total = 0,
          rv_mine = 0; /* MPI_Ireduce_scatter's blocks, and where this rank's starts */
      for (int k = 0; k < P; ++k) {
        rv_counts[k] = (k % 3) * 64;
        if (k < r) rv_mine += rv_counts[k];
        rv_total += rv_counts[k];
      }
      for (int i = 0; i < V * P; ++i) {
        rv_in[i] = i < rv_total ? frac(r, 9000 + i) + 0.25 : -3.0;
        rv[i] = in_place_v ? rv_in[i] : -1.0;
        gav[i] = -1.0;
      }
      for (int k = 0; k < P; ++k) {
        gav_counts[k] = (k % 3) * 64 / unit;
        gav_displs[k] = (P - 1 - k) * V / unit;
#if MPI_VERSION >= 4
        rv_counts_c[k] = rv_counts[k];
        gav_counts_c[k] = gav_counts[k];
        gav_displs_c[k] = gav_displs[k];
#endif
      }
      for (int i = 0; i < V; ++i) gav_in[i] = frac(r, 11000 + i) + 0.875;
      for (int i = 0; i < E; ++i) gae_in[i] = frac(r, 13000 + i) + 0.3125;
      for (int i = 0; i < (E + 3) * P; ++i) gae[i] = -1.0;
      for (int k = 0; k < P; ++k) {
        gae_counts[k] = E;
        gae_displs[k] = odd ? (P - 1 - k) * (E + 3) : k * E;
      }
      if (in_place_v) /* this rank's block where it lands */
        for (int i = 0; i < (r % 3) * 64; ++i) gav[(size_t)(P - 1 - r) * V + i] = gav_in[i];
      const int own_v = (r % 3) * 64 / unit; /* this rank's block, in its own type */
      MPI_Datatype strided = MPI_DATATYPE_NULL, block = MPI_DATATYPE_NULL;
      const int odd_receiver = odd && r != root;
      if (run == 0) { /* the starts, or the persistent requests' inits */
        if (odd_receiver) {
          MPI_Type_vector(N, 1, 2, MPI_DOUBLE, &strided);
          MPI_Type_commit(&strided);
          check_call(START(MPI_Ibcast, Bcast, (bc, 1, strided, root, MPI_COMM_WORLD), &q[0]),
                     "MPI_Ibcast");
          release_type(&strided);
        } else {
          check_call(START(MPI_Ibcast, Bcast, (bc, N, MPI_DOUBLE, root, MPI_COMM_WORLD), &q[0]),
                     "MPI_Ibcast");
        }
        check_call(
            START(MPI_Ireduce, Reduce,
                  (rd, r == root ? rd_out : NULL, N, MPI_DOUBLE, MPI_SUM, root, MPI_COMM_WORLD),
                  &q[1]),
            "MPI_Ireduce");
        if (odd) {
          MPI_Type_contiguous(N, MPI_DOUBLE, &block);
          MPI_Type_commit(&block);
          check_call(START(MPI_Iallgather, Allgather,
                           (ag_in, N, MPI_DOUBLE, ag, 1, block, MPI_COMM_WORLD), &q[2]),
                     "MPI_Iallgather");
          release_type(&block);
        } else {
          check_call(START(MPI_Iallgather, Allgather,
                           (ag_in, N, MPI_DOUBLE, ag, N, MPI_DOUBLE, MPI_COMM_WORLD), &q[2]),
                     "MPI_Iallgather");
        }
        /* a blocking collective among the starts: every rank reaches it in the same order */
        int one = 1, sum = 0;
        check_call(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
        if (sum != P) ++errors;
        check_call(START(MPI_Ireduce_scatter_block, Reduce_scatter_block,
                         (rs_in, rs, N, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD), &q[3]),
                   "MPI_Ireduce_scatter_block");
        check_call(START(MPI_Ialltoall, Alltoall,
                         (a2a_in, N, MPI_DOUBLE, a2a, N, MPI_DOUBLE, MPI_COMM_WORLD), &q[4]),
                   "MPI_Ialltoall");
        /* gather and scatter: an odd rank's own block through the strided type, an odd root's P
         * blocks through one contiguous type per block, every type freed right after the start */
        MPI_Datatype own = MPI_DOUBLE, blocks = MPI_DOUBLE;
        int own_count = N, blocks_count = N;
        if (odd) {
          MPI_Type_vector(N, 1, 2, MPI_DOUBLE, &own);
          MPI_Type_commit(&own);
          own_count = 1;
          if (r == root) {
            MPI_Type_contiguous(N, MPI_DOUBLE, &blocks);
            MPI_Type_commit(&blocks);
            blocks_count = 1;
          }
        }
        check_call(START(MPI_Igather, Gather,
                         (ga_in, own_count, own, ga, blocks_count, blocks, root, MPI_COMM_WORLD),
                         &q[5]),
                   "MPI_Igather");
        check_call(START(MPI_Iscatter, Scatter,
                         (sc_in, blocks_count, blocks, sc, own_count, own, root, MPI_COMM_WORLD),
                         &q[6]),
                   "MPI_Iscatter");
        if (own != MPI_DOUBLE) release_type(&own);
        if (blocks != MPI_DOUBLE) release_type(&blocks);
        MPI_Datatype pair = MPI_DOUBLE;
        if (odd) {
          MPI_Type_contiguous(2, MPI_DOUBLE, &pair);
          MPI_Type_commit(&pair);
        }
#if MPI_VERSION >= 4
        if (large_count)
          check_call(
              START_AS(MPI_Ialltoallv_c, MPI_Alltoallv_init_c,
                       (av_in, av_sc_c, av_sd_c, pair, av, av_rc_c, av_rd_c, pair, MPI_COMM_WORLD),
                       &q[7]),
              "MPI_Ialltoallv_c");
        else
#endif
          check_call(START_AS(MPI_Ialltoallv, INIT_NAME(Alltoallv),
                              (av_in, av_sc, av_sd, pair, av, av_rc, av_rd, pair, MPI_COMM_WORLD),
                              &q[7]),
                     "MPI_Ialltoallv");
#if MPI_VERSION >= 4
        if (large_count) {
          check_call(
              START_AS(MPI_Igatherv_c, MPI_Gatherv_init_c,
                       (gv_in, own_v, pair, gv, v_counts_c, v_displs_c, pair, root, MPI_COMM_WORLD),
                       &q[8]),
              "MPI_Igatherv_c");
          check_call(
              START_AS(MPI_Iscatterv_c, MPI_Scatterv_init_c,
                       (sv_in, v_counts_c, v_displs_c, pair, sv, own_v, pair, root, MPI_COMM_WORLD),
                       &q[9]),
              "MPI_Iscatterv_c");
        } else
#endif
        {
          check_call(
              START_AS(MPI_Igatherv, INIT_NAME(Gatherv),
                       (gv_in, own_v, pair, gv, v_counts, v_displs, pair, root, MPI_COMM_WORLD),
                       &q[8]),
              "MPI_Igatherv");
          check_call(
              START_AS(MPI_Iscatterv, INIT_NAME(Scatterv),
                       (sv_in, v_counts, v_displs, pair, sv, own_v, pair, root, MPI_COMM_WORLD),
                       &q[9]),
              "MPI_Iscatterv");
        }
        const void* rv_send = in_place_v ? MPI_IN_PLACE : (const void*)rv_in;
        const void* gav_send = in_place_v ? MPI_IN_PLACE : (const void*)gav_in;
#if MPI_VERSION >= 4
        if (large_count) {
          check_call(START_AS(MPI_Ireduce_scatter_c, MPI_Reduce_scatter_init_c,
                              (rv_send, rv, rv_counts_c, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD),
                              &q[10]),
                     "MPI_Ireduce_scatter_c");
          check_call(START_AS(MPI_Iallgatherv_c, MPI_Allgatherv_init_c,
                              (gav_send, own_v, pair, gav, gav_counts_c, gav_displs_c, pair,
                               MPI_COMM_WORLD),
                              &q[11]),
                     "MPI_Iallgatherv_c");
        } else
#endif
        {
          check_call(START_AS(MPI_Ireduce_scatter, INIT_NAME(Reduce_scatter),
                              (rv_send, rv, rv_counts, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD),
                              &q[10]),
                     "MPI_Ireduce_scatter");
          check_call(
              START_AS(MPI_Iallgatherv, INIT_NAME(Allgatherv),
                       (gav_send, own_v, pair, gav, gav_counts, gav_displs, pair, MPI_COMM_WORLD),
                       &q[11]),
              "MPI_Iallgatherv");
        }
        if (pair != MPI_DOUBLE) release_type(&pair);
        check_call(START_AS(MPI_Iallgatherv, INIT_NAME(Allgatherv),
                            (gae_in, E, MPI_DOUBLE, gae, gae_counts, gae_displs, MPI_DOUBLE,
                             MPI_COMM_WORLD),
                            &q[12]),
                   "MPI_Iallgatherv (blocks of one size)");
      }
      /* MPI_Ibarrier last, after a late rank's sleep: no other start follows it, so only the
       * barrier keeps a rank's MPI_Waitall from returning before the late rank arrives */
      if (r == round % P) sleep_ms(20);
      const double enter = now_seconds();
      if (run == 0)
        check_call(START_AS(MPI_Ibarrier, INIT_NAME(Barrier), (MPI_COMM_WORLD), &q[13]),
                   "MPI_Ibarrier");
      if (persistent_mode) check_call(MPI_Startall(14, q), "MPI_Startall");
      check_call(MPI_Waitall(14, q, MPI_STATUSES_IGNORE), "MPI_Waitall");
      const double left = now_seconds();
      double* enters = xmalloc(sizeof(double) * P);
      check_call(MPI_Allgather(&enter, 1, MPI_DOUBLE, enters, 1, MPI_DOUBLE, MPI_COMM_WORLD),
                 "MPI_Allgather");
      for (int k = 0; k < P; ++k)
        if (left < enters[k]) {
          fprintf(stderr,
                  "rank %d: MPI_Ibarrier completed at %.6f s, before rank %d started it at "
                  "%.6f s\n",
                  r, left, k, enters[k]);
          ++errors;
          break;
        }
      free(enters);
      for (int i = 0; i < rv_counts[r]; ++i) {
        double want = 0;
        for (int k = 0; k < P; ++k) want += frac(k, 9000 + rv_mine + i) + 0.25;
        if (rv[i] != want) {
          fprintf(stderr, "rank %d: MPI_Ireduce_scatter: element %d is %.17g, want %.17g\n", r, i,
                  rv[i], want);
          ++errors;
          break;
        }
      }
      if (!in_place_v && rv[rv_counts[r]] != -1.0) {
        fprintf(stderr, "rank %d: MPI_Ireduce_scatter wrote past its block\n", r);
        ++errors;
      }
      for (int k = 0; k < P; ++k)
        for (int i = 0; i < V; ++i) {
          const double want = i < (k % 3) * 64 ? frac(k, 11000 + i) + 0.875 : -1.0; /* gaps */
          if (gav[(size_t)(P - 1 - k) * V + i] != want) {
            fprintf(stderr, "rank %d: MPI_Iallgatherv: block %d element %d is %.17g, want %.17g\n",
                    r, k, i, gav[(size_t)(P - 1 - k) * V + i], want);
            ++errors;
            k = P;
            break;
          }
        }
      for (int at = 0; at < (E + 3) * P; ++at) {
        /* the block and element at `at`, or a gap (odd ranks) or the unused tail (even ranks) */
        const int stride = odd ? E + 3 : E;
        const int k = odd ? P - 1 - at / stride : at / stride, i = at % stride;
        const double want = at < stride * P && i < E ? frac(k, 13000 + i) + 0.3125 : -1.0;
        if (gae[at] != want) {
          fprintf(stderr,
                  "rank %d: MPI_Iallgatherv (blocks of one size): element %d is %.17g, want "
                  "%.17g\n",
                  r, at, gae[at], want);
          ++errors;
          break;
        }
      }
      if (r == root)
        for (int k = 0; k < P; ++k)
          for (int i = 0; i < V; ++i) {
            const double want = i < (k % 3) * 64 ? frac(k, 5000 + i) + 0.375 : -1.0;
            if (gv[(size_t)k * V + i] != want) {
              fprintf(stderr, "rank %d: MPI_Igatherv: block %d element %d is %.17g, want %.17g\n",
                      r, k, i, gv[(size_t)k * V + i], want);
              ++errors;
              k = P;
              break;
            }
          }
      for (int i = 0; i < V; ++i) {
        const double want = i < (r % 3) * 64 ? frac(root, 7000 + r * V + i) + 0.625 : -1.0;
        if (sv[i] != want) {
          fprintf(stderr, "rank %d: MPI_Iscatterv: element %d is %.17g, want %.17g\n", r, i, sv[i],
                  want);
          ++errors;
          break;
        }
      }
      for (int k = 0; k < P; ++k) {
        const int n = ((k + 2 * r) % 3) * 64;
        for (int i = 0; i < V; ++i) {
          const double want = i < n ? frac(k, r * 1000 + i) + 0.125 : -1.0; /* gaps unwritten */
          if (av[(size_t)k * V + i] != want) {
            fprintf(stderr, "rank %d: MPI_Ialltoallv: block %d element %d is %.17g, want %.17g\n",
                    r, k, i, av[(size_t)k * V + i], want);
            ++errors;
            k = P;
            break;
          }
        }
      }
      if (r == root)
        for (int k = 0; k < P; ++k)
          for (int i = 0; i < N; ++i)
            if (ga[(size_t)k * N + i] != frac(k, i) + 0.75) {
              fprintf(stderr, "rank %d: MPI_Igather: block %d element %d is %.17g\n", r, k, i,
                      ga[(size_t)k * N + i]);
              ++errors;
              k = P;
              break;
            }
      for (int i = 0; i < N; ++i) {
        const double want = frac(root, r * N + i) + 0.5;
        if (sc[odd ? 2 * i : i] != want || (odd && sc[2 * i + 1] != -1.0)) {
          fprintf(stderr, "rank %d: MPI_Iscatter: element %d is %.17g (gap %.17g), want %.17g\n", r,
                  i, sc[odd ? 2 * i : i], odd ? sc[2 * i + 1] : 0.0, want);
          ++errors;
          break;
        }
      }
      expect_values(bc, N, odd_receiver ? 2 : 1, frac, root, "MPI_Ibcast");
      if (odd_receiver) /* the gaps of the strided type stay unwritten */
        for (int i = 0; i < N; ++i)
          if (bc[2 * i + 1] != -1.0) {
            fprintf(stderr, "rank %d: MPI_Ibcast wrote the gap at %d\n", r, 2 * i + 1);
            ++errors;
            break;
          }
      if (r == root)
        for (int i = 0; i < N; ++i) {
          double want = 0;
          for (int k = 0; k < P; ++k) want += frac(k, i);
          if (rd_out[i] != want) {
            fprintf(stderr, "rank %d: MPI_Ireduce: element %d is %.17g, want %.17g\n", r, i,
                    rd_out[i], want);
            ++errors;
            break;
          }
        }
      for (int k = 0; k < P; ++k) {
        expect_values(ag + (size_t)k * N, N, 1, frac, k, "MPI_Iallgather");
        for (int i = 0; i < N; ++i)
          if (a2a[(size_t)k * N + i] != frac(k, r * N + i) + 0.25 * r) {
            fprintf(stderr, "rank %d: MPI_Ialltoall: block %d element %d is %.17g\n", r, k, i,
                    a2a[(size_t)k * N + i]);
            ++errors;
            break;
          }
      }
      for (int i = 0; i < N; ++i) {
        double want = 0;
        for (int k = 0; k < P; ++k) want += frac(k, r * N + i);
        if (rs[i] != want) {
          fprintf(stderr, "rank %d: MPI_Ireduce_scatter_block: element %d is %.17g, want %.17g\n",
                  r, i, rs[i], want);
          ++errors;
          break;
        }
      }
      checks += 12;
    }
    if (persistent_mode)
      for (int k = 0; k < 13; ++k) check_call(MPI_Request_free(&q[k]), "MPI_Request_free");
    while (deferred_count > 0) MPI_Type_free(&deferred_types[--deferred_count]);
    frac_shift = 0.0;
    if (round == 0) check_call(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); /* sets up */
  }
#if MPI_VERSION >= 4
  large_count = 0;
#endif
  free(bc);
  free(rd);
  free(rd_out);
  free(ag_in);
  free(ag);
  free(rs_in);
  free(rs);
  free(a2a_in);
  free(a2a);
  free(ga_in);
  free(ga);
  free(sc_in);
  free(sc);
  free(av_in);
  free(av);
  free(av_sc);
  free(av_sd);
  free(av_rc);
  free(av_rd);
  free(gv_in);
  free(gv);
  free(sv_in);
  free(sv);
  free(v_counts);
  free(v_displs);
  free(rv_in);
  free(rv);
  free(gav_in);
  free(gav);
  free(rv_counts);
  free(gav_counts);
  free(gav_displs);
  free(gae_in);
  free(gae);
  free(gae_counts);
  free(gae_displs);
#if MPI_VERSION >= 4
  free(rv_counts_c);
  free(gav_counts_c);
  free(gav_displs_c);
  free(v_counts_c);
  free(v_displs_c);
  free(av_sc_c);
  free(av_rc_c);
  free(av_sd_c);
  free(av_rd_c);
#endif
  if (r == 0)
    fprintf(stderr, "%s: %s\n", persistent_mode ? "persistent_others" : "nonblocking_others",
            errors ? "FAILED" : "completed");
  MPI_Finalize();
  return errors ? 1 : 0;
}

/* Mode "pack_race [calls]": two threads, each on its own duplicate of the world, start
 * `calls` (3000) MPI_Iallgather of 64 KiB blocks with derived types on both sides, up to 8 in
 * flight: their starts pack send sides while each communicator's engine thread unpacks earlier
 * calls' receive sides. The local copies of all four threads once shared one communicator and one
 * tag and could take each other's messages (a truncation error, or another call's bytes).
 * Every result is checked. Run with a TCOLL_ALLGATHER_ALGO rule, so that tcoll runs every
 * call. */
static double race_value(int call, int r, int i) {
  return (double)(call * 7 + r) + (double)i / 1024.0;
}

static int race_calls = 3000; /* per thread; the mode's argument */

static void* pack_race_thread(void* arg) {
  enum { N = 8192, K = 8 };
  const MPI_Comm comm = *(MPI_Comm*)arg;
  const int CALLS = race_calls;
  int P;
  MPI_Comm_size(comm, &P);
  MPI_Datatype strided, block; /* every other double of the send buffer; one block received */
  MPI_Type_vector(N, 1, 2, MPI_DOUBLE, &strided);
  MPI_Type_commit(&strided);
  MPI_Type_contiguous(N, MPI_DOUBLE, &block);
  MPI_Type_commit(&block);
  double* in[K];
  double* out[K];
  int call_of[K];
  MPI_Request q[K];
  for (int k = 0; k < K; ++k) {
    in[k] = xmalloc(sizeof(double) * 2 * N);
    out[k] = xmalloc(sizeof(double) * N * P);
    q[k] = MPI_REQUEST_NULL;
    call_of[k] = -1;
  }
  int wrong = 0;
  for (int call = 0; call < CALLS + K; ++call) {
    const int k = call % K;
    if (call_of[k] >= 0) {
      if (MPI_Wait(&q[k], MPI_STATUS_IGNORE) != MPI_SUCCESS) { /* (errors is the main thread's) */
        fprintf(stderr, "rank %d: MPI_Wait of call %d failed\n", world_rank, call_of[k]);
        ++wrong;
      }
      for (int b = 0; b < P; ++b)
        for (int i = 0; i < N; ++i)
          if (out[k][(size_t)b * N + i] != race_value(call_of[k], b, i)) {
            fprintf(stderr, "rank %d: call %d: block %d element %d is %.17g, want %.17g\n",
                    world_rank, call_of[k], b, i, out[k][(size_t)b * N + i],
                    race_value(call_of[k], b, i));
            ++wrong;
            b = P;
            break;
          }
      call_of[k] = -1;
    }
    if (call >= CALLS) continue;
    for (int i = 0; i < N; ++i) {
      in[k][2 * i] = race_value(call, world_rank, i);
      in[k][2 * i + 1] = -1.0;
    }
    for (int i = 0; i < N * P; ++i) out[k][i] = -2.0;
    check_call(MPI_Iallgather(in[k], 1, strided, out[k], 1, block, comm, &q[k]), "MPI_Iallgather");
    call_of[k] = call;
  }
  for (int k = 0; k < K; ++k) {
    free(in[k]);
    free(out[k]);
  }
  MPI_Type_free(&strided);
  MPI_Type_free(&block);
  return (void*)(intptr_t)wrong;
}

static int pack_race(void) {
  MPI_Comm comms[2];
  pthread_t threads[2];
  for (int t = 0; t < 2; ++t) {
    MPI_Comm_dup(MPI_COMM_WORLD, &comms[t]);
    int one = 1, sum = 0; /* a blocking call creates tcoll's state of the communicator */
    check_call(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, comms[t]), "MPI_Allreduce");
  }
  for (int t = 0; t < 2; ++t) pthread_create(&threads[t], NULL, pack_race_thread, &comms[t]);
  for (int t = 0; t < 2; ++t) {
    void* wrong = NULL;
    pthread_join(threads[t], &wrong);
    errors += (int)(intptr_t)wrong;
    checks += race_calls;
    MPI_Comm_free(&comms[t]);
  }
  if (world_rank == 0) fprintf(stderr, "pack_race: %s\n", errors ? "FAILED" : "completed");
  MPI_Finalize();
  return errors ? 1 : 0;
}

/* Mode "free_pending": MPI_Comm_free while MPI_Iallreduce calls on the communicator are
 * still pending; MPI lets pending operations complete normally. Each round: a blocking
 * MPI_Allreduce on a new communicator (tcoll's state is created there), three 64 KiB
 * MPI_Iallreduce, MPI_Comm_free, MPI_Waitall, and every result checked. */
static int free_pending(void) {
  enum { N = 16384, K = 3 };
  int P;
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  float* v[K];
  for (int k = 0; k < K; ++k) v[k] = xmalloc(sizeof(float) * N);
  for (int round = 0; round < 5; ++round) {
    MPI_Comm c;
    MPI_Comm_dup(MPI_COMM_WORLD, &c);
    int one = 1, sum = 0;
    check_call(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, c), "MPI_Allreduce");
    MPI_Request q[K];
    for (int k = 0; k < K; ++k) {
      for (int i = 0; i < N; ++i) v[k][i] = (float)((i + 3 * k + world_rank + round) % 13);
      check_call(MPI_Iallreduce(MPI_IN_PLACE, v[k], N, MPI_FLOAT, MPI_SUM, c, &q[k]),
                 "MPI_Iallreduce");
    }
    check_call(MPI_Comm_free(&c), "MPI_Comm_free");
    check_call(MPI_Waitall(K, q, MPI_STATUSES_IGNORE), "MPI_Waitall");
    for (int k = 0; k < K; ++k)
      for (int i = 0; i < N; ++i) {
        float want = 0;
        for (int r = 0; r < P; ++r) want += (float)((i + 3 * k + r + round) % 13);
        if (v[k][i] != want) {
          fprintf(stderr, "rank %d round %d call %d: element %d is %g, want %g\n", world_rank,
                  round, k, i, v[k][i], want);
          ++errors;
          break;
        }
      }
    ++checks;
  }
  for (int k = 0; k < K; ++k) free(v[k]);
  if (world_rank == 0) fprintf(stderr, "free_pending: %s\n", errors ? "FAILED" : "completed");
  MPI_Finalize();
  return errors ? 1 : 0;
}

/* Entries of a /proc/self listing file (lines of maps) or directory (fd), or -1. */
static long proc_count(const char* what) {
  char path[64];
  snprintf(path, sizeof path, "/proc/self/%s", what);
  if (strcmp(what, "maps") == 0) {
    FILE* f = fopen(path, "r");
    if (!f) return -1;
    long n = 0;
    for (int c; (c = fgetc(f)) != EOF;) n += c == '\n';
    fclose(f);
    return n;
  }
  DIR* d = opendir(path);
  if (!d) return -1;
  long n = 0;
  while (readdir(d)) ++n;
  closedir(d);
  return n;
}

/* The largest Fortran handle of 8 new communicators. Open MPI hands out the lowest free
 * slot of its communicator table, so the first new ones fill the holes that freed
 * communicators leave below leaked ones, and the largest of several grows with the leaked
 * ones above them. */
static int fresh_comm_handle(void) {
  MPI_Comm c[8];
  int h = 0;
  for (int k = 0; k < 8; ++k) {
    MPI_Comm_dup(MPI_COMM_WORLD, &c[k]);
#ifdef MPI_ABI /* the standard ABI's integer handle (it has no Fortran conversions) */
    if (MPI_Comm_toint(c[k]) > h) h = MPI_Comm_toint(c[k]);
#else
    if ((int)MPI_Comm_c2f(c[k]) > h) h = (int)MPI_Comm_c2f(c[k]);
#endif
  }
  for (int k = 0; k < 8; ++k) MPI_Comm_free(&c[k]);
  return h;
}

/* Mode "comm_cycles N": N times, make a communicator (a duplicate, or a split with reversed
 * rank order), run a tcoll MPI_Allreduce on it and free it. A program like this must not
 * leak communicators (MPICH-family MPIs run out of context ids after a few thousand),
 * mappings or file descriptors through the preload: the handle of a fresh communicator, the
 * lines of /proc/self/maps and the open descriptors must stay where they were after the
 * first cycle. */
static int comm_cycles(int cycles) {
  enum { N = 4099 };
  int P;
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  double* v = xmalloc(sizeof(double) * N);
  long maps0 = 0, fds0 = 0;
  int handle0 = 0;
  for (int i = 0; i < cycles; ++i) {
    MPI_Comm c;
    if (i % 2)
      MPI_Comm_split(MPI_COMM_WORLD, 0, -world_rank, &c);
    else
      MPI_Comm_dup(MPI_COMM_WORLD, &c);
    for (int k = 0; k < N; ++k) v[k] = (double)((k + i + world_rank) % 9);
    check_call(MPI_Allreduce(MPI_IN_PLACE, v, N, MPI_DOUBLE, MPI_SUM, c), "MPI_Allreduce");
    for (int k = 0; k < N; ++k) {
      double want = 0;
      for (int r = 0; r < P; ++r) want += (double)((k + i + r) % 9);
      if (v[k] != want) {
        fprintf(stderr, "rank %d cycle %d: element %d is %g, want %g\n", world_rank, i, k, v[k],
                want);
        ++errors;
        break;
      }
    }
    ++checks;
    MPI_Comm_free(&c);
    if (i == 1) { /* after one cycle of each kind: tcoll's one-time state exists */
      MPI_Barrier(MPI_COMM_WORLD);
      handle0 = fresh_comm_handle();
      maps0 = proc_count("maps");
      fds0 = proc_count("fd");
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  /* one more cycle lets the last transports' retirement finish */
  const int handle1 = fresh_comm_handle();
  const long maps1 = proc_count("maps"), fds1 = proc_count("fd");
  fprintf(stderr,
          "rank %d: %d cycles; fresh communicator handle %d -> %d, /proc/self/maps lines %ld -> "
          "%ld, open descriptors %ld -> %ld\n",
          world_rank, cycles, handle0, handle1, maps0, maps1, fds0, fds1);
  if (handle1 - handle0 > 16) {
    fprintf(stderr, "rank %d: communicators leak (handle %d -> %d)\n", world_rank, handle0,
            handle1);
    ++errors;
  }
  if (maps1 - maps0 > 32 || fds1 - fds0 > 4) {
    fprintf(stderr, "rank %d: mappings or descriptors leak\n", world_rank);
    ++errors;
  }
  free(v);
  MPI_Finalize();
  return errors ? 1 : 0;
}

/* Mode "handle_reuse": MPI hands a freed communicator's handle to the next one. A 4 KiB
 * MPI_Bcast on a one-rank communicator goes to MPI by route (the preload remembers that route
 * and the communicator's size for the same call again); once that communicator is freed,
 * the same call on a duplicate of the world with the same handle must be routed anew: tcoll
 * runs it there (the runner expects both routes in the summary) and every rank gets the
 * root's bytes. The duplicate must reuse the handle, or the check would prove nothing. */
static int handle_reuse(void) {
  enum { N = 4096 };
  unsigned char* buf = xmalloc(N);
  MPI_Comm one, all;
  MPI_Comm_split(MPI_COMM_WORLD, world_rank, 0, &one);
  for (int i = 0; i < 3; ++i) check_call(MPI_Bcast(buf, N, MPI_BYTE, 0, one), "MPI_Bcast");
  const MPI_Comm freed = one;
  MPI_Comm_free(&one);
  MPI_Comm_dup(MPI_COMM_WORLD, &all);
  if (all != freed) {
    fprintf(stderr, "rank %d: MPI_Comm_dup did not reuse the freed handle\n", world_rank);
    ++errors;
  }
  for (int i = 0; i < 3; ++i) {
    for (int k = 0; k < N; ++k) buf[k] = (unsigned char)(world_rank == 0 ? k * 7 + i : 0);
    check_call(MPI_Bcast(buf, N, MPI_BYTE, 0, all), "MPI_Bcast");
    for (int k = 0; k < N; ++k)
      if (buf[k] != (unsigned char)(k * 7 + i)) {
        fprintf(stderr, "rank %d: byte %d is %d, want %d\n", world_rank, k, buf[k],
                (unsigned char)(k * 7 + i));
        ++errors;
        break;
      }
    ++checks;
  }
  MPI_Comm_free(&all);
  free(buf);
  MPI_Finalize();
  return errors ? 1 : 0;
}

/* Mode "handle_reuse_v", run with TCOLL_DEBUG=0, where the preload remembers the route of
 * MPI_Gatherv per communicator and root (no size decides it): rank 0 alone makes an
 * MPI_Gatherv on its one-rank communicator, which MPI runs (remembered on rank 0 only); that
 * communicator is freed, a duplicate of the world gets its handle, and there the preload
 * runs MPI_Gatherv over shared memory (tcoll's linear gather). Rank 0 must route it anew, or
 * the two ranks run different gathers and never meet. Prints the preload's own count of the
 * calls it took (tcoll_mpi_counts), so the runner sees that it was active. */
static int handle_reuse_v(void) {
  int counts[2] = {4, 4}, displs[2] = {0, 4}, in[4] = {0}, out[8];
  MPI_Comm one, all;
  MPI_Comm_split(MPI_COMM_WORLD, world_rank, 0, &one);
  if (world_rank == 0)
    for (int i = 0; i < 3; ++i)
      check_call(MPI_Gatherv(in, 4, MPI_INT, out, counts, displs, MPI_INT, 0, one), "MPI_Gatherv");
  const MPI_Comm freed = one;
  MPI_Comm_free(&one);
  MPI_Comm_dup(MPI_COMM_WORLD, &all);
  if (world_rank == 0 && all != freed) {
    fprintf(stderr, "rank 0: MPI_Comm_dup did not reuse the freed handle\n");
    ++errors;
  }
  int P;
  MPI_Comm_size(all, &P);
  for (int i = 0; i < 3 && P == 2; ++i) {
    for (int k = 0; k < 4; ++k) in[k] = world_rank * 100 + k + i;
    check_call(MPI_Gatherv(in, 4, MPI_INT, out, counts, displs, MPI_INT, 0, all), "MPI_Gatherv");
    if (world_rank == 0)
      for (int k = 0; k < 8; ++k)
        if (out[k] != (k / 4) * 100 + k % 4 + i) {
          fprintf(stderr, "rank 0: element %d is %d, want %d\n", k, out[k],
                  (k / 4) * 100 + k % 4 + i);
          ++errors;
          break;
        }
    ++checks;
  }
  void* symbol = dlsym(RTLD_DEFAULT, "tcoll_mpi_counts");
  int (*counts_of)(unsigned long long*, unsigned long long*) = NULL;
  memcpy(&counts_of, &symbol, sizeof symbol); /* POSIX: a function's address from dlsym */
  unsigned long long through = 0;
  if (counts_of) counts_of(&through, NULL);
  printf("rank %d: %llu calls through the preload\n", world_rank, through);
  MPI_Comm_free(&all);
  MPI_Finalize();
  return errors || P != 2 ? 1 : 0;
}

/* MPI_Barrier on `comm`: every rank in turn arrives 20 ms late; no rank may leave before
 * it arrived (CLOCK_MONOTONIC: one clock for the processes of the node; the times are
 * gathered by PMPI_Allgather, MPI's own, so a broken barrier cannot hide itself). */
static void check_barrier(MPI_Comm comm) {
  int P, r;
  MPI_Comm_size(comm, &P);
  MPI_Comm_rank(comm, &r);
  double* enters = malloc(sizeof(double) * (size_t)P);
  for (int late = 0; late < P; ++late) {
    struct timespec ts;
    if (r == late) nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL);
    clock_gettime(CLOCK_MONOTONIC, &ts);
    const double enter = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    check_call(MPI_Barrier(comm), "MPI_Barrier");
    clock_gettime(CLOCK_MONOTONIC, &ts);
    const double leave = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    PMPI_Allgather(&enter, 1, MPI_DOUBLE, enters, 1, MPI_DOUBLE, comm);
    double last = enters[0];
    for (int q = 1; q < P; ++q) last = enters[q] > last ? enters[q] : last;
    if (leave < last) {
      fprintf(stderr, "rank %d: MPI_Barrier: left at %.6f s, before rank %d arrived at %.6f s\n",
              world_rank, leave, late, last);
      ++errors;
    }
  }
  free(enters);
}

/* The checks of the default mode (sections 1-4), on the thread that calls MPI. */
static void* run_checks(void* unused) {
  (void)unused;
  const int nonblocking = 1; /* MPI_Iallreduce works at every level (the preload falls back) */

  /* 1. Every type and op on the world, counts 0, 1 and 7. */
  const size_t small[] = {0, 1, 7};
  for (int k = 0; k < NTYPES; ++k)
    if (!quick || k == 0 || k == 4 || k == 17 || types[k].kind != 0)
      check_type(MPI_COMM_WORLD, &types[k], small, 3, 0, nonblocking && k % 4 == 0);

  /* 2. A large count (more than 16 KiB for every type: past the default passthrough
   * bound) for a few types and ops. */
  const size_t large[] = {20011};
  const int large_types[] = {0, 4, 14, 21, 22, 23};
  for (int k = 0; k < (int)(sizeof large_types / sizeof large_types[0]); ++k)
    if (!quick || k % 2 == 0)
      check_type(MPI_COMM_WORLD, &types[large_types[k]], large, 1,
                 (1 << OP_SUM) | (1 << OP_MAX) | (quick ? 0 : (1 << OP_BXOR)), nonblocking);

  /* MPI_Alltoall in the window where the preload runs tcoll's by default on one node
   * (4 KiB-32 KiB of send buffer on 2 ranks, to 64 KiB on more): 1000 ints per block */
  for (int inplace = 0; inplace < 2; ++inplace)
    check_alltoall(MPI_COMM_WORLD, &types[4], inplace, 1000);
  /* MPI_Gather and MPI_Scatter in the window where the preload runs tcoll's linear ones by
   * default on one node (from 1 KiB of the root's buffer to 32 KiB (gather) and 16 KiB
   * (scatter) on 2 ranks, to 128 KiB on more): 1000 ints per block, several roots; section
   * 2's 20011-int calls lie past it (MPI's own) */
  for (int inplace = 0; inplace < 2; ++inplace) {
    int P;
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    check_gather(MPI_COMM_WORLD, &types[4], inplace, 1000, inplace ? P - 1 : 0);
    check_scatter(MPI_COMM_WORLD, &types[22], inplace, 500, inplace ? 0 : P - 1);
  }
  /* The uneven forms with blocks of about 1000 elements (some empty), several roots */
  for (int inplace = 0; inplace < 2; ++inplace) {
    int P;
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    check_alltoallv(MPI_COMM_WORLD, &types[22], inplace, 1000);
    check_gatherv(MPI_COMM_WORLD, &types[4], inplace, 1000, inplace ? P - 1 : 0);
    check_scatterv(MPI_COMM_WORLD, &types[21], inplace, 1000, inplace ? 0 : P - 1);
  }

  /* 3. Communicator splits: halves with reversed rank order, a singleton and the rest,
   * MPI_COMM_SELF, and short-lived duplicates (tcoll state freed with each). */
  const size_t split_counts[] = {1, 7, 4099};
  const int split_types[] = {4, 22, 14};
  MPI_Comm halves, lone, dup;
  MPI_Comm_split(MPI_COMM_WORLD, world_rank % 2, -world_rank, &halves);
  MPI_Comm_split(MPI_COMM_WORLD, world_rank == 0, world_rank, &lone);
  MPI_Comm comms[3] = {halves, lone, MPI_COMM_SELF};
  for (int c = 0; c < 3; ++c)
    for (int k = 0; k < 3; ++k)
      if (!quick || k == c)
        check_type(comms[c], &types[split_types[k]], split_counts, 3,
                   (1 << OP_SUM) | (1 << OP_MIN) | (1 << OP_BOR), nonblocking && k == 0);
  for (int round = 0; round < 3; ++round) {
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    check_type(dup, &types[4 + round], split_counts + 1, 2, (1 << OP_SUM), 0);
    MPI_Comm_free(&dup);
  }
  check_barrier(halves);
  MPI_Comm_free(&halves);
  MPI_Comm_free(&lone);

  /* MPI_Barrier on the world and on a fresh duplicate, where no MPI_Iallreduce has started
   * tcoll's engine (which keeps the collective area to itself: a barrier on the caller's
   * thread takes messages there) */
  check_barrier(MPI_COMM_WORLD);
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  check_barrier(dup);
  MPI_Comm_free(&dup);

  /* 4. What the preload leaves to MPI, and datatypes that differ between ranks. */
  check_fallbacks(MPI_COMM_WORLD);
  check_signatures(MPI_COMM_WORLD);
  check_v_signatures(MPI_COMM_WORLD);

#if MPI_VERSION >= 4
  /* 5. The large-count entry points: past the passthrough bound and below it. */
  large_count = 1;
  const size_t large_count_counts[] = {7, 20011};
  check_type(MPI_COMM_WORLD, &types[22], large_count_counts, 2, (1 << OP_SUM) | (1 << OP_MAX),
             nonblocking);
  check_type(MPI_COMM_WORLD, &types[4], large_count_counts, 2, (1 << OP_SUM) | (1 << OP_BOR), 0);
  large_count = 0;
#endif

  return NULL;
}

int main(int argc, char** argv) {
  quick = argc > 1 && strcmp(argv[1], "quick") == 0;
  /* the single-purpose modes, each at MPI_THREAD_MULTIPLE */
  const char* mode = argc > 1 ? argv[1] : "";
  if (strcmp(mode, "stall_nonblocking") == 0 || strcmp(mode, "comm_cycles") == 0 ||
      strcmp(mode, "free_pending") == 0 || strcmp(mode, "local_start") == 0 ||
      strcmp(mode, "stall_persistent") == 0 || strcmp(mode, "handle_reuse") == 0 ||
      strcmp(mode, "handle_reuse_v") == 0 || strcmp(mode, "nonblocking_others") == 0 ||
      strcmp(mode, "persistent_others") == 0 || strcmp(mode, "pack_race") == 0) {
    int provided = MPI_THREAD_SINGLE;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    if (strcmp(mode, "stall_nonblocking") == 0) return stall_nonblocking();
    if (strcmp(mode, "stall_persistent") == 0) {
#if HAVE_PERSISTENT
      return stall_persistent();
#else
      fprintf(stderr, "this MPI has no persistent allreduce\n");
      MPI_Finalize();
      return 1;
#endif
    }
    if (strcmp(mode, "comm_cycles") == 0) return comm_cycles(argc > 2 ? atoi(argv[2]) : 10000);
    if (strcmp(mode, "free_pending") == 0) return free_pending();
    if (strcmp(mode, "handle_reuse") == 0) return handle_reuse();
    if (strcmp(mode, "handle_reuse_v") == 0) return handle_reuse_v();
    if (strcmp(mode, "nonblocking_others") == 0) return nonblocking_others();
    if (strcmp(mode, "pack_race") == 0) {
      if (argc > 2) race_calls = atoi(argv[2]);
      return pack_race();
    }
    if (strcmp(mode, "persistent_others") == 0) {
#if HAVE_PERSISTENT
      persistent_mode = 1;
      return nonblocking_others();
#else
      fprintf(stderr, "this MPI has no persistent collectives\n");
      MPI_Finalize();
      return 1;
#endif
    }
    return local_start(argc > 2 && strcmp(argv[2], "barrier") == 0);
  }
  if (strcmp(mode, "announce_serialized") == 0) {
    int provided = MPI_THREAD_SINGLE;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    return announce_serialized();
  }
  if (argc > 1 && strncmp(argv[1], "stall", 5) == 0) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    return stall(strcmp(argv[1], "stall_first") == 0);
  }
  /* thread level: single (MPI_Init), funneled, serialized (the checks then run on a second
   * thread while the main thread waits: MPI called from a thread that is not the main one),
   * multiple (default) */
  const char* level_name = argc > 2 ? argv[2] : "multiple";
  const int single = strcmp(level_name, "single") == 0;
  const int level = strcmp(level_name, "funneled") == 0     ? MPI_THREAD_FUNNELED
                    : strcmp(level_name, "serialized") == 0 ? MPI_THREAD_SERIALIZED
                                                            : MPI_THREAD_MULTIPLE;
  int provided = MPI_THREAD_SINGLE;
  if (single)
    MPI_Init(&argc, &argv);
  else
    MPI_Init_thread(&argc, &argv, level, &provided);
  int P;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  if (!single && provided < level) {
    fprintf(stderr, "rank %d: MPI provides thread level %d, %d asked\n", world_rank, provided,
            level);
    ++errors;
  }
  probe_minmax();
  if (!single && level == MPI_THREAD_SERIALIZED) {
    pthread_t worker;
    if (pthread_create(&worker, NULL, run_checks, NULL) != 0) {
      fprintf(stderr, "rank %d: pthread_create failed\n", world_rank);
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
    pthread_join(worker, NULL);
  } else {
    run_checks(NULL);
  }

  printf("rank %d of %d: %ld checks, %d errors (thread level %d)\n", world_rank, P, checks, errors,
         single ? -1 : provided);
  fflush(stdout);
  MPI_Finalize();
  return errors ? 1 : 0;
}
