#pragma once
/// \file
/// Internals of `libtcoll_mpi.so`, the PMPI interposition library (see docs/preload.md):
/// the per-communicator state, the environment settings, the call counters and the
/// classification of MPI datatypes and ops. Every source file of the library includes this
/// header first.
#include <mpi.h>

// tcoll's own headers call MPI_Allreduce/MPI_Iallreduce (mpi_transport's native allreduce)
// and MPI_Bcast/MPI_Allreduce (shm_transport's setup). Inside this library those calls
// must reach MPI, not the wrappers below them (from any thread, the engine thread of a
// non-blocking collective included), so every function the library intercepts is renamed
// to its profiling entry point while tcoll's headers are read. Each wrapper file #undefs
// the names after its includes (see `TCOLL_PRELOAD_WRAPPERS`).
#define MPI_Allreduce PMPI_Allreduce
#define MPI_Iallreduce PMPI_Iallreduce
#define MPI_Reduce_scatter_block PMPI_Reduce_scatter_block
#define MPI_Allgather PMPI_Allgather
#define MPI_Reduce_scatter PMPI_Reduce_scatter
#define MPI_Allgatherv PMPI_Allgatherv
#define MPI_Alltoall PMPI_Alltoall
#define MPI_Gather PMPI_Gather
#define MPI_Scatter PMPI_Scatter
#define MPI_Alltoallv PMPI_Alltoallv
#define MPI_Gatherv PMPI_Gatherv
#define MPI_Scatterv PMPI_Scatterv
#define MPI_Bcast PMPI_Bcast
#define MPI_Reduce PMPI_Reduce
#define MPI_Barrier PMPI_Barrier
#define MPI_Finalize PMPI_Finalize
#define MPI_Request_free PMPI_Request_free
#define MPI_Start PMPI_Start
#define MPI_Startall PMPI_Startall
#define MPI_Ibcast PMPI_Ibcast
#define MPI_Ireduce PMPI_Ireduce
#define MPI_Iallgather PMPI_Iallgather
#define MPI_Ireduce_scatter_block PMPI_Ireduce_scatter_block
#define MPI_Ialltoall PMPI_Ialltoall
#define MPI_Igather PMPI_Igather
#define MPI_Iscatter PMPI_Iscatter
#define MPI_Ialltoallv PMPI_Ialltoallv
#define MPI_Igatherv PMPI_Igatherv
#define MPI_Iscatterv PMPI_Iscatterv
#define MPI_Ireduce_scatter PMPI_Ireduce_scatter
#define MPI_Iallgatherv PMPI_Iallgatherv
#define MPI_Ibarrier PMPI_Ibarrier

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <tcoll/algorithm/hierarchical.hpp>
#include <tcoll/algorithm/multi_ring.hpp>
#include <tcoll/algorithm/select.hpp>
#include <tcoll/collectives.hpp>
#include <tcoll/node_hierarchy.hpp>
#include <tcoll/schedule/collective_tasks.hpp>
#include <tcoll/transport/mpi.hpp>
#include <tcoll/transport/shm.hpp>

/// MPI-4's large-count entry points (`MPI_Allreduce_c`, ...; MPICH from 4.0, Open MPI from
/// 5.0) are intercepted too where the MPI has them: MPI-4 clients such as mpi4py 4 call them
/// for every collective, and would otherwise bypass tcoll altogether.
#if MPI_VERSION >= 4
#define TCOLL_PRELOAD_LARGE_COUNT 1
#else
#define TCOLL_PRELOAD_LARGE_COUNT 0
#endif

/// Persistent collectives: MPI-4's `MPI_<name>_init` (Open MPI from 5.0, which has them while
/// it still reports MPI_VERSION 3 and has no large-count functions), or Open MPI 4's
/// `MPIX_<name>_init` from its `pcollreq` extension where only that exists. Not on MPICH 4:
/// its MPI_Wait (4.0.2, ch4:ucx, MPI_THREAD_MULTIPLE) never returns for a receive that
/// another thread's message to the same process completes (MPI_Test sees it), which is how
/// tcoll's engine thread completes a persistent request (`persistent_collective`), so MPICH 4
/// runs its own; MPICH 5 fixed it.
#if (MPI_VERSION >= 4 || (defined(OMPI_MAJOR_VERSION) && OMPI_MAJOR_VERSION >= 5)) &&              \
    (!defined(MPICH_NUMVERSION) || MPICH_NUMVERSION >= 50000000)
#define TCOLL_PRELOAD_PERSISTENT 1
#elif defined(OPEN_MPI)
#include <mpi-ext.h>
#if defined(OMPI_HAVE_MPI_EXT_PCOLLREQ) && OMPI_HAVE_MPI_EXT_PCOLLREQ
#define TCOLL_PRELOAD_PERSISTENT 2
#endif
#endif
#ifndef TCOLL_PRELOAD_PERSISTENT
#define TCOLL_PRELOAD_PERSISTENT 0
#endif

/// Marks the symbols the library exports (everything else is hidden: a program that uses
/// tcoll's headers itself never shares inline functions with this library).
#define TCOLL_PRELOAD_EXPORT extern "C" __attribute__((visibility("default")))

