/// \file
/// libtcoll_mpi.so: MPI_Ibcast, MPI_Ireduce, MPI_Iallgather, MPI_Ireduce_scatter_block,
/// MPI_Ialltoall, MPI_Igather, MPI_Iscatter, MPI_Ialltoallv, MPI_Igatherv, MPI_Iscatterv,
/// MPI_Ireduce_scatter, MPI_Iallgatherv (and their `_c` forms) and MPI_Ibarrier through tcoll's
/// engine thread, under MPI_Iallreduce's rules (preload/nonblocking.hpp): the start is local,
/// its path is decided from what every rank shares (the signature bytes, the rules, the state
/// blocking calls created; no size for the uneven forms and the barrier), MPI runs everything
/// else. The engine completes a generalized request when the data is in place. A rank whose
/// datatypes are derived or not contiguous packs its send side at the start (a start may read
/// the send buffer) and unpacks its receive side on the engine thread, before the request
/// completes, through a duplicate of its datatype (the user may free theirs).
#include "nonblocking.hpp"
#include "equal_blocks.hpp"
#include "prologue.hpp"
#include "tcoll_mpi.hpp"
#include "v_blocks.hpp"

#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include <tcoll/algorithm/visit.hpp>

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

using namespace tcoll::preload;

namespace {

using byte = unsigned char;

/// Queues `body(communicator, tags, algorithm)` of collective `C` with algorithm `a` (not
/// passthrough) on the engine of `s`: over its two-level machine for `hierarchical` (which
/// runs its own form whatever object it gets: the table's first), else over its
/// shared-memory transport where it has one, else over MPI; `done(error)` runs on the engine
/// thread once it is over. Throws where nothing was queued.
template <collective C, class Body, class Done>
void queue_on_path(coll c, comm_state& s, algorithm_id a, Body body, Done done) {
  const algorithm_id id =
      a == algorithm_id::hierarchical ? tcoll::algorithms_of(C).front() : a;
  auto queue = [&](auto& on) {
    tcoll::queue_collective(
        on,
        [&on, id, body](const auto& tags) {
          tcoll::visit_algorithm<C>(id, [&](const auto& algo) { body(on, tags, algo); });
        },
        done);
  };
  if (a == algorithm_id::hierarchical) {
    if (s.on_hierarchy(queue)) count_shared_memory(c);
  } else if (tcoll::shm_transport* node = s.shared_memory()) {
    count_shared_memory(c);
    queue(*node);
  } else {
    queue(s.transport());
  }
}

/// A private duplicate of a user's datatype, for the engine thread to unpack with after the
/// user may have freed theirs; freed with the last copy of the holder.
struct datatype_copy {
  MPI_Datatype type = MPI_DATATYPE_NULL;
  explicit datatype_copy(MPI_Datatype user) {
    if (PMPI_Type_dup(user, &type) != MPI_SUCCESS)
      throw tcoll::invalid_argument("PMPI_Type_dup of the receive datatype failed");
  }
  datatype_copy(const datatype_copy&) = delete;
  datatype_copy& operator=(const datatype_copy&) = delete;
  ~datatype_copy() {
    if (type != MPI_DATATYPE_NULL) PMPI_Type_free(&type);
  }
};

/// Contiguous bytes that stand in for a derived or non-contiguous buffer of a call in flight,
/// and the datatype to unpack them with; shared by the queued body and nothing else.
struct staging {
  std::vector<std::byte> bytes;
  std::unique_ptr<datatype_copy> unpack_as;
};

/// What the engine thread unpacks a packed receive side of an uneven call with, after the
/// start has returned: copies of the counts and displacements and a duplicate of the datatype
/// (the user may reuse or free theirs). Empty where the side is the user's buffer itself.
template <class Count, class Displ>
struct unpack_plan {
  std::vector<Count> counts;
  std::vector<Displ> displs;
  std::unique_ptr<datatype_copy> as;
  /// Keeps `counts`, `displs` and `type` of `P` blocks where `side` is packed.
  void keep(const v_side& side, const Count* c, const Displ* d, MPI_Datatype type, int P) {
    if (side.direct) return;
    counts.assign(c, c + P);
    displs.assign(d, d + P);
    as = std::make_unique<datatype_copy>(type);
  }
  /// Unpacks `side` into `buf` (but block `skip`) where it is packed.
  void apply(const v_side& side, void* buf, int P, int skip = -1) const {
    if (as) unpack_side(side, buf, counts.data(), displs.data(), as->type, P, skip);
  }
};

/// A reduce-scatter's input where it is given in place (`sendbuf` MPI_IN_PLACE): a copy of
/// `bytes` of `recvbuf`, taken at the start, since the result overwrites them; null otherwise.
std::shared_ptr<staging> input_copy(const void* sendbuf, const void* recvbuf, std::size_t bytes) {
  if (sendbuf != MPI_IN_PLACE) return nullptr;
  auto stage = std::make_shared<staging>();
  stage->bytes.resize(bytes);
  std::memcpy(stage->bytes.data(), recvbuf, bytes);
  return stage;
}

/// How a wrapper starts the collective it decided on: once, as a non-blocking call whose
/// generalized request the engine completes, or as the initialisation of a persistent request
/// whose every MPI_Start queues it again (`persistent_collective`). A persistent request's runs
/// read copies of the count and displacement arrays and duplicates of the derived datatypes
/// (`keep`), made at the init call: the user may change or free theirs once it has returned.
struct start_form {
  coll c;
  bool persistent = false;
  /// What `keep` made, held by the persistent request (null for a non-blocking call).
  std::shared_ptr<std::vector<std::shared_ptr<const void>>> kept = nullptr;

  /// Does the wrapper keep copies of its arguments, for a persistent request tcoll runs (`d`)?
  bool keeps(const local_start& d) const { return persistent && d.error < 0 && !d.to_mpi; }
  /// A copy of the `P` elements of `array`, alive as long as the request.
  template <class T>
  const T* keep(const T* array, int P) const {
    if (array == nullptr || P <= 0) return array;
    auto copy = std::make_shared<const std::vector<T>>(array, array + P);
    kept->push_back(copy);
    return copy->data();
  }
  /// `type` where it is predefined and contiguous (no run reads it), else a duplicate of it,
  /// freed with the request (the type itself where MPI refuses to duplicate it: MPI has
  /// measured it already).
  MPI_Datatype keep(MPI_Datatype type) const {
    if (type == MPI_DATATYPE_NULL || contiguous_size(type) != 0) return type;
    MPI_Datatype copy = MPI_DATATYPE_NULL;
    if (PMPI_Type_dup(type, &copy) != MPI_SUCCESS) return type;
    kept->push_back(std::shared_ptr<const void>(
        nullptr, [copy](const void*) mutable { PMPI_Type_free(&copy); }));
    return copy;
  }
};

/// A non-blocking call of collective `c`.
start_form nonblocking(coll c) {
  return {.c = c};
}
#if TCOLL_PRELOAD_PERSISTENT
/// The initialisation of a persistent request of collective `c`.
start_form persistent(coll c) {
  return {.c = c,
          .persistent = true,
          .kept = std::make_shared<std::vector<std::shared_ptr<const void>>>()};
}
#endif

/// `decide_nonblocking` for a call of collective `kind` (the shared-memory choice table's
/// name) moving `bytes`, chosen on one node from `choice_bytes`: the size, or 0 for the
/// uneven forms and the barrier, whose size no other rank knows.
local_start decide_start(coll c, MPI_Comm comm, const std::optional<fallback>& why,
                         std::size_t bytes, coll kind, std::size_t choice_bytes) {
  return decide_nonblocking(c, comm, why, bytes, config().shm, [=](const comm_state& s) {
    return shm_collective_choice(kind, choice_bytes, s.size);
  });
}

/// The common end of the wrappers: counts a decided call (a persistent request's runs count
/// at each MPI_Start), hands a passthrough to MPI, and starts the request that `queue(done)`
/// queues: once for a non-blocking call, at every MPI_Start for a persistent one (`queue` is
/// then copied into the request and must hold everything a run reads).
template <class Count, class Queue>
int start(const start_form& form, MPI_Comm comm, MPI_Request* request, const local_start& d,
          std::size_t bytes, pmpi_call pmpi, Queue&& queue) {
  const coll c = form.c;
  if (d.error >= 0) return d.error;
  if (d.decided) {
    if (!form.persistent || d.to_mpi) count_call(c, d.a, bytes, comm);
    count_entry_point<Count>(c, d.a);
  }
  if (d.to_mpi) return pmpi();
  if (!form.persistent) return start_request(c, comm, request, queue);
  return init_persistent(
      c, comm, d, bytes, request,
      [queue = std::forward<Queue>(queue), kept = form.kept](completion done) { queue(done); });
}

/// MPI_Ibcast and MPI_Ibcast_c (`Count` int or MPI_Count); `pmpi()` hands the call to MPI.
template <class Count>
int ibcast_call(void* buffer, Count count, MPI_Datatype datatype, int root, MPI_Comm comm,
                MPI_Request* request, pmpi_call pmpi, start_form form = nonblocking(coll::ibcast)) {
  const coll c = form.c;
  std::optional<fallback> why;
  std::size_t size = 0, bytes = 0;
  if (mpi_active()) {
    why = communicator_fallback(comm, count_fits(count) && buffer != nullptr && request != nullptr);
    if (!why) {
      size = contiguous_size(datatype);
      const long long signature =
          size ? static_cast<long long>(size) * count : signature_bytes(count, datatype);
      if (root < 0 || root >= comm_size(comm) || signature < 0)
        why = fallback::arguments;
      else
        bytes = static_cast<std::size_t>(signature);
    }
  }
  const local_start d = decide_start(c, comm, why, bytes, coll::bcast, bytes);
  if (form.keeps(d)) datatype = form.keep(datatype); // what a persistent request's runs read
  return start<Count>(form, comm, request, d, bytes, pmpi, [=](completion done) {
    std::shared_ptr<staging> stage;
    byte* data = static_cast<byte*>(buffer);
    const bool is_root = d.state->rank == root;
    if (size == 0) { // the root packs now; the others unpack once the bytes have arrived
      count_packed(c);
      stage = std::make_shared<staging>();
      stage->bytes.resize(bytes);
      data = reinterpret_cast<byte*>(stage->bytes.data());
      if (is_root)
        pack_local(buffer, count, datatype, stage->bytes.data(), bytes);
      else
        stage->unpack_as = std::make_unique<datatype_copy>(datatype);
    }
    const long long n = count;
    queue_on_path<collective::broadcast>(
        c, *d.state, d.a,
        [=](auto& on, const auto& tags, const auto& algo) {
          tcoll::cpu_reducer red;
          tcoll::broadcast_in(on, tags, data, bytes, root, algo, red);
          if (stage && stage->unpack_as)
            unpack_local(stage->bytes.data(), bytes, buffer, n, stage->unpack_as->type);
        },
        done);
  });
}

/// MPI_Ireduce and MPI_Ireduce_c: the reductions MPI_Reduce runs (predefined types and ops).
template <class Count>
int ireduce_call(const void* sendbuf, void* recvbuf, Count count, MPI_Datatype datatype, MPI_Op op,
                 int root, MPI_Comm comm, MPI_Request* request, pmpi_call pmpi,
                 start_form form = nonblocking(coll::ireduce)) {
  const coll c = form.c;
  std::optional<fallback> why;
  reduction r;
  bool is_root = false;
  std::size_t bytes = 0;
  if (mpi_active()) {
    why =
        communicator_fallback(comm, count_fits(count) && sendbuf != nullptr && request != nullptr);
    if (!why) {
      is_root = comm_rank(comm) == root;
      r = classify_reduction(datatype, op);
      if (root < 0 || root >= comm_size(comm) || (is_root && recvbuf == nullptr) ||
          (!is_root && sendbuf == MPI_IN_PLACE))
        why = fallback::arguments;
      else if (!r.ok())
        why = r.why;
      else
        bytes = static_cast<std::size_t>(count) * r.size;
    }
  }
  const local_start d = decide_start(c, comm, why, bytes, coll::reduce, bytes);
  return start<Count>(form, comm, request, d, bytes, pmpi, [=](completion done) {
    const std::size_t n = static_cast<std::size_t>(count);
    queue_on_path<collective::reduce>(
        c, *d.state, d.a,
        [=](auto& on, const auto& tags, const auto& algo) {
          dispatch(r, [&]<class T>(const auto& o) {
            tcoll::cpu_reducer red;
            T* out = is_root ? static_cast<T*>(recvbuf) : nullptr;
            const T* in = sendbuf == MPI_IN_PLACE ? out : static_cast<const T*>(sendbuf);
            tcoll::reduce_in(on, tags, in, out, n, root, o, algo, red);
          });
        },
        done);
  });
}

/// MPI_Ireduce_scatter_block and its `_c` form: the reductions of MPI_Reduce_scatter_block. In
/// place, the input (recvbuf's P blocks) is copied at the start. Also MPI_Ireduce_scatter
/// with equal blocks (`c`).
template <class Count>
int ireduce_scatter_block_call(const void* sendbuf, void* recvbuf, Count recvcount,
                               MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
                               MPI_Request* request, pmpi_call pmpi,
                               start_form form = nonblocking(coll::ireduce_scatter_block)) {
  const coll c = form.c;
  std::optional<fallback> why;
  reduction r;
  std::size_t bytes = 0;
  if (mpi_active()) {
    why = communicator_fallback(comm, count_fits(recvcount) && sendbuf != nullptr &&
                                          recvbuf != nullptr && request != nullptr);
    if (!why) {
      r = classify_reduction(datatype, op);
      if (!r.ok())
        why = r.why;
      else if (!count_fits(recvcount, comm_size(comm)))
        why = fallback::arguments;
      else
        bytes = static_cast<std::size_t>(recvcount) * static_cast<std::size_t>(comm_size(comm)) *
                r.size;
    }
  }
  const local_start d = decide_start(c, comm, why, bytes, coll::reduce_scatter_block, bytes);
  return start<Count>(form, comm, request, d, bytes, pmpi, [=](completion done) {
    // in place, the input is recvbuf's blocks (the result its first): copied at the start
    const std::shared_ptr<staging> stage = input_copy(sendbuf, recvbuf, bytes);
    const void* in = stage ? stage->bytes.data() : sendbuf;
    const std::size_t n = static_cast<std::size_t>(recvcount);
    queue_on_path<collective::reduce_scatter>(
        c, *d.state, d.a,
        [=](auto& on, const auto& tags, const auto& algo) {
          dispatch(r, [&]<class T>(const auto& o) {
            tcoll::cpu_reducer red;
            tcoll::reduce_scatter_in(on, tags, static_cast<const T*>(in), static_cast<T*>(recvbuf),
                                     n, o, algo, red);
          });
          (void)stage; // the copied input lives as long as the body
        },
        done);
  });
}

/// Where a call's P received blocks land: `out` stays the user's buffer where its type is
/// predefined and contiguous (`recv_direct`); else staging of `bytes`, unpacked on the engine
/// through a duplicate of `recvtype`, which `out` then points into.
std::shared_ptr<staging> receive_staging(bool recv_direct, std::size_t bytes, MPI_Datatype recvtype,
                                         byte*& out) {
  if (recv_direct) return nullptr;
  auto stage = std::make_shared<staging>();
  stage->bytes.resize(bytes);
  stage->unpack_as = std::make_unique<datatype_copy>(recvtype);
  out = reinterpret_cast<byte*>(stage->bytes.data());
  return stage;
}

/// MPI_Iallgather and MPI_Ialltoall (`C`) and their `_c` forms, moved as bytes (as their
/// blocking wrappers: equal_blocks.hpp); also MPI_Iallgatherv with equal blocks in rank
/// order (`form`).
template <collective C, class Count>
int iblocks_call(const void* sendbuf, Count sendcount, MPI_Datatype sendtype, void* recvbuf,
                 Count recvcount, MPI_Datatype recvtype, MPI_Comm comm, MPI_Request* request,
                 pmpi_call pmpi,
                 start_form form = nonblocking(C == collective::allgather ? coll::iallgather
                                                                          : coll::ialltoall)) {
  static_assert(C == collective::allgather || C == collective::alltoall);
  constexpr bool gathers = C == collective::allgather;
  const coll c = form.c;
  const block_call m = measure_block_call(sendbuf, sendcount, sendtype, recvbuf, recvcount,
                                          recvtype, comm, request != nullptr);
  const local_start d =
      decide_start(c, comm, m.why, m.bytes, gathers ? coll::allgather : coll::alltoall, m.bytes);
  if (form.keeps(d)) { // what a persistent request's runs read
    recvtype = form.keep(recvtype);
    if (!m.in_place) sendtype = form.keep(sendtype);
  }
  return start<Count>(form, comm, request, d, m.bytes, pmpi, [=](completion done) {
    if (!m.recv_direct() || !m.send_direct()) count_packed(c);
    byte* out = static_cast<byte*>(recvbuf);
    const std::shared_ptr<staging> stage = receive_staging(m.recv_direct(), m.bytes, recvtype, out);
    const byte* in = gathers ? allgather_input(sendbuf, sendcount, sendtype, recvbuf, recvcount,
                                               recvtype, m, d.state->rank, out)
                             : alltoall_input(sendbuf, sendcount, sendtype, recvbuf, recvcount,
                                              recvtype, m, out);
    const long long rcount = recvcount;
    queue_on_path<C>(
        c, *d.state, d.a,
        [=](auto& on, const auto& tags, const auto& algo) {
          tcoll::cpu_reducer red;
          if constexpr (gathers)
            tcoll::allgather_in(on, tags, in, out, m.block, algo, red);
          else
            tcoll::alltoall_in(on, tags, in, out, m.block, in == out, algo, red);
          if (stage)
            unpack_blocks(stage->bytes.data(), m.P, m.block, recvbuf, rcount,
                          stage->unpack_as->type);
        },
        done);
  });
}

/// The counts (or displacements) a rank that is not the root passes: none.
std::span<const std::size_t> no_counts() {
  return {};
}

/// MPI_Igather and MPI_Igather_c, moved as bytes (as MPI_Gather). recvbuf, recvcount and
/// recvtype are read at the root only.
template <class Count>
int igather_call(const void* sendbuf, Count sendcount, MPI_Datatype sendtype, void* recvbuf,
                 Count recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm,
                 MPI_Request* request, pmpi_call pmpi,
                 start_form form = nonblocking(coll::igather)) {
  const coll c = form.c;
  const rooted_call m =
      measure_rooted_call(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype,
                          sendbuf == MPI_IN_PLACE, root, comm, request != nullptr);
  const local_start d = decide_start(c, comm, m.why, m.bytes, coll::gather, m.bytes);
  if (form.keeps(d)) { // what a persistent request's runs read
    if (m.is_root) recvtype = form.keep(recvtype);
    if (!m.in_place) sendtype = form.keep(sendtype);
  }
  return start<Count>(form, comm, request, d, m.bytes, pmpi, [=](completion done) {
    if (!m.rank_direct() || !m.root_direct()) count_packed(c);
    std::shared_ptr<staging> stage; // the root's blocks to unpack, or a packed block to send
    byte* root_out = m.is_root ? static_cast<byte*>(recvbuf) : nullptr;
    if (m.is_root) stage = receive_staging(m.root_direct(), m.bytes, recvtype, root_out);
    // a start may read the send buffer: a packed block is packed now
    const rooted_bytes b = gather_bytes(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype,
                                        m, root, root_out, [&](std::size_t n) {
                                          stage = std::make_shared<staging>();
                                          stage->bytes.resize(n);
                                          return stage->bytes.data();
                                        });
    auto blocks = tcoll::check_gather_arguments(b.in, b.out, m.block, root, d.state->rank, m.P);
    const long long rcount = recvcount;
    queue_on_path<collective::gather>(
        c, *d.state, d.a,
        [=, blocks = std::move(blocks)](auto& on, const auto& tags, const auto& algo) {
          tcoll::cpu_reducer red;
          tcoll::gather_in(on, tags, b.in, b.out, m.block, root, blocks, algo, red);
          if (stage && stage->unpack_as)
            unpack_blocks(stage->bytes.data(), m.P, m.block, recvbuf, rcount,
                          stage->unpack_as->type);
        },
        done);
  });
}

/// MPI_Iscatter and MPI_Iscatter_c, moved as bytes (as MPI_Scatter). sendbuf, sendcount and
/// sendtype are read at the root only.
template <class Count>
int iscatter_call(const void* sendbuf, Count sendcount, MPI_Datatype sendtype, void* recvbuf,
                  Count recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm,
                  MPI_Request* request, pmpi_call pmpi,
                  start_form form = nonblocking(coll::iscatter)) {
  const coll c = form.c;
  const rooted_call m =
      measure_rooted_call(recvbuf, recvcount, recvtype, sendbuf, sendcount, sendtype,
                          recvbuf == MPI_IN_PLACE, root, comm, request != nullptr);
  const local_start d = decide_start(c, comm, m.why, m.bytes, coll::scatter, m.bytes);
  if (form.keeps(d)) { // what a persistent request's runs read
    if (m.is_root) sendtype = form.keep(sendtype);
    if (!m.in_place) recvtype = form.keep(recvtype);
  }
  return start<Count>(form, comm, request, d, m.bytes, pmpi, [=](completion done) {
    if (!m.rank_direct() || !m.root_direct()) count_packed(c);
    auto stage = std::make_shared<staging>(); // packed send blocks, the receive type's copy
    const rooted_bytes b =
        scatter_bytes(sendbuf, sendcount, sendtype, recvbuf, m, root, [&](std::size_t n) {
          stage->bytes.resize(n);
          return stage->bytes.data();
        });
    if (!m.rank_direct()) stage->unpack_as = std::make_unique<datatype_copy>(recvtype);
    auto blocks = tcoll::check_scatter_arguments(b.in, b.out, m.block, root, d.state->rank, m.P);
    const long long rcount = recvcount;
    queue_on_path<collective::scatter>(
        c, *d.state, d.a,
        [=, blocks = std::move(blocks)](auto& on, const auto& tags, const auto& algo) {
          tcoll::cpu_reducer red;
          tcoll::scatter_in(on, tags, b.in, b.out, m.block, root, blocks, algo, red);
          if (stage->unpack_as)
            unpack_local(reinterpret_cast<const std::byte*>(b.out), m.block, recvbuf, rcount,
                         stage->unpack_as->type);
        },
        done);
  });
}

/// MPI_Ialltoallv and MPI_Ialltoallv_c (`Count` int or MPI_Count, `Displ` int or MPI_Aint),
/// moved as bytes (as MPI_Alltoallv): each rank knows only its own blocks, so the route is
/// chosen without a size (`per_rank_size`: a TCOLL_ALLTOALLV_ALGO rule, 0-max, or the
/// built-in choice), and a rank whose counts are all zero still takes part. A derived or
/// non-contiguous side is packed at the start and the receive side unpacked on the engine,
/// through copies of the receive counts and displacements and a duplicate of the type.
template <class Count, class Displ>
int ialltoallv_call(const void* sendbuf, const Count sendcounts[], const Displ sdispls[],
                    MPI_Datatype sendtype, void* recvbuf, const Count recvcounts[],
                    const Displ rdispls[], MPI_Datatype recvtype, MPI_Comm comm,
                    MPI_Request* request, pmpi_call pmpi,
                    start_form form = nonblocking(coll::ialltoallv)) {
  const coll c = form.c;
  const bool in_place = sendbuf == MPI_IN_PLACE; // the send side is the receive side
  struct sides {                                 // what the queued body keeps alive
    v_side send, recv;
    unpack_plan<Count, Displ> unpack;
  };
  auto v = std::make_shared<sides>();
  std::optional<fallback> why;
  int P = 0;
  if (mpi_active()) {
    why = communicator_fallback(comm, request != nullptr);
    if (!why) {
      P = comm_size(comm);
      const auto rank = static_cast<std::size_t>(comm_rank(comm));
      if (!measure_side(v->recv, recvbuf, recvcounts, rdispls, recvtype, P))
        why = fallback::arguments; // MPI reports the bad count or type
      else if (!in_place && (!measure_side(v->send, sendbuf, sendcounts, sdispls, sendtype, P) ||
                             v->send.sizes[rank] != v->recv.sizes[rank]))
        why = fallback::arguments; // ... or the mismatch of the block to itself
    }
  }
  const std::size_t bytes = why ? 0 : in_place ? v->recv.total : v->send.total;
  const local_start d = decide_start(c, comm, why, bytes, coll::alltoallv, 0);
  if (form.keeps(d)) { // what a persistent request's runs read
    recvcounts = form.keep(recvcounts, P);
    rdispls = form.keep(rdispls, P);
    recvtype = form.keep(recvtype);
    if (!in_place) {
      sendcounts = form.keep(sendcounts, P);
      sdispls = form.keep(sdispls, P);
      sendtype = form.keep(sendtype);
    }
  }
  return start<Count>(form, comm, request, d, bytes, pmpi, [=](completion done) {
    if (!v->recv.direct || (!in_place && !v->send.direct)) count_packed(c);
    // in place, the blocks to send sit in recvbuf as the receive side describes them
    pack_side(v->recv, recvbuf, recvcounts, rdispls, recvtype, P, in_place);
    if (!in_place) pack_side(v->send, sendbuf, sendcounts, sdispls, sendtype, P, true);
    v->unpack.keep(v->recv, recvcounts, rdispls, recvtype, P);
    const v_side& from = in_place ? v->recv : v->send;
    const bool same = tcoll::check_alltoallv_arguments(
        static_cast<const byte*>(from.data), sizes_of(from), places_of(from), v->recv.data,
        sizes_of(v->recv), places_of(v->recv), d.state->rank, P);
    queue_on_path<collective::alltoallv>(
        c, *d.state, d.a,
        [=](auto& on, const auto& tags, const auto& algo) {
          const v_side& src = in_place ? v->recv : v->send;
          tcoll::cpu_reducer red;
          tcoll::alltoallv_in(on, tags, static_cast<const byte*>(src.data), sizes_of(src),
                              places_of(src), v->recv.data, sizes_of(v->recv), places_of(v->recv),
                              same, algo, red);
          v->unpack.apply(v->recv, recvbuf, P);
        },
        done);
  });
}

/// MPI_Igatherv and MPI_Igatherv_c, moved as bytes (as MPI_Gatherv): routed from the root and
/// the settings only (`per_rank_size`: only the root knows every count); a rank with an empty
/// block still takes part. recvbuf, recvcounts, displs and recvtype are read at the root only,
/// at the start (the root's counts and displacements are copied for an unpack on the engine).
template <class Count, class Displ>
int igatherv_call(const void* sendbuf, Count sendcount, MPI_Datatype sendtype, void* recvbuf,
                  const Count recvcounts[], const Displ displs[], MPI_Datatype recvtype, int root,
                  MPI_Comm comm, MPI_Request* request, pmpi_call pmpi,
                  start_form form = nonblocking(coll::igatherv)) {
  const coll c = form.c;
  const bool in_place = sendbuf == MPI_IN_PLACE; // at the root only
  struct sides {                                 // what the queued body keeps alive
    v_side recv;                                 // the root's
    unpack_plan<Count, Displ> unpack;
    std::vector<std::byte> send_packed;
  };
  auto v = std::make_shared<sides>();
  const rooted_v_call m =
      measure_rooted_v_call(sendcount, sendtype, v->recv, recvbuf, recvcounts, displs, recvtype,
                            in_place, root, comm, request != nullptr);
  const std::size_t block = m.block, bytes = m.why ? 0 : m.bytes;
  const int P = m.P;
  const bool is_root = m.is_root;
  const local_start d = decide_start(c, comm, m.why, bytes, coll::gatherv, 0);
  if (form.keeps(d)) { // what a persistent request's runs read
    if (is_root) {
      recvcounts = form.keep(recvcounts, P);
      displs = form.keep(displs, P);
      recvtype = form.keep(recvtype);
    }
    if (!in_place) sendtype = form.keep(sendtype);
  }
  return start<Count>(form, comm, request, d, bytes, pmpi, [=](completion done) {
    if (!m.rank_direct(sendbuf) || (is_root && !v->recv.direct)) count_packed(c);
    // in place: the root's block, packed where recvtype is
    const byte* in = gatherv_input(sendbuf, sendcount, sendtype, v->recv, recvbuf, recvcounts,
                                   displs, recvtype, m, root, v->send_packed);
    if (is_root) v->unpack.keep(v->recv, recvcounts, displs, recvtype, P);
    auto blocks = tcoll::check_gatherv_arguments(
        in, block, is_root ? v->recv.data : nullptr, is_root ? sizes_of(v->recv) : no_counts(),
        is_root ? places_of(v->recv) : no_counts(), root, d.state->rank, P);
    queue_on_path<collective::gatherv>(
        c, *d.state, d.a,
        [=, blocks = std::move(blocks)](auto& on, const auto& tags, const auto& algo) {
          tcoll::cpu_reducer red;
          tcoll::gatherv_in(on, tags, in, block, is_root ? v->recv.data : nullptr,
                            is_root ? sizes_of(v->recv) : no_counts(),
                            is_root ? places_of(v->recv) : no_counts(), root, blocks, algo, red);
          v->unpack.apply(v->recv, recvbuf, P, in_place ? root : -1);
        },
        done);
  });
}

/// MPI_Iscatterv and MPI_Iscatterv_c, moved as bytes (as MPI_Scatterv): routed as
/// MPI_Igatherv; sendbuf, sendcounts, displs and sendtype are read at the root only, at the
/// start (the root's blocks are packed then where its type is derived).
template <class Count, class Displ>
int iscatterv_call(const void* sendbuf, const Count sendcounts[], const Displ displs[],
                   MPI_Datatype sendtype, void* recvbuf, Count recvcount, MPI_Datatype recvtype,
                   int root, MPI_Comm comm, MPI_Request* request, pmpi_call pmpi,
                   start_form form = nonblocking(coll::iscatterv)) {
  const coll c = form.c;
  const bool in_place = recvbuf == MPI_IN_PLACE; // at the root only
  struct sides {                                 // what the queued body keeps alive
    v_side send;                                 // the root's
    std::vector<std::byte> recv_packed;
    std::unique_ptr<datatype_copy> unpack_as;
  };
  auto v = std::make_shared<sides>();
  const rooted_v_call m =
      measure_rooted_v_call(recvcount, recvtype, v->send, sendbuf, sendcounts, displs, sendtype,
                            in_place, root, comm, request != nullptr);
  const std::size_t block = m.block, bytes = m.why ? 0 : m.bytes;
  const int P = m.P;
  const bool is_root = m.is_root;
  const local_start d = decide_start(c, comm, m.why, bytes, coll::scatterv, 0);
  if (form.keeps(d)) { // what a persistent request's runs read
    if (is_root) {
      sendcounts = form.keep(sendcounts, P);
      displs = form.keep(displs, P);
      sendtype = form.keep(sendtype);
    }
    if (!in_place) recvtype = form.keep(recvtype);
  }
  return start<Count>(form, comm, request, d, bytes, pmpi, [=](completion done) {
    const bool recv_direct = m.rank_direct(recvbuf);
    if (!recv_direct || (is_root && !v->send.direct)) count_packed(c);
    byte* out = scatterv_output(sendbuf, sendcounts, displs, sendtype, v->send, recvbuf, m, root,
                                v->recv_packed);
    if (!recv_direct) v->unpack_as = std::make_unique<datatype_copy>(recvtype);
    const byte* in = is_root ? static_cast<const byte*>(v->send.data) : nullptr;
    auto blocks = tcoll::check_scatterv_arguments(in, is_root ? sizes_of(v->send) : no_counts(),
                                                  is_root ? places_of(v->send) : no_counts(), out,
                                                  block, root, d.state->rank, P);
    const long long rcount = recvcount;
    queue_on_path<collective::scatterv>(
        c, *d.state, d.a,
        [=, blocks = std::move(blocks)](auto& on, const auto& tags, const auto& algo) {
          tcoll::cpu_reducer red;
          tcoll::scatterv_in(on, tags, in, is_root ? sizes_of(v->send) : no_counts(),
                             is_root ? places_of(v->send) : no_counts(), out, block, root, blocks,
                             algo, red);
          if (v->unpack_as)
            unpack_local(v->recv_packed.data(), block, recvbuf, rcount, v->unpack_as->type);
        },
        done);
  });
}

/// The algorithm an uneven call (MPI_Ireduce_scatter, MPI_Iallgatherv) runs for the rule or
/// choice `d.a` of its equal-block collective: the ring (the uneven forms' one algorithm, as in
/// their blocking wrappers), the two-level machine, or MPI's.
local_start uneven_form(local_start d) {
  if (d.a != algorithm_id::passthrough && d.a != algorithm_id::hierarchical)
    d.a = algorithm_id::ring;
  return d;
}

/// MPI_Ireduce_scatter and MPI_Ireduce_scatter_c: equal blocks as MPI_Ireduce_scatter_block,
/// uneven ones through tcoll's reduce_scatterv. recvcounts is an argument every rank shares,
/// so the route is chosen from the size (every block together), as the blocking form's. In
/// place, the input (recvbuf's blocks) is copied at the start.
template <class Count>
int ireduce_scatter_call(const void* sendbuf, void* recvbuf, const Count recvcounts[],
                         MPI_Datatype datatype, MPI_Op op, MPI_Comm comm, MPI_Request* request,
                         pmpi_call pmpi, start_form form = nonblocking(coll::ireduce_scatter)) {
  const coll c = form.c;
  std::optional<fallback> why;
  reduction r;
  int P = 0;
  std::vector<std::size_t> counts; // elements of each block
  std::size_t bytes = 0;
  if (mpi_active()) {
    why = communicator_fallback(comm, recvcounts != nullptr && sendbuf != nullptr &&
                                          recvbuf != nullptr && request != nullptr);
    if (!why) {
      P = comm_size(comm);
      if (const long long block = common_count(recvcounts, P); block >= 0)
        return ireduce_scatter_block_call(sendbuf, recvbuf, static_cast<Count>(block), datatype, op,
                                          comm, request, pmpi, form);
      r = classify_reduction(datatype, op);
      long long total = 0;
      bool fits = r.ok();
      for (int q = 0; q < P && fits; ++q) {
        fits = recvcounts[q] >= 0 &&
               !__builtin_add_overflow(total, static_cast<long long>(recvcounts[q]), &total);
        if (fits) counts.push_back(static_cast<std::size_t>(recvcounts[q]));
      }
      if (!r.ok())
        why = r.why;
      else if (!fits || !count_fits(total))
        why = fallback::arguments; // MPI reports the bad count
      else
        bytes = static_cast<std::size_t>(total) * r.size;
    }
  }
  const local_start d = uneven_form(decide_start(c, comm, why, bytes, coll::reduce_scatter, bytes));
  // made once: a persistent request's runs share it
  const auto sizes = std::make_shared<const std::vector<std::size_t>>(std::move(counts));
  return start<Count>(form, comm, request, d, bytes, pmpi, [=](completion done) {
    // in place, the input is recvbuf's blocks (the result its first): copied at the start
    const std::shared_ptr<staging> stage = input_copy(sendbuf, recvbuf, bytes);
    const void* in = stage ? stage->bytes.data() : sendbuf;
    const int rank = d.state->rank;
    auto offsets =
        std::make_shared<const std::vector<std::size_t>>(dispatch(r, [&]<class T>(const auto&) {
          return tcoll::check_reduce_scatterv_arguments(static_cast<const T*>(in),
                                                        static_cast<T*>(recvbuf), *sizes, rank, P);
        }));
    queue_on_path<collective::reduce_scatterv>(
        c, *d.state, d.a,
        [=](auto& on, const auto& tags, const auto& algo) {
          dispatch(r, [&]<class T>(const auto& o) {
            tcoll::cpu_reducer red;
            tcoll::reduce_scatterv_in(on, tags, static_cast<const T*>(in), static_cast<T*>(recvbuf),
                                      *sizes, *offsets, o, algo, red);
          });
          (void)stage; // the copied input lives as long as the body
        },
        done);
  });
}

/// MPI_Iallgatherv and MPI_Iallgatherv_c: equal blocks in rank order as MPI_Iallgather, any
/// other layout through tcoll's allgatherv on bytes. recvcounts is shared by every rank, so
/// the route is chosen from the blocks' signature bytes together, as the blocking form's;
/// each rank's displacements are its own. Ranks that pick different forms still match: blocks
/// of one size choose as MPI_Iallgather in both forms, and a rank whose blocks lie out of
/// rank order runs that allgather into rank-order staging and copies each block to its place
/// (until 2026-12-07 it chose as an uneven call: the ring, or MPI's own where the allgather
/// took the collective area, and the ranks then ran different collectives); uneven blocks run
/// the ring (or MPI's, or the two-level machine's) on every rank. A derived or non-contiguous
/// receive datatype gathers into staging, unpacked on the engine through a duplicate of the
/// type; a derived send datatype is packed at the start.
template <class Count, class Displ>
int iallgatherv_call(const void* sendbuf, Count sendcount, MPI_Datatype sendtype, void* recvbuf,
                     const Count recvcounts[], const Displ displs[], MPI_Datatype recvtype,
                     MPI_Comm comm, MPI_Request* request, pmpi_call pmpi,
                     start_form form = nonblocking(coll::iallgatherv)) {
  const coll c = form.c;
  const bool in_place = sendbuf == MPI_IN_PLACE;
  struct sides { // what the queued body keeps alive
    v_side recv;
    unpack_plan<Count, Displ> unpack;
    std::vector<std::byte> send_packed;
  };
  auto v = std::make_shared<sides>();
  std::optional<fallback> why;
  int P = 0;
  std::size_t ssize = 0;
  bool equal = false; // every block of one size (out of rank order: in order is MPI_Iallgather)
  if (mpi_active()) {
    why = communicator_fallback(comm, recvcounts != nullptr && displs != nullptr &&
                                          recvbuf != nullptr && sendbuf != nullptr &&
                                          request != nullptr && (in_place || sendcount >= 0));
    if (!why) {
      P = comm_size(comm);
      const long long block = common_count(recvcounts, P);
      equal = block >= 0;
      bool in_order = equal;
      for (int q = 0; in_order && q < P; ++q)
        in_order = static_cast<long long>(displs[q]) == q * block;
      if (in_order)
        return iblocks_call<collective::allgather>(sendbuf, sendcount, sendtype, recvbuf,
                                                   static_cast<Count>(block), recvtype, comm,
                                                   request, pmpi, form);
      const auto own = static_cast<std::size_t>(comm_rank(comm));
      ssize = in_place ? 0 : contiguous_size(sendtype);
      const long long send_signature = in_place ? 0
                                       : ssize  ? static_cast<long long>(ssize) * sendcount
                                                : signature_bytes(sendcount, sendtype);
      if (!measure_side(v->recv, recvbuf, recvcounts, displs, recvtype, P) ||
          (!in_place && send_signature != static_cast<long long>(v->recv.sizes[own])))
        why = fallback::arguments; // MPI reports the bad count or type, or the mismatch
    }
  }
  const std::size_t bytes = why ? 0 : v->recv.total;
  const local_start d =
      equal ? decide_start(c, comm, why, bytes, coll::allgather, bytes)
            : uneven_form(decide_start(c, comm, why, bytes, coll::allgatherv, bytes));
  if (form.keeps(d)) { // what a persistent request's runs read
    recvcounts = form.keep(recvcounts, P);
    displs = form.keep(displs, P);
    recvtype = form.keep(recvtype);
    if (!in_place) sendtype = form.keep(sendtype);
  }
  return start<Count>(form, comm, request, d, bytes, pmpi, [=](completion done) {
    const int rank = d.state->rank;
    const auto own = static_cast<std::size_t>(rank);
    const bool send_direct = in_place || (ssize != 0 && sendbuf != nullptr);
    if (!send_direct || !v->recv.direct) count_packed(c);
    // in place: this rank's block, packed where recvtype is (the others are only written)
    pack_side(v->recv, recvbuf, recvcounts, displs, recvtype, P, in_place, rank);
    v->unpack.keep(v->recv, recvcounts, displs, recvtype, P);
    const byte* in = v->recv.data + v->recv.at[own];
    if (!in_place && send_direct) {
      in = static_cast<const byte*>(sendbuf);
    } else if (!send_direct) {
      v->send_packed.resize(v->recv.sizes[own]);
      pack_local(sendbuf, sendcount, sendtype, v->send_packed.data(), v->send_packed.size());
      in = reinterpret_cast<const byte*>(v->send_packed.data());
    }
    const std::size_t extent = tcoll::check_allgatherv_arguments(
        in, v->recv.sizes[own], v->recv.data, sizes_of(v->recv), places_of(v->recv), rank, P);
    if (equal) { // MPI_Iallgather's collective, as the ranks whose blocks lie in rank order run it
      const std::size_t block = v->recv.sizes[own];
      // (left uninitialised: the allgather writes every byte before anything reads it)
      const std::shared_ptr<byte[]> gathered = std::make_shared_for_overwrite<byte[]>(bytes);
      queue_on_path<collective::allgather>(
          c, *d.state, d.a,
          [=](auto& on, const auto& tags, const auto& algo) {
            tcoll::cpu_reducer red;
            tcoll::allgather_in(on, tags, in, gathered.get(), block, algo, red);
            for (int q = 0; q < P; ++q)
              std::memcpy(v->recv.data + v->recv.at[static_cast<std::size_t>(q)],
                          gathered.get() + static_cast<std::size_t>(q) * block, block);
            v->unpack.apply(v->recv, recvbuf, P, in_place ? rank : -1);
          },
          done);
      return;
    }
    queue_on_path<collective::allgatherv>(
        c, *d.state, d.a,
        [=](auto& on, const auto& tags, const auto& algo) {
          tcoll::cpu_reducer red;
          tcoll::allgatherv_in(on, tags, in, v->recv.data, sizes_of(v->recv), places_of(v->recv),
                               extent, algo, red);
          v->unpack.apply(v->recv, recvbuf, P, in_place ? rank : -1);
        },
        done);
  });
}

/// MPI_Ibarrier: routed without a size (a TCOLL_BARRIER_ALGO rule, 0-max, or the built-in
/// choice: on one node the blocking barrier's, the collective area with a spare core; MPI's
/// elsewhere). On tcoll's engine it is ordered behind the communicator's earlier non-blocking
/// collectives there; its request completes once every rank has started it.
int ibarrier_call(MPI_Comm comm, MPI_Request* request, pmpi_call pmpi,
                  start_form form = nonblocking(coll::ibarrier)) {
  const coll c = form.c;
  std::optional<fallback> why;
  if (mpi_active()) why = communicator_fallback(comm, request != nullptr);
  const local_start d = decide_start(c, comm, why, 0, coll::barrier, 0);
  return start<int>(form, comm, request, d, 0, pmpi, [=](completion done) {
    queue_on_path<collective::barrier>(
        c, *d.state, d.a,
        [](auto& on, const auto& tags, const auto& algo) {
          tcoll::cpu_reducer red;
          tcoll::barrier_in(on, tags, algo, red);
        },
        done);
  });
}

} // namespace