namespace tcoll::preload {

/// The intercepted collectives (indices of the counters).
enum class coll : int {
  allreduce,
  reduce_scatter_block,
  allgather,
  bcast,
  reduce,
  iallreduce,
  barrier,        ///< MPI's own barrier; intercepted only to create a pending set-up
  allreduce_init, ///< MPI_Allreduce_init (MPIX_ on Open MPI 4), counted per MPI_Start
  reduce_scatter, ///< MPI_Reduce_scatter: as reduce_scatter_block where every block is equal
  allgatherv,     ///< MPI_Allgatherv: as allgather where the blocks are equal and in rank order
  alltoall,       ///< MPI_Alltoall
  gather,         ///< MPI_Gather
  scatter,        ///< MPI_Scatter
  alltoallv,      ///< MPI_Alltoallv: a count and a displacement per peer, on both sides
  gatherv,        ///< MPI_Gatherv
  scatterv,       ///< MPI_Scatterv
  // the non-blocking forms of the others (preload/nonblocking.cpp), decided like iallreduce
  ibcast,                ///< MPI_Ibcast
  ireduce,               ///< MPI_Ireduce
  iallgather,            ///< MPI_Iallgather
  ireduce_scatter_block, ///< MPI_Ireduce_scatter_block
  ialltoall,             ///< MPI_Ialltoall
  igather,               ///< MPI_Igather
  iscatter,              ///< MPI_Iscatter
  ialltoallv,            ///< MPI_Ialltoallv
  igatherv,              ///< MPI_Igatherv
  iscatterv,             ///< MPI_Iscatterv
  ireduce_scatter,       ///< MPI_Ireduce_scatter: as ireduce_scatter_block where blocks are equal
  iallgatherv,           ///< MPI_Iallgatherv: as iallgather where blocks are equal and in order
  ibarrier,              ///< MPI_Ibarrier
  // the persistent forms of the others (MPI-4's MPI_<name>_init, MPIX_ on Open MPI 4), decided
  // at the init call like their non-blocking form and counted per MPI_Start
  bcast_init,                ///< MPI_Bcast_init
  reduce_init,               ///< MPI_Reduce_init
  allgather_init,            ///< MPI_Allgather_init
  reduce_scatter_block_init, ///< MPI_Reduce_scatter_block_init
  alltoall_init,             ///< MPI_Alltoall_init
  gather_init,               ///< MPI_Gather_init
  scatter_init,              ///< MPI_Scatter_init
  alltoallv_init,            ///< MPI_Alltoallv_init
  gatherv_init,              ///< MPI_Gatherv_init
  scatterv_init,             ///< MPI_Scatterv_init
  reduce_scatter_init, ///< MPI_Reduce_scatter_init: as reduce_scatter_block_init where blocks are
                       ///< equal
  allgatherv_init, ///< MPI_Allgatherv_init: as allgather_init where blocks are equal and in order
  barrier_init,    ///< MPI_Barrier_init
};
inline constexpr int coll_count = 42;
/// "MPI_Allreduce", ...
const char* coll_name(coll c) noexcept;

/// Why a call went to `PMPI_*` instead of tcoll (indices of the fallback counters).
enum class fallback : int {
  user_op,         ///< an op made by MPI_Op_create
  op_type,         ///< a predefined op tcoll does not run on this type (MAXLOC, logical on float)
  datatype,        ///< a derived datatype, or a predefined one tcoll does not reduce
  intercomm,       ///< an intercommunicator
  thread_level,    ///< MPI_Iallreduce below MPI_THREAD_MULTIPLE (tcoll's engine is a thread)
  arguments,       ///< arguments MPI itself should judge (negative count, bad root, MPI_BOTTOM,
                   ///< different send and receive types)
  not_initialized, ///< called before MPI_Init or after MPI_Finalize
  not_set_up,    ///< MPI_Iallreduce on a communicator whose tcoll state no blocking collective has
                 ///< created yet: creating it is a collective step, and MPI starts a
                 ///< non-blocking collective locally (the next blocking collective creates it)
  no_spare_core, ///< MPI_Iallreduce or MPI_Allreduce_init where some rank may run on one CPU
                 ///< only (bound to a core) or a node has fewer than two CPUs per rank:
                 ///< tcoll's engine thread would share a core with a thread polling in
                 ///< MPI_Wait (no TCOLL_ALLREDUCE_ALGO rule covering the size)
};
inline constexpr int fallback_count = 9;
/// "user-defined op", ...
const char* fallback_name(fallback f) noexcept;

/// The table's algorithms name what runs a call (algorithm/table.hpp); the wrappers
/// outside this namespace see the name through `using namespace tcoll::preload`.
using tcoll::algorithm_id;
using tcoll::collective;

/// The collective of the table (core/collective_table.hpp) that an intercepted call is:
/// its selection variable, the algorithms a rule may name and what its size counts.
constexpr collective collective_of(coll c) noexcept {
  switch (c) {
  case coll::allreduce:
  case coll::iallreduce:
  case coll::allreduce_init:
    return collective::allreduce;
  case coll::reduce_scatter_block:
  case coll::reduce_scatter:
  case coll::ireduce_scatter_block:
  case coll::ireduce_scatter:
  case coll::reduce_scatter_block_init:
  case coll::reduce_scatter_init:
    return collective::reduce_scatter;
  case coll::allgather:
  case coll::allgatherv:
  case coll::iallgather:
  case coll::iallgatherv:
  case coll::allgather_init:
  case coll::allgatherv_init:
    return collective::allgather;
  case coll::bcast:
  case coll::ibcast:
  case coll::bcast_init:
    return collective::broadcast;
  case coll::reduce:
  case coll::ireduce:
  case coll::reduce_init:
    return collective::reduce;
  case coll::barrier:
  case coll::ibarrier:
  case coll::barrier_init:
    return collective::barrier;
  case coll::alltoall:
  case coll::ialltoall:
  case coll::alltoall_init:
    return collective::alltoall;
  case coll::gather:
  case coll::igather:
  case coll::gather_init:
    return collective::gather;
  case coll::scatter:
  case coll::iscatter:
  case coll::scatter_init:
    return collective::scatter;
  case coll::alltoallv:
  case coll::ialltoallv:
  case coll::alltoallv_init:
    return collective::alltoallv;
  case coll::gatherv:
  case coll::igatherv:
  case coll::gatherv_init:
    return collective::gatherv;
  case coll::scatterv:
  case coll::iscatterv:
  case coll::scatterv_init:
    return collective::scatterv;
  }
  return collective::allreduce;
}

/// Which MPI's collectives the built-in choice below was measured against: MPICH's small
/// allreduce and its MPI_Reduce from 64 KiB are slower than tcoll's over shared memory
/// (docs/benchmarks.md, "Against MPICH and Open MPI at their defaults"), Open MPI's are not.
/// A build against the MPI-5 standard ABI (`MPI_ABI`) learns it at run time from the library
/// it runs under (`MPI_Get_library_version`, which MPI allows before MPI_Init).
#if defined(MPICH_VERSION)
inline bool builtin_for_mpich() {
  return true;
}
#elif defined(MPI_ABI)
inline bool builtin_for_mpich() {
  static const bool mpich = [] {
    char version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
    int length = 0;
    PMPI_Get_library_version(version, &length);
    return std::string_view(version, static_cast<std::size_t>(length)).find("MPICH") !=
           std::string_view::npos;
  }();
  return mpich;
}
#else
inline bool builtin_for_mpich() {
  return false;
}
#endif

/// The settings read from the environment once per process (see docs/preload.md).
struct settings {
  /// The selection variable of each collective (`collective_description::selection_variable`,
  /// parsed by `parse_selection`); the non-blocking and persistent forms share their
  /// blocking form's, the uneven-count forms their even-count collective's.
  std::vector<size_rule> rules[coll_count];
  int debug = 0; ///< TCOLL_DEBUG: 0, 1 (rank 0's summary) or 2 (every rank's, every call)
  std::chrono::milliseconds timeout{}; ///< TCOLL_TIMEOUT (seconds)
  /// TCOLL_SHM (0 or 1, default 1): a communicator whose ranks all share one node runs
  /// MPI_Allreduce's tcoll algorithms over `shm_transport` instead of MPI point-to-point.
  bool shm = true;
  /// Messages up to this size run MPI's own collective unless a rule says otherwise
  /// (automatic::native_below_bytes, 16 KiB).
  std::size_t native_below_bytes = 16 * 1024;
  /// The built-in choice for `MPI_Allreduce` on a communicator in shared memory: MPI's own
  /// collective below `shm_native_below_bytes`, then tcoll's shared-memory choice
  /// (`shared_memory_choice`, algorithm/select.hpp: the same one `automatic` makes on
  /// shm_transport). 0 against both MPIs since the in-segment allreduce: it is 2.3-2.7x
  /// Open MPI 4.1's own at 8 B under the preload with cold buffers, where recursive doubling
  /// over messages lost (0.75x; docs/benchmarks.md). Not set from the environment:
  /// TCOLL_ALLREDUCE_ALGO overrides it.
  std::size_t shm_native_below_bytes = 0;
  shared_memory_choice shm_choice{};
  /// The built-in choice of the other collectives on such a communicator (sizes as each
  /// collective counts them, docs/preload.md), measured over shared memory against Open MPI
  /// 4.1 with cross-memory attach and against MPICH 4.0 (docs/benchmarks.md, "Against MPICH
  /// and Open MPI at their defaults", and "Earlier preload tables"): tcoll's algorithm in these
  /// ranges, MPI's own elsewhere. Not set from the environment: a TCOLL_*_ALGO rule overrides them.
  /// MPI_Bcast and MPI_Reduce: tcoll from these (every call that moves data), in the
  /// collective area first (`shm_choice.choose_broadcast`, `choose_reduce`). From 1 B to
  /// 256 B under IMB's `-off_cache` the area was 1.1-1.3x Open MPI 4.1.4's bcast and 1.1-1.4x
  /// its reduce on 2 ranks where handing them to Open MPI read 0.81-1.25x, and 1.1-1.7x /
  /// 2.6-3.3x MPICH 4.0.2's where handing them over read 0.72-0.89x / 1.1-1.2x (after tcoll's
  /// barrier, IMB times MPI's own small bcast slower); the reduce 2.0-2.4x on 4 ranks sharing
  /// 2 CPUs (docs/benchmarks.md, "Small bcast and reduce in the area"). 512 B until then.
  std::size_t shm_bcast_from_bytes = 1;
  /// MPI_Reduce: in the area in `shm_choice.choose_reduce`'s range (on 2 ranks with a CPU
  /// each every size, in pieces; else to 32 KiB on 2 ranks, 64 KiB on more), then the
  /// binomial tree up to `shm_reduce_up_to_bytes`
  std::size_t shm_reduce_from_bytes = 1;
  std::size_t shm_reduce_up_to_bytes =
      builtin_for_mpich() ? std::numeric_limits<std::size_t>::max() : 32 * 1024;
  /// On 2 ranks that share CPUs: tcoll's MPI_Bcast and MPI_Reduce up to these (the
  /// collective area, then the binomial tree), MPI's own above; with a CPU each, the area's
  /// broadcast and reduce in pieces run every size (`shm_choice.choose_broadcast`,
  /// `choose_reduce`). Open MPI 4.1's cross-memory attach moves a cold buffer in one copy:
  /// under IMB's `-off_cache` both the area's two copies in one piece and the tree lost to
  /// it at 16 and 32 KiB (0.56-0.84x; docs/benchmarks.md, "IMB under the preload, on every
  /// MPI"), and above that the tree only tied it. In pieces, under the same IMB, the
  /// broadcast was 1.6-2.4x Open MPI's and the reduce 1.5-3.0x from 16 KiB to 4 MiB, the
  /// reduce 0.5-1.25x in the test VM's slow state (docs/benchmarks.md, "The broadcast in
  /// pieces", "The reduce in pieces"). Against MPICH: no bound.
  std::size_t shm_bcast_two_up_to_bytes =
      builtin_for_mpich() ? std::numeric_limits<std::size_t>::max() : 8 * 1024;
  std::size_t shm_reduce_two_up_to_bytes =
      builtin_for_mpich() ? std::numeric_limits<std::size_t>::max() : 8 * 1024;
  /// MPI_Allgather on more than 2 ranks: the collective area in `shm_choice.choose_allgather`'s
  /// range (to 64 KiB), the ring from here above it. MPI_Allgatherv: the ring from here on
  /// more than 2 ranks.
  std::size_t shm_allgather_from_bytes = 8 * 1024;
  /// MPI_Allgather on 2 ranks: the collective area up to this (all gathered bytes), MPI's own
  /// above. Under IMB's `-off_cache` the area was 0.95-3.7x Open MPI 4.1.4's and 5.0.11's,
  /// 1.2-2.4x MPICH 4.0.2's and 2.1-8.5x MPICH 5's from 1 B to 16 KiB blocks, and 1.0-1.2x
  /// Open MPI's at 32 KiB; with hot buffers 1.1-2.1x Open MPI's up to 16 KiB of output and
  /// 0.87x at 64 KiB (docs/benchmarks.md, "MPI_Allgather on 2 ranks").
  std::size_t shm_allgather_two_up_to_bytes = 32 * 1024;
  /// MPI_Reduce_scatter_block: the collective area in `shm_choice.choose_reduce_scatter`'s
  /// range (every size by default), else the ring from these; MPI_Reduce_scatter (uneven
  /// blocks): the ring from these.
  std::size_t shm_reduce_scatter_two_from_bytes = 1024; ///< on 2 ranks
  std::size_t shm_reduce_scatter_from_bytes = 8 * 1024; ///< on more than 2 ranks
  /// tcoll's all-to-all (`alltoall_by_size`: the collective area, then the pairwise exchange)
  /// from these up to the `_up_to_` ones, one rank's whole send buffer; MPI's own elsewhere,
  /// and always over MPI point-to-point, where tcoll's exchange is slower than Open MPI's
  /// collective (docs/benchmarks.md, "alltoall_perf", "The in-segment all-to-all" and
  /// "MPI_Alltoall under the preload"). On 2 ranks the area is 1.2-1.9x Open MPI's at every
  /// size from 8 B; on 4, which oversubscribe the 2-core VM, 0.88-0.99x below 4 KiB.
  std::size_t shm_alltoall_two_from_bytes = 1;          ///< on 2 ranks
  std::size_t shm_alltoall_from_bytes = 4 * 1024;       ///< on more
  std::size_t shm_alltoall_two_up_to_bytes = 64 * 1024; ///< on 2 ranks
  std::size_t shm_alltoall_up_to_bytes = 64 * 1024;     ///< on more
  /// Within those, the library's choice (`alltoall_by_size` without its rules: a
  /// TCOLL_ALLTOALL_ALGO rule is the preload's own): the collective area on 2 ranks up to
  /// 32 KiB (with cold buffers, IMB -off_cache, the area was 1.3-1.8x Open MPI's at 16-32 KiB
  /// where the exchange's single copy gave 0.94-1.13x; at 64 KiB warm it lost, 0.75x), the
  /// pairwise exchange above.
  tcoll::alltoall_by_size shm_alltoall_choice{.rules = {}};
  /// tcoll's linear gather and scatter from `shm_*_from_bytes` up to these, the root's whole
  /// buffer (P blocks); MPI's own elsewhere, and always over MPI point-to-point. Measured on
  /// one node against Open MPI 4.1.4 (docs/benchmarks.md, "MPI_Gather and MPI_Scatter under
  /// the preload"): MPI's is faster below 1 KiB, tcoll's 1.0-3.6x from 1 KiB to the bounds,
  /// and above them the two alternate from run to run. The 2-rank scatter bound rose from
  /// 16 to 64 KiB with single copy for plain receives (`isend_for_irecv`), as did the
  /// all-to-all's from 32 KiB.
  std::size_t shm_gather_from_bytes = 1024;
  std::size_t shm_gather_two_up_to_bytes = 32 * 1024; ///< on 2 ranks
  std::size_t shm_gather_up_to_bytes = 128 * 1024;    ///< on more
  std::size_t shm_scatter_from_bytes = 1024;
  std::size_t shm_scatter_two_up_to_bytes = 64 * 1024; ///< on 2 ranks
  std::size_t shm_scatter_up_to_bytes = 128 * 1024;    ///< on more
  /// The built-in choice of the uneven forms on such a communicator: tcoll's algorithm
  /// (linear for MPI_Gatherv and MPI_Scatterv) where true, MPI's own where false. One choice
  /// for every size, since each rank knows only its own blocks (`per_rank_size`); always
  /// MPI's over MPI point-to-point. Measured on one node against Open MPI 4.1.4, 2 and 4
  /// ranks, 256 B-1 MiB (docs/benchmarks.md, "MPI_Alltoallv, MPI_Gatherv and MPI_Scatterv
  /// under the preload"): tcoll's gatherv and scatterv 1.0-6.3x from 1 KiB but for one size
  /// each on 2 ranks (0.58x, 0.98x), 0.17-0.76x below 1 KiB (up to 2.3 us more); tcoll's
  /// alltoallv 0.50-0.68x at four of seven sizes on 4 ranks, so MPI's.
  bool shm_alltoallv = false;
  bool shm_gatherv = true;
  bool shm_scatterv = true;
  /// MPI_Barrier on such a communicator: tcoll's in-segment barrier where true.
  bool shm_barrier = true;
  std::string error; ///< non-empty: the environment is invalid and every call fails with it
};
/// Reads and checks the settings from the environment (`config` keeps them).
settings load_settings();
/// The settings once `config` has read them (null before): every wrapper asks several times
/// per call, so the common path is one load, inlined (a function-local static was an
/// out-of-line call with a guard check at each ask, 10% of a passed-through call).
inline std::atomic<const settings*> loaded_settings{nullptr};
/// `config`'s first call: reads the settings (thread-safe) and publishes them.
const settings& load_config();
/// The settings, parsed on first use (thread-safe).
inline const settings& config() {
  if (const settings* s = loaded_settings.load(std::memory_order_acquire)) [[likely]]
    return *s;
  return load_config();
}

/// Are the sizes of collective `c`'s calls per rank, not shared (MPI_Alltoallv,
/// MPI_Gatherv, MPI_Scatterv: each rank knows its own blocks only, and at the root of a
/// gatherv or scatterv every block), or is there no size at all (MPI_Barrier, MPI_Ibarrier)?
/// Its route is then chosen without a size: a rule of its selection variable covers 0-max
/// (checked when the settings are read), and the built-in choice is one for every size.
constexpr bool per_rank_size(coll c) noexcept {
  return c == coll::alltoallv || c == coll::gatherv || c == coll::scatterv ||
         c == coll::ialltoallv || c == coll::igatherv || c == coll::iscatterv ||
         c == coll::barrier || c == coll::ibarrier || c == coll::alltoallv_init ||
         c == coll::gatherv_init || c == coll::scatterv_init || c == coll::barrier_init;
}

/// The algorithm for a call of collective `c` moving `bytes` (more than none; see
/// docs/preload.md for what the size of each collective is): the first matching rule, else
/// the built-in choice. For a collective of `per_rank_size`, `bytes` is not looked at.
algorithm_id choose(coll c, std::size_t bytes);
/// Does a rule of the environment cover a call of collective `c` moving `bytes`?
bool chosen_by_rule(coll c, std::size_t bytes);
/// The built-in choice for `MPI_Allreduce` of `bytes` on `ranks` ranks over shared memory
/// (see `settings`).
algorithm_id choose_shared_memory(std::size_t bytes, int ranks);
/// What a blocking call of `c` on `comm` chosen for the collective area (`in_segment`) runs
/// on this thread: the area where the communicator's shared-memory transport may use it
/// here, else what the library runs in its place (recursive doubling, the binomial tree,
/// the ring) or, for MPI_Barrier, MPI's own barrier. The area is off the caller's thread
/// once the communicator has an engine (an MPI_Iallreduce made it: docs/shm.md), which
/// every rank has from the same call on, so every rank decides alike; the summary then
/// names what ran. Collective on the communicator's first call (it may create the state).
algorithm_id in_segment_here(coll c, MPI_Comm comm);

/// The calls that ran through tcoll (or passthrough), and those that fell back to `PMPI_*`:
/// always kept (tcoll_mpi_counts); the tables by collective only under TCOLL_DEBUG.
inline std::atomic<unsigned long long> through_total{0}, fallback_total{0};
/// Adds one without a locked read-modify-write (the common call's single largest cost in
/// the wrapper): calls that race on two threads may count once. The totals are a report.
inline void bump(std::atomic<unsigned long long>& total) {
  total.store(total.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}
/// The TCOLL_DEBUG part of `count_call`, `count_empty_call` and `count_fallback`: out of
/// line, so that the common call (TCOLL_DEBUG unset) pays a store and a test, inlined.
void count_call_debug(coll c, algorithm_id a, std::size_t bytes, MPI_Comm comm);
int count_empty_call_debug(coll c, MPI_Comm comm);
void count_fallback_debug(coll c, fallback why);

/// Counts a call that ran through tcoll (or passthrough) and, at TCOLL_DEBUG=2, prints it.
[[gnu::always_inline]] inline void count_call(coll c, algorithm_id a, std::size_t bytes,
                                              MPI_Comm comm) {
  bump(through_total);
  if (config().debug != 0) [[unlikely]]
    count_call_debug(c, a, bytes, comm);
}
/// Counts a call that moves nothing (a count of 0: MPI runs it) and, at TCOLL_DEBUG=2,
/// prints it; returns MPI_SUCCESS.
[[gnu::always_inline]] inline int count_empty_call(coll c, MPI_Comm comm) {
  bump(through_total);
  if (config().debug != 0) [[unlikely]]
    return count_empty_call_debug(c, comm);
  return MPI_SUCCESS;
}
/// The rank of this process in `comm` and its size, as the wrappers ask them (once per
/// process on the world, from `facts_of` elsewhere).
int comm_rank(MPI_Comm comm);
int comm_size(MPI_Comm comm);
/// The built-in choice for a blocking call of collective `c` (not allreduce) moving `bytes`
/// on `P` ranks that share one node (collectives.cpp).
algorithm_id shm_collective_choice(coll c, std::size_t bytes, int P);

/// Counts a call of collective `c` that ran over the shared-memory transport.
void count_shared_memory(coll c);
/// Counts a call that fell back to `PMPI_*` and, at TCOLL_DEBUG=2, prints it.
[[gnu::always_inline]] inline void count_fallback(coll c, fallback why) {
  bump(fallback_total);
  if (config().debug != 0) [[unlikely]]
    count_fallback_debug(c, why);
}
/// Counts a call of collective `c` in which this rank packed a derived or non-contiguous
/// datatype into contiguous bytes (or unpacked them) around tcoll's collective.
void count_packed(coll c);
/// Counts a call of collective `c` made through its MPI-4 large-count entry point (`_c`) that
/// tcoll ran (`a` not passthrough). `Count` is the wrappers' count type: nothing to do for
/// int.
void count_large_count(coll c);
template <class Count>
void count_entry_point(coll c, algorithm_id a) {
  if constexpr (!std::is_same_v<Count, int>)
    if (a != algorithm_id::passthrough) count_large_count(c);
}

/// tcoll's state of one user communicator, kept as an attribute of it and freed with it.
/// Transports are created on first need: that is a collective step (MPI_Comm_dup), which
/// every rank reaches at the same call because the choice of algorithm is made from the
/// arguments all ranks share.
struct comm_state {
  MPI_Comm user = MPI_COMM_NULL; ///< the user's handle (Finalize deletes the attribute on it)
  int rank = 0;
  int size = 1;
  std::unique_ptr<mpi_transport> flat;  ///< duplicate of the user's communicator
  std::unique_ptr<mpi_transport> intra; ///< ranks of this node (hierarchical)
  std::unique_ptr<mpi_transport> inter; ///< ranks of this node index on every node
  std::unique_ptr<hierarchical<mpi_transport, mpi_transport>> hier;
  std::unique_ptr<shm_transport> node; ///< the whole communicator in shared memory (one node)
  std::unique_ptr<mpi_node_hierarchy> node_hier; ///< hierarchical with shared memory inside
  bool node_checked = false;
  /// Every rank of the communicator may run on more than one CPU (its affinity mask) and
  /// every node has at least two CPUs per rank of it, so tcoll's engine thread need not
  /// share a core with a thread polling in MPI_Wait; agreed collectively when the transports
  /// are created (`agree_engine_core`).
  bool engine_core = false;
  bool engine_core_known = false;
  std::vector<std::byte> scratch; ///< in-place reduce_scatter_block copies its input here
  /// What a non-blocking call found missing (`setup_flat`, `setup_hierarchy`), for the next
  /// blocking collective on the communicator to create (`settle`).
  unsigned pending_setup = 0;
  static constexpr unsigned setup_flat = 1;      ///< node check, then shm or flat transport
  static constexpr unsigned setup_hierarchy = 2; ///< the two-level machine

  comm_state() = default;
  comm_state(const comm_state&) = delete;
  comm_state& operator=(const comm_state&) = delete;
  /// MPI_Comm_free lets pending operations complete: waits (each collective bounded by
  /// TCOLL_TIMEOUT) for every MPI_Iallreduce still queued on the communicator's engines,
  /// then stops the engines before the transports and machines they use go.
  ~comm_state();

  /// Agrees on `engine_core` (a one-int PMPI_Allreduce on the user's communicator; the
  /// ranks on this node are counted with PMPI_Comm_split_type unless `local_size` says).
  /// Collective: called where a transport is created, which every rank does at the same call.
  void agree_engine_core(int local_size = 0);
  /// Records set-up for the next blocking collective to create (see `pending_setup`).
  void want_setup(unsigned what);
  /// Creates what `want_setup` recorded. Collective: called by every blocking collective
  /// wrapper on the communicator, which every rank reaches in the same order.
  void settle();

  /// The flat transport over the whole communicator (created on first call).
  mpi_transport& transport();
  /// The communicator's ranks through shared memory, or null where they span several nodes
  /// or TCOLL_SHM=0 (decided and created on the first call, collectively).
  shm_transport* shared_memory();
  /// The two-level machine with MPI inside the nodes (TCOLL_SHM=0): shared-memory groups
  /// (MPI_COMM_TYPE_SHARED) joined across nodes by local index (created on first call).
  hierarchical<mpi_transport, mpi_transport>& hierarchy();
  /// The same machine with `shm_transport` inside each node (`mpi_node_hierarchy`, the
  /// default pairing), or null when TCOLL_SHM=0 (created on first call, collectively).
  hierarchical<shm_transport, mpi_transport>* shm_hierarchy();
  /// Runs `f(machine)` on the communicator's two-level machine: shared memory inside the
  /// nodes unless TCOLL_SHM=0. Returns whether it was the shared-memory one.
  template <class F>
  bool on_hierarchy(F&& f) {
    if (auto* h = shm_hierarchy()) {
      f(*h);
      return true;
    }
    f(hierarchy());
    return false;
  }
  /// `bytes` of scratch space (grows, never shrinks).
  std::byte* scratch_bytes(std::size_t bytes);
};

/// The state of an intracommunicator, created on first use. Throws on MPI errors.
/// Remembered per thread (`facts_of`), so a repeated call pays no attribute lookup.
comm_state& state_of(MPI_Comm comm);

/// Bumped whenever a communicator the wrappers may remember (`facts_of`, the prologue's
/// `passthrough_memo`) is freed, or its state is: MPI reuses a freed communicator's handle,
/// so a remembered handle is trusted only in the generation it was remembered in.
inline std::atomic<unsigned long long> comm_generation{0};

/// What the wrappers ask of a communicator on every call.
struct comm_facts {
  int rank = 0;
  int size = 0;
  bool inter = false; ///< an intercommunicator (`rank` and `size` are of its local group)
};
/// The facts of `comm` (not MPI_COMM_NULL), remembered per thread for the last few
/// communicators asked about until any remembered one is freed (three queries a call were a
/// fifth of a passed-through call's cost on a duplicated communicator). Local.
comm_facts facts_of(MPI_Comm comm);
/// Will freeing `comm` bump `comm_generation`? True for the predefined communicators (never
/// freed) and those `facts_of` remembers on this thread (their attribute's delete callback
/// bumps it).
bool freeing_is_seen(MPI_Comm comm);

/// Communicators with set-up pending (`comm_state::pending_setup`): the blocking wrappers
/// look further only while this is non-zero, so the common call pays one relaxed load.
inline std::atomic<int> pending_setups{0};
/// `settle_pending_setup`'s slow path: settles `comm`'s state, if it has any.
int settle_pending_setup_slow(coll c, MPI_Comm comm);
/// Called by every blocking collective wrapper on `comm` before it decides its path: creates
/// the set-up a non-blocking call found missing. MPI_SUCCESS, or the reported error's code.
inline int settle_pending_setup(coll c, MPI_Comm comm) {
  if (pending_setups.load(std::memory_order_relaxed) == 0) return MPI_SUCCESS;
  return settle_pending_setup_slow(c, comm);
}

/// 0: not known to be initialised yet, 1: initialised, 2: MPI_Finalize was called. Once
/// MPI is up only the MPI_Finalize wrapper changes it, so the wrappers skip
/// MPI_Initialized/MPI_Finalized (a mutex each in Open MPI) on every call.
inline std::atomic<int> mpi_state{0};
/// `mpi_active` while the state is not known yet: asks MPI.
bool mpi_active_slow() noexcept;
/// Is MPI usable now (initialised, not finalised)?
inline bool mpi_active() noexcept {
  const int known = mpi_state.load(std::memory_order_acquire);
  if (known != 0) [[likely]]
    return known == 1;
  return mpi_active_slow();
}

/// Prints a failure of a tcoll call on this rank (always, whatever TCOLL_DEBUG says).
void print_error(coll c, const std::string& what);
/// Reports a failure of a tcoll call on `comm`: prints it (every rank, always), then calls
/// the communicator's error handler with `code`, whose return value is passed back.
int report_error(coll c, MPI_Comm comm, int code, const std::string& what);
/// The error path of an invalid environment: report_error with MPI_ERR_ARG.
int report_settings_error(coll c, MPI_Comm comm);

/// The element kind `op` reduces for `type`, or why it cannot (op_type, datatype, user_op).
/// Signed integers appear only for min and max: sum, prod and the bitwise and logical ops
/// give the same bits on the unsigned type of the same size.
struct reduction {
  scalar_type type = scalar_type::uint8;
  reduce_kind op = reduce_kind::sum;
  std::size_t size = 0; ///< bytes per element; 0 where tcoll does not run it
  fallback why = fallback::datatype;
  bool ok() const noexcept { return size != 0; }
};
reduction classify_reduction(MPI_Datatype type, MPI_Op op);
/// Bytes per element of a predefined, contiguous datatype (data movement), or 0.
std::size_t contiguous_size(MPI_Datatype type);
/// Do `count` elements of up to 16 bytes, `blocks` times over, make a byte count tcoll can
/// hold? False for a negative count or one whose bytes overflow (reachable through the
/// large-count calls); MPI then judges the call itself.
inline bool count_fits(long long count, long long blocks = 1) {
  long long bytes = 0;
  return count >= 0 && blocks >= 0 && !__builtin_mul_overflow(count, 16 * blocks, &bytes);
}
/// Bytes of the type signature of `count` elements of `type` (`MPI_Type_size_x`): what every
/// rank of a matching call shares whatever datatype each uses, so path decisions are made
/// from it. -1 for a datatype MPI rejects.
long long signature_bytes(long long count, MPI_Datatype type);
/// Copies `count` elements of any datatype at `buf` into `bytes` contiguous bytes at `out`,
/// in type-map order (the bytes a contiguous peer of a matching call holds), through MPI's
/// own datatype engine: a send of `type` received as MPI_BYTE on a private duplicate of
/// MPI_COMM_SELF. That assumes, like every byte-moving path of the preload, a homogeneous
/// MPI that does not convert data (Open MPI and MPICH on one architecture).
void pack_local(const void* buf, long long count, MPI_Datatype type, std::byte* out,
                std::size_t bytes);
/// The inverse of `pack_local`: `bytes` contiguous bytes at `in` into `count` elements of
/// `type` at `buf`.
void unpack_local(const std::byte* in, std::size_t bytes, void* buf, long long count,
                  MPI_Datatype type);
/// Is `comm` an intercommunicator? (false for MPI_COMM_NULL: MPI reports that itself)
bool is_intercomm(MPI_Comm comm);

/// One persistent collective that tcoll runs (`MPI_Allreduce_init`, `MPI_Bcast_init`, ...; made
/// by `init_persistent`, preload/nonblocking.hpp). The request the user holds is MPI's own: a
/// persistent zero-byte receive on a private duplicate of MPI_COMM_SELF. `MPI_Start` activates that
/// receive and queues `run` on the communicator's engine; the engine thread completes it with a
/// message to itself when the collective has finished (`finish_persistent`). So MPI_Wait, MPI_Test
/// and their array forms, mixed with any other requests, and MPI_Start again all behave as MPI's,
/// with no wrapper on them.
struct persistent_collective {
  coll c = coll::allreduce_init;
  MPI_Comm comm = MPI_COMM_NULL;
  comm_state* state = nullptr; ///< null once the communicator was freed
  algorithm_id algorithm = algorithm_id::ring;
  std::size_t bytes = 0;
  MPI_Request handle = MPI_REQUEST_NULL; ///< the user's request
  int tag = 0;                           ///< of its completion message
  bool running = false; ///< started, its completion message not yet sent (registry lock)
  bool freed = false;   ///< MPI_Request_free came while running: freed when it finishes
  /// Queues one run whose completion calls `finish_persistent(*this, error)`; throws where
  /// nothing was queued.
  std::function<void(persistent_collective&)> run;
};
/// Makes `p` a persistent request of the user's: its receive, registered for MPI_Start.
/// MPI_SUCCESS or MPI's error code.
int make_persistent(std::unique_ptr<persistent_collective> p, MPI_Request* request);
/// Completes one run of `p` (on the engine thread): a message of zero bytes, or, where the
/// run failed, of one int, which MPI reports at MPI_Wait as a truncation error
/// (MPI_ERR_TRUNCATE) after tcoll has printed the failure.
void finish_persistent(persistent_collective& p, bool failed) noexcept;
/// The communicator of `s` is being freed: its persistent collectives can no longer start.
void orphan_persistent(const comm_state* s) noexcept;

/// Calls `f.template operator()<E>(op)` with the raw element of `r`'s size and the
/// `runtime_op` of `r` (a reduction classify_reduction accepted): every algorithm is
/// instantiated once per element size, and the reduction runs its (type, op) kernel.
template <class F>
decltype(auto) dispatch(const reduction& r, F&& f) {
  const runtime_op op(r.type, r.op);
  return visit_element_size(
      r.size, [&]<class E>(type_tag<E>) -> decltype(auto) { return f.template operator()<E>(op); });
}

} // namespace tcoll::preload