/// MPI_Ibcast through tcoll's engine thread (binomial tree, the collective area, the
/// two-level machine) where MPI runs at MPI_THREAD_MULTIPLE and a rule of TCOLL_BCAST_ALGO,
/// or the built-in choice with a spare core, picks tcoll; PMPI_Ibcast otherwise.
TCOLL_PRELOAD_EXPORT int MPI_Ibcast(void* buffer, int count, MPI_Datatype datatype, int root,
                                    MPI_Comm comm, MPI_Request* request) {
  return ibcast_call(buffer, count, datatype, root, comm, request,
                     [&] { return PMPI_Ibcast(buffer, count, datatype, root, comm, request); });
}

/// MPI_Ireduce as MPI_Ibcast does (TCOLL_REDUCE_ALGO; MPI_Reduce's types and ops).
TCOLL_PRELOAD_EXPORT int MPI_Ireduce(const void* sendbuf, void* recvbuf, int count,
                                     MPI_Datatype datatype, MPI_Op op, int root, MPI_Comm comm,
                                     MPI_Request* request) {
  return ireduce_call(sendbuf, recvbuf, count, datatype, op, root, comm, request, [&] {
    return PMPI_Ireduce(sendbuf, recvbuf, count, datatype, op, root, comm, request);
  });
}

/// MPI_Iallgather as MPI_Ibcast does (TCOLL_ALLGATHER_ALGO).
TCOLL_PRELOAD_EXPORT int MPI_Iallgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype,
                                        void* recvbuf, int recvcount, MPI_Datatype recvtype,
                                        MPI_Comm comm, MPI_Request* request) {
  return iblocks_call<collective::allgather>(
      sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, request, [&] {
        return PMPI_Iallgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm,
                               request);
      });
}

/// MPI_Ireduce_scatter_block as MPI_Ibcast does (TCOLL_REDUCE_SCATTER_ALGO).
TCOLL_PRELOAD_EXPORT int MPI_Ireduce_scatter_block(const void* sendbuf, void* recvbuf,
                                                   int recvcount, MPI_Datatype datatype, MPI_Op op,
                                                   MPI_Comm comm, MPI_Request* request) {
  return ireduce_scatter_block_call(sendbuf, recvbuf, recvcount, datatype, op, comm, request, [&] {
    return PMPI_Ireduce_scatter_block(sendbuf, recvbuf, recvcount, datatype, op, comm, request);
  });
}

/// MPI_Ialltoall as MPI_Ibcast does (TCOLL_ALLTOALL_ALGO).
TCOLL_PRELOAD_EXPORT int MPI_Ialltoall(const void* sendbuf, int sendcount, MPI_Datatype sendtype,
                                       void* recvbuf, int recvcount, MPI_Datatype recvtype,
                                       MPI_Comm comm, MPI_Request* request) {
  return iblocks_call<collective::alltoall>(
      sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, request, [&] {
        return PMPI_Ialltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm,
                              request);
      });
}

/// MPI_Igather as MPI_Ibcast does (TCOLL_GATHER_ALGO).
TCOLL_PRELOAD_EXPORT int MPI_Igather(const void* sendbuf, int sendcount, MPI_Datatype sendtype,
                                     void* recvbuf, int recvcount, MPI_Datatype recvtype, int root,
                                     MPI_Comm comm, MPI_Request* request) {
  return igather_call(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm,
                      request, [&] {
                        return PMPI_Igather(sendbuf, sendcount, sendtype, recvbuf, recvcount,
                                            recvtype, root, comm, request);
                      });
}

/// MPI_Iscatter as MPI_Ibcast does (TCOLL_SCATTER_ALGO).
TCOLL_PRELOAD_EXPORT int MPI_Iscatter(const void* sendbuf, int sendcount, MPI_Datatype sendtype,
                                      void* recvbuf, int recvcount, MPI_Datatype recvtype, int root,
                                      MPI_Comm comm, MPI_Request* request) {
  return iscatter_call(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm,
                       request, [&] {
                         return PMPI_Iscatter(sendbuf, sendcount, sendtype, recvbuf, recvcount,
                                              recvtype, root, comm, request);
                       });
}

/// MPI_Ialltoallv as MPI_Ibcast does (TCOLL_ALLTOALLV_ALGO: a rule covers every size).
TCOLL_PRELOAD_EXPORT int MPI_Ialltoallv(const void* sendbuf, const int sendcounts[],
                                        const int sdispls[], MPI_Datatype sendtype, void* recvbuf,
                                        const int recvcounts[], const int rdispls[],
                                        MPI_Datatype recvtype, MPI_Comm comm,
                                        MPI_Request* request) {
  return ialltoallv_call(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls,
                         recvtype, comm, request, [&] {
                           return PMPI_Ialltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf,
                                                  recvcounts, rdispls, recvtype, comm, request);
                         });
}

/// MPI_Igatherv as MPI_Ibcast does (TCOLL_GATHERV_ALGO: a rule covers every size).
TCOLL_PRELOAD_EXPORT int MPI_Igatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype,
                                      void* recvbuf, const int recvcounts[], const int displs[],
                                      MPI_Datatype recvtype, int root, MPI_Comm comm,
                                      MPI_Request* request) {
  return igatherv_call(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root,
                       comm, request, [&] {
                         return PMPI_Igatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts,
                                              displs, recvtype, root, comm, request);
                       });
}

/// MPI_Iscatterv as MPI_Ibcast does (TCOLL_SCATTERV_ALGO: a rule covers every size).
TCOLL_PRELOAD_EXPORT int MPI_Iscatterv(const void* sendbuf, const int sendcounts[],
                                       const int displs[], MPI_Datatype sendtype, void* recvbuf,
                                       int recvcount, MPI_Datatype recvtype, int root,
                                       MPI_Comm comm, MPI_Request* request) {
  return iscatterv_call(sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root,
                        comm, request, [&] {
                          return PMPI_Iscatterv(sendbuf, sendcounts, displs, sendtype, recvbuf,
                                                recvcount, recvtype, root, comm, request);
                        });
}

/// MPI_Ibarrier through tcoll's engine where TCOLL_BARRIER_ALGO, or the one-node built-in
/// choice with a spare core, picks tcoll; PMPI_Ibarrier otherwise.
TCOLL_PRELOAD_EXPORT int MPI_Ibarrier(MPI_Comm comm, MPI_Request* request) {
  return ibarrier_call(comm, request, [&] { return PMPI_Ibarrier(comm, request); });
}
/// MPI_Ireduce_scatter through tcoll's engine: equal blocks as MPI_Ireduce_scatter_block,
/// uneven ones by tcoll's reduce_scatterv, under the same rules (TCOLL_REDUCE_SCATTER_ALGO).
TCOLL_PRELOAD_EXPORT int MPI_Ireduce_scatter(const void* sendbuf, void* recvbuf,
                                             const int recvcounts[], MPI_Datatype datatype,
                                             MPI_Op op, MPI_Comm comm, MPI_Request* request) {
  return ireduce_scatter_call(sendbuf, recvbuf, recvcounts, datatype, op, comm, request, [&] {
    return PMPI_Ireduce_scatter(sendbuf, recvbuf, recvcounts, datatype, op, comm, request);
  });
}
/// MPI_Iallgatherv through tcoll's engine: equal blocks in rank order as MPI_Iallgather, any
/// other layout by tcoll's allgatherv, under the same rules (TCOLL_ALLGATHER_ALGO).
TCOLL_PRELOAD_EXPORT int MPI_Iallgatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype,
                                         void* recvbuf, const int recvcounts[], const int displs[],
                                         MPI_Datatype recvtype, MPI_Comm comm,
                                         MPI_Request* request) {
  return iallgatherv_call(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm,
                          request, [&] {
                            return PMPI_Iallgatherv(sendbuf, sendcount, sendtype, recvbuf,
                                                    recvcounts, displs, recvtype, comm, request);
                          });
}

#if TCOLL_PRELOAD_LARGE_COUNT
/// MPI-4's large-count forms: the same paths.
TCOLL_PRELOAD_EXPORT int MPI_Ibcast_c(void* buffer, MPI_Count count, MPI_Datatype datatype,
                                      int root, MPI_Comm comm, MPI_Request* request) {
  return ibcast_call(buffer, count, datatype, root, comm, request,
                     [&] { return PMPI_Ibcast_c(buffer, count, datatype, root, comm, request); });
}
TCOLL_PRELOAD_EXPORT int MPI_Ireduce_c(const void* sendbuf, void* recvbuf, MPI_Count count,
                                       MPI_Datatype datatype, MPI_Op op, int root, MPI_Comm comm,
                                       MPI_Request* request) {
  return ireduce_call(sendbuf, recvbuf, count, datatype, op, root, comm, request, [&] {
    return PMPI_Ireduce_c(sendbuf, recvbuf, count, datatype, op, root, comm, request);
  });
}
TCOLL_PRELOAD_EXPORT int MPI_Iallgather_c(const void* sendbuf, MPI_Count sendcount,
                                          MPI_Datatype sendtype, void* recvbuf, MPI_Count recvcount,
                                          MPI_Datatype recvtype, MPI_Comm comm,
                                          MPI_Request* request) {
  return iblocks_call<collective::allgather>(
      sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, request, [&] {
        return PMPI_Iallgather_c(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm,
                                 request);
      });
}
TCOLL_PRELOAD_EXPORT int MPI_Ireduce_scatter_block_c(const void* sendbuf, void* recvbuf,
                                                     MPI_Count recvcount, MPI_Datatype datatype,
                                                     MPI_Op op, MPI_Comm comm,
                                                     MPI_Request* request) {
  return ireduce_scatter_block_call(sendbuf, recvbuf, recvcount, datatype, op, comm, request, [&] {
    return PMPI_Ireduce_scatter_block_c(sendbuf, recvbuf, recvcount, datatype, op, comm, request);
  });
}
TCOLL_PRELOAD_EXPORT int MPI_Ialltoall_c(const void* sendbuf, MPI_Count sendcount,
                                         MPI_Datatype sendtype, void* recvbuf, MPI_Count recvcount,
                                         MPI_Datatype recvtype, MPI_Comm comm,
                                         MPI_Request* request) {
  return iblocks_call<collective::alltoall>(
      sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, request, [&] {
        return PMPI_Ialltoall_c(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm,
                                request);
      });
}
TCOLL_PRELOAD_EXPORT int MPI_Ialltoallv_c(const void* sendbuf, const MPI_Count sendcounts[],
                                          const MPI_Aint sdispls[], MPI_Datatype sendtype,
                                          void* recvbuf, const MPI_Count recvcounts[],
                                          const MPI_Aint rdispls[], MPI_Datatype recvtype,
                                          MPI_Comm comm, MPI_Request* request) {
  return ialltoallv_call(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls,
                         recvtype, comm, request, [&] {
                           return PMPI_Ialltoallv_c(sendbuf, sendcounts, sdispls, sendtype, recvbuf,
                                                    recvcounts, rdispls, recvtype, comm, request);
                         });
}
TCOLL_PRELOAD_EXPORT int MPI_Igatherv_c(const void* sendbuf, MPI_Count sendcount,
                                        MPI_Datatype sendtype, void* recvbuf,
                                        const MPI_Count recvcounts[], const MPI_Aint displs[],
                                        MPI_Datatype recvtype, int root, MPI_Comm comm,
                                        MPI_Request* request) {
  return igatherv_call(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root,
                       comm, request, [&] {
                         return PMPI_Igatherv_c(sendbuf, sendcount, sendtype, recvbuf, recvcounts,
                                                displs, recvtype, root, comm, request);
                       });
}
TCOLL_PRELOAD_EXPORT int MPI_Iscatterv_c(const void* sendbuf, const MPI_Count sendcounts[],
                                         const MPI_Aint displs[], MPI_Datatype sendtype,
                                         void* recvbuf, MPI_Count recvcount, MPI_Datatype recvtype,
                                         int root, MPI_Comm comm, MPI_Request* request) {
  return iscatterv_call(sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root,
                        comm, request, [&] {
                          return PMPI_Iscatterv_c(sendbuf, sendcounts, displs, sendtype, recvbuf,
                                                  recvcount, recvtype, root, comm, request);
                        });
}
TCOLL_PRELOAD_EXPORT int MPI_Igather_c(const void* sendbuf, MPI_Count sendcount,
                                       MPI_Datatype sendtype, void* recvbuf, MPI_Count recvcount,
                                       MPI_Datatype recvtype, int root, MPI_Comm comm,
                                       MPI_Request* request) {
  return igather_call(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm,
                      request, [&] {
                        return PMPI_Igather_c(sendbuf, sendcount, sendtype, recvbuf, recvcount,
                                              recvtype, root, comm, request);
                      });
}
TCOLL_PRELOAD_EXPORT int MPI_Iscatter_c(const void* sendbuf, MPI_Count sendcount,
                                        MPI_Datatype sendtype, void* recvbuf, MPI_Count recvcount,
                                        MPI_Datatype recvtype, int root, MPI_Comm comm,
                                        MPI_Request* request) {
  return iscatter_call(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm,
                       request, [&] {
                         return PMPI_Iscatter_c(sendbuf, sendcount, sendtype, recvbuf, recvcount,
                                                recvtype, root, comm, request);
                       });
}
TCOLL_PRELOAD_EXPORT int MPI_Ireduce_scatter_c(const void* sendbuf, void* recvbuf,
                                               const MPI_Count recvcounts[], MPI_Datatype datatype,
                                               MPI_Op op, MPI_Comm comm, MPI_Request* request) {
  return ireduce_scatter_call(sendbuf, recvbuf, recvcounts, datatype, op, comm, request, [&] {
    return PMPI_Ireduce_scatter_c(sendbuf, recvbuf, recvcounts, datatype, op, comm, request);
  });
}
TCOLL_PRELOAD_EXPORT int MPI_Iallgatherv_c(const void* sendbuf, MPI_Count sendcount,
                                           MPI_Datatype sendtype, void* recvbuf,
                                           const MPI_Count recvcounts[], const MPI_Aint displs[],
                                           MPI_Datatype recvtype, MPI_Comm comm,
                                           MPI_Request* request) {
  return iallgatherv_call(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm,
                          request, [&] {
                            return PMPI_Iallgatherv_c(sendbuf, sendcount, sendtype, recvbuf,
                                                      recvcounts, displs, recvtype, comm, request);
                          });
}
#endif

#if TCOLL_PRELOAD_PERSISTENT
/// The persistent collectives: MPI-4's `MPI_<name>_init`, or Open MPI 4's `MPIX_<name>_init`
/// from its `pcollreq` extension. Each decides once, at the init call, as its non-blocking
/// form does (locally, the same rules and fallbacks); where tcoll runs it, every MPI_Start
/// queues it on the communicator's engine (`persistent_collective`), and reads the buffers
/// then.
#if TCOLL_PRELOAD_PERSISTENT == 1
#define TCOLL_INIT(name) MPI_##name##_init
#define TCOLL_PMPI_INIT(name) PMPI_##name##_init
#else
#define TCOLL_INIT(name) MPIX_##name##_init
#define TCOLL_PMPI_INIT(name) PMPIX_##name##_init
#endif

TCOLL_PRELOAD_EXPORT int TCOLL_INIT(Bcast)(void* buffer, int count, MPI_Datatype datatype, int root,
                                           MPI_Comm comm, MPI_Info info, MPI_Request* request) {
  return ibcast_call(
      buffer, count, datatype, root, comm, request,
      [&] { return TCOLL_PMPI_INIT(Bcast)(buffer, count, datatype, root, comm, info, request); },
      persistent(coll::bcast_init));
}
TCOLL_PRELOAD_EXPORT int TCOLL_INIT(Reduce)(const void* sendbuf, void* recvbuf, int count,
                                            MPI_Datatype datatype, MPI_Op op, int root,
                                            MPI_Comm comm, MPI_Info info, MPI_Request* request) {
  return ireduce_call(
      sendbuf, recvbuf, count, datatype, op, root, comm, request,
      [&] {
        return TCOLL_PMPI_INIT(Reduce)(sendbuf, recvbuf, count, datatype, op, root, comm, info,
                                       request);
      },
      persistent(coll::reduce_init));
}
TCOLL_PRELOAD_EXPORT int TCOLL_INIT(Allgather)(const void* sendbuf, int sendcount,
                                               MPI_Datatype sendtype, void* recvbuf, int recvcount,
                                               MPI_Datatype recvtype, MPI_Comm comm, MPI_Info info,
                                               MPI_Request* request) {
  return iblocks_call<collective::allgather>(
      sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, request,
      [&] {
        return TCOLL_PMPI_INIT(Allgather)(sendbuf, sendcount, sendtype, recvbuf, recvcount,
                                          recvtype, comm, info, request);
      },
      persistent(coll::allgather_init));
}
TCOLL_PRELOAD_EXPORT int TCOLL_INIT(Reduce_scatter_block)(const void* sendbuf, void* recvbuf,
                                                          int recvcount, MPI_Datatype datatype,
                                                          MPI_Op op, MPI_Comm comm, MPI_Info info,
                                                          MPI_Request* request) {
  return ireduce_scatter_block_call(
      sendbuf, recvbuf, recvcount, datatype, op, comm, request,
      [&] {
        return TCOLL_PMPI_INIT(Reduce_scatter_block)(sendbuf, recvbuf, recvcount, datatype, op,
                                                     comm, info, request);
      },
      persistent(coll::reduce_scatter_block_init));
}
TCOLL_PRELOAD_EXPORT int TCOLL_INIT(Alltoall)(const void* sendbuf, int sendcount,
                                              MPI_Datatype sendtype, void* recvbuf, int recvcount,
                                              MPI_Datatype recvtype, MPI_Comm comm, MPI_Info info,
                                              MPI_Request* request) {
  return iblocks_call<collective::alltoall>(
      sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, request,
      [&] {
        return TCOLL_PMPI_INIT(Alltoall)(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype,
                                         comm, info, request);
      },
      persistent(coll::alltoall_init));
}
TCOLL_PRELOAD_EXPORT int TCOLL_INIT(Gather)(const void* sendbuf, int sendcount,
                                            MPI_Datatype sendtype, void* recvbuf, int recvcount,
                                            MPI_Datatype recvtype, int root, MPI_Comm comm,
                                            MPI_Info info, MPI_Request* request) {
  return igather_call(
      sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm, request,
      [&] {
        return TCOLL_PMPI_INIT(Gather)(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype,
                                       root, comm, info, request);
      },
      persistent(coll::gather_init));
}
TCOLL_PRELOAD_EXPORT int TCOLL_INIT(Scatter)(const void* sendbuf, int sendcount,
                                             MPI_Datatype sendtype, void* recvbuf, int recvcount,
                                             MPI_Datatype recvtype, int root, MPI_Comm comm,
                                             MPI_Info info, MPI_Request* request) {
  return iscatter_call(
      sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm, request,
      [&] {
        return TCOLL_PMPI_INIT(Scatter)(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype,
                                        root, comm, info, request);
      },
      persistent(coll::scatter_init));
}
TCOLL_PRELOAD_EXPORT int TCOLL_INIT(Alltoallv)(const void* sendbuf, const int sendcounts[],
                                               const int sdispls[], MPI_Datatype sendtype,
                                               void* recvbuf, const int recvcounts[],
                                               const int rdispls[], MPI_Datatype recvtype,
                                               MPI_Comm comm, MPI_Info info, MPI_Request* request) {
  return ialltoallv_call(
      sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm, request,
      [&] {
        return TCOLL_PMPI_INIT(Alltoallv)(sendbuf, sendcounts, sdispls, sendtype, recvbuf,
                                          recvcounts, rdispls, recvtype, comm, info, request);
      },
      persistent(coll::alltoallv_init));
}
TCOLL_PRELOAD_EXPORT int TCOLL_INIT(Gatherv)(const void* sendbuf, int sendcount,
                                             MPI_Datatype sendtype, void* recvbuf,
                                             const int recvcounts[], const int displs[],
                                             MPI_Datatype recvtype, int root, MPI_Comm comm,
                                             MPI_Info info, MPI_Request* request) {
  return igatherv_call(
      sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root, comm, request,
      [&] {
        return TCOLL_PMPI_INIT(Gatherv)(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs,
                                        recvtype, root, comm, info, request);
      },
      persistent(coll::gatherv_init));
}
TCOLL_PRELOAD_EXPORT int TCOLL_INIT(Scatterv)(const void* sendbuf, const int sendcounts[],
                                              const int displs[], MPI_Datatype sendtype,
                                              void* recvbuf, int recvcount, MPI_Datatype recvtype,
                                              int root, MPI_Comm comm, MPI_Info info,
                                              MPI_Request* request) {
  return iscatterv_call(
      sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root, comm, request,
      [&] {
        return TCOLL_PMPI_INIT(Scatterv)(sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount,
                                         recvtype, root, comm, info, request);
      },
      persistent(coll::scatterv_init));
}
TCOLL_PRELOAD_EXPORT int TCOLL_INIT(Reduce_scatter)(const void* sendbuf, void* recvbuf,
                                                    const int recvcounts[], MPI_Datatype datatype,
                                                    MPI_Op op, MPI_Comm comm, MPI_Info info,
                                                    MPI_Request* request) {
  return ireduce_scatter_call(
      sendbuf, recvbuf, recvcounts, datatype, op, comm, request,
      [&] {
        return TCOLL_PMPI_INIT(Reduce_scatter)(sendbuf, recvbuf, recvcounts, datatype, op, comm,
                                               info, request);
      },
      persistent(coll::reduce_scatter_init));
}
TCOLL_PRELOAD_EXPORT int TCOLL_INIT(Allgatherv)(const void* sendbuf, int sendcount,
                                                MPI_Datatype sendtype, void* recvbuf,
                                                const int recvcounts[], const int displs[],
                                                MPI_Datatype recvtype, MPI_Comm comm, MPI_Info info,
                                                MPI_Request* request) {
  return iallgatherv_call(
      sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm, request,
      [&] {
        return TCOLL_PMPI_INIT(Allgatherv)(sendbuf, sendcount, sendtype, recvbuf, recvcounts,
                                           displs, recvtype, comm, info, request);
      },
      persistent(coll::allgatherv_init));
}
TCOLL_PRELOAD_EXPORT int TCOLL_INIT(Barrier)(MPI_Comm comm, MPI_Info info, MPI_Request* request) {
  return ibarrier_call(
      comm, request, [&] { return TCOLL_PMPI_INIT(Barrier)(comm, info, request); },
      persistent(coll::barrier_init));
}

#if TCOLL_PRELOAD_PERSISTENT == 1 && TCOLL_PRELOAD_LARGE_COUNT
/// MPI-4's large-count persistent forms (not in Open MPI 5): the same paths.
TCOLL_PRELOAD_EXPORT int MPI_Bcast_init_c(void* buffer, MPI_Count count, MPI_Datatype datatype,
                                          int root, MPI_Comm comm, MPI_Info info,
                                          MPI_Request* request) {
  return ibcast_call(
      buffer, count, datatype, root, comm, request,
      [&] { return PMPI_Bcast_init_c(buffer, count, datatype, root, comm, info, request); },
      persistent(coll::bcast_init));
}
TCOLL_PRELOAD_EXPORT int MPI_Reduce_init_c(const void* sendbuf, void* recvbuf, MPI_Count count,
                                           MPI_Datatype datatype, MPI_Op op, int root,
                                           MPI_Comm comm, MPI_Info info, MPI_Request* request) {
  return ireduce_call(
      sendbuf, recvbuf, count, datatype, op, root, comm, request,
      [&] {
        return PMPI_Reduce_init_c(sendbuf, recvbuf, count, datatype, op, root, comm, info, request);
      },
      persistent(coll::reduce_init));
}
TCOLL_PRELOAD_EXPORT int MPI_Allgather_init_c(const void* sendbuf, MPI_Count sendcount,
                                              MPI_Datatype sendtype, void* recvbuf,
                                              MPI_Count recvcount, MPI_Datatype recvtype,
                                              MPI_Comm comm, MPI_Info info, MPI_Request* request) {
  return iblocks_call<collective::allgather>(
      sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, request,
      [&] {
        return PMPI_Allgather_init_c(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype,
                                     comm, info, request);
      },
      persistent(coll::allgather_init));
}
TCOLL_PRELOAD_EXPORT int MPI_Reduce_scatter_block_init_c(const void* sendbuf, void* recvbuf,
                                                         MPI_Count recvcount, MPI_Datatype datatype,
                                                         MPI_Op op, MPI_Comm comm, MPI_Info info,
                                                         MPI_Request* request) {
  return ireduce_scatter_block_call(
      sendbuf, recvbuf, recvcount, datatype, op, comm, request,
      [&] {
        return PMPI_Reduce_scatter_block_init_c(sendbuf, recvbuf, recvcount, datatype, op, comm,
                                                info, request);
      },
      persistent(coll::reduce_scatter_block_init));
}
TCOLL_PRELOAD_EXPORT int MPI_Alltoall_init_c(const void* sendbuf, MPI_Count sendcount,
                                             MPI_Datatype sendtype, void* recvbuf,
                                             MPI_Count recvcount, MPI_Datatype recvtype,
                                             MPI_Comm comm, MPI_Info info, MPI_Request* request) {
  return iblocks_call<collective::alltoall>(
      sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, request,
      [&] {
        return PMPI_Alltoall_init_c(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype,
                                    comm, info, request);
      },
      persistent(coll::alltoall_init));
}
TCOLL_PRELOAD_EXPORT int MPI_Gather_init_c(const void* sendbuf, MPI_Count sendcount,
                                           MPI_Datatype sendtype, void* recvbuf,
                                           MPI_Count recvcount, MPI_Datatype recvtype, int root,
                                           MPI_Comm comm, MPI_Info info, MPI_Request* request) {
  return igather_call(
      sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm, request,
      [&] {
        return PMPI_Gather_init_c(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root,
                                  comm, info, request);
      },
      persistent(coll::gather_init));
}
TCOLL_PRELOAD_EXPORT int MPI_Scatter_init_c(const void* sendbuf, MPI_Count sendcount,
                                            MPI_Datatype sendtype, void* recvbuf,
                                            MPI_Count recvcount, MPI_Datatype recvtype, int root,
                                            MPI_Comm comm, MPI_Info info, MPI_Request* request) {
  return iscatter_call(
      sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm, request,
      [&] {
        return PMPI_Scatter_init_c(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root,
                                   comm, info, request);
      },
      persistent(coll::scatter_init));
}
TCOLL_PRELOAD_EXPORT int MPI_Alltoallv_init_c(const void* sendbuf, const MPI_Count sendcounts[],
                                              const MPI_Aint sdispls[], MPI_Datatype sendtype,
                                              void* recvbuf, const MPI_Count recvcounts[],
                                              const MPI_Aint rdispls[], MPI_Datatype recvtype,
                                              MPI_Comm comm, MPI_Info info, MPI_Request* request) {
  return ialltoallv_call(
      sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm, request,
      [&] {
        return PMPI_Alltoallv_init_c(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts,
                                     rdispls, recvtype, comm, info, request);
      },
      persistent(coll::alltoallv_init));
}
TCOLL_PRELOAD_EXPORT int MPI_Gatherv_init_c(const void* sendbuf, MPI_Count sendcount,
                                            MPI_Datatype sendtype, void* recvbuf,
                                            const MPI_Count recvcounts[], const MPI_Aint displs[],
                                            MPI_Datatype recvtype, int root, MPI_Comm comm,
                                            MPI_Info info, MPI_Request* request) {
  return igatherv_call(
      sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root, comm, request,
      [&] {
        return PMPI_Gatherv_init_c(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs,
                                   recvtype, root, comm, info, request);
      },
      persistent(coll::gatherv_init));
}
TCOLL_PRELOAD_EXPORT int MPI_Scatterv_init_c(const void* sendbuf, const MPI_Count sendcounts[],
                                             const MPI_Aint displs[], MPI_Datatype sendtype,
                                             void* recvbuf, MPI_Count recvcount,
                                             MPI_Datatype recvtype, int root, MPI_Comm comm,
                                             MPI_Info info, MPI_Request* request) {
  return iscatterv_call(
      sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root, comm, request,
      [&] {
        return PMPI_Scatterv_init_c(sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount,
                                    recvtype, root, comm, info, request);
      },
      persistent(coll::scatterv_init));
}
TCOLL_PRELOAD_EXPORT int MPI_Reduce_scatter_init_c(const void* sendbuf, void* recvbuf,
                                                   const MPI_Count recvcounts[],
                                                   MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
                                                   MPI_Info info, MPI_Request* request) {
  return ireduce_scatter_call(
      sendbuf, recvbuf, recvcounts, datatype, op, comm, request,
      [&] {
        return PMPI_Reduce_scatter_init_c(sendbuf, recvbuf, recvcounts, datatype, op, comm, info,
                                          request);
      },
      persistent(coll::reduce_scatter_init));
}
TCOLL_PRELOAD_EXPORT int MPI_Allgatherv_init_c(const void* sendbuf, MPI_Count sendcount,
                                               MPI_Datatype sendtype, void* recvbuf,
                                               const MPI_Count recvcounts[],
                                               const MPI_Aint displs[], MPI_Datatype recvtype,
                                               MPI_Comm comm, MPI_Info info, MPI_Request* request) {
  return iallgatherv_call(
      sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm, request,
      [&] {
        return PMPI_Allgatherv_init_c(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs,
                                      recvtype, comm, info, request);
      },
      persistent(coll::allgatherv_init));
}
#endif
#endif
