/// \file
/// libtcoll_mpi.so: the persistent requests of the collectives tcoll runs (see
/// `persistent_collective`), and MPI_Start, MPI_Startall and MPI_Request_free, which hand
/// every other request to MPI untouched.
#include "tcoll_mpi.hpp"

#include <exception>
#include <mutex>
#include <unordered_map>

#undef MPI_Request_free
#undef MPI_Start
#undef MPI_Startall

namespace tcoll::preload {
namespace {

/// The persistent collectives tcoll runs, by the user's request handle. `live` lets
/// MPI_Start skip the lookup while there are none (the common program: one relaxed load).
std::mutex persistent_mutex;
std::unordered_map<MPI_Request, std::unique_ptr<persistent_collective>> persistent_ops;
std::atomic<int> live{0};
int next_tag = 0; // under persistent_mutex

/// The private communicator of the completion messages: a duplicate of MPI_COMM_SELF whose
/// errors (the truncation that reports a failed run) return to MPI_Wait's caller.
MPI_Comm completion_self() {
  static MPI_Comm self = [] {
    MPI_Comm c = MPI_COMM_NULL;
    int rank = -1;
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    check_mpi(PMPI_Comm_dup(MPI_COMM_SELF, &c), "PMPI_Comm_dup(MPI_COMM_SELF)", rank);
    PMPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
    return c;
  }();
  return self;
}

/// A tag no live persistent collective uses (under persistent_mutex); MPI guarantees tags up
/// to 32767.
int free_tag() {
  for (;;) {
    const int tag = next_tag;
    next_tag = (next_tag + 1) % 32768;
    bool used = false;
    for (const auto& [handle, p] : persistent_ops)
      if (p->tag == tag) {
        used = true;
        break;
      }
    if (!used) return tag;
  }
}

/// Starts one run of `p` (the user's MPI_Start).
int start(persistent_collective& p) {
  {
    std::lock_guard lock(persistent_mutex);
    if (p.state == nullptr) {
      print_error(p.c, "MPI_Start: the communicator of this persistent request was freed");
      return MPI_ERR_COMM;
    }
    if (p.running) { // erroneous in MPI: the previous run was not completed by MPI_Wait/Test
      print_error(p.c, "MPI_Start on a persistent request that is still active");
      return MPI_ERR_REQUEST;
    }
    const int rc = PMPI_Start(&p.handle);
    if (rc != MPI_SUCCESS) return rc;
    p.running = true;
  }
  count_call(p.c, p.algorithm, p.bytes, p.comm);
  try {
    p.run(p);
  } catch (const std::exception& e) {
    finish_persistent(p, true); // nothing was queued: MPI_Wait sees the failure too
    return report_error(p.c, p.comm, MPI_ERR_OTHER, e.what());
  }
  return MPI_SUCCESS;
}

/// The persistent collective of `handle`, or null where it is any other request.
persistent_collective* find(MPI_Request handle) {
  if (live.load(std::memory_order_acquire) == 0) return nullptr;
  std::lock_guard lock(persistent_mutex);
  const auto it = persistent_ops.find(handle);
  return it == persistent_ops.end() || it->second->freed ? nullptr : it->second.get();
}

} // namespace

int make_persistent(std::unique_ptr<persistent_collective> p, MPI_Request* request) {
  static int nothing = 0; // the receive's (empty) buffer
  std::lock_guard lock(persistent_mutex);
  p->tag = free_tag();
  const int rc = PMPI_Recv_init(&nothing, 0, MPI_INT, 0, p->tag, completion_self(), &p->handle);
  if (rc != MPI_SUCCESS) return rc;
  *request = p->handle;
  persistent_ops.emplace(p->handle, std::move(p));
  live.fetch_add(1, std::memory_order_release);
  return MPI_SUCCESS;
}

void finish_persistent(persistent_collective& p, bool failed) noexcept {
  static const int failure = 1;
  std::lock_guard lock(persistent_mutex);
  // the receive is posted (MPI_Start activated it before queuing the run): this send to
  // oneself is matched at once and does not block
  PMPI_Send(&failure, failed ? 1 : 0, MPI_INT, 0, p.tag, completion_self());
  p.running = false;
  if (p.freed) { // MPI_Request_free came during the run: the request goes now
    MPI_Request handle = p.handle;
    persistent_ops.erase(handle); // destroys p
    live.fetch_sub(1, std::memory_order_release);
    PMPI_Request_free(&handle);
  }
}

void orphan_persistent(const comm_state* s) noexcept {
  if (live.load(std::memory_order_acquire) == 0) return;
  std::lock_guard lock(persistent_mutex);
  for (auto& [handle, p] : persistent_ops)
    if (p->state == s) p->state = nullptr;
}

} // namespace tcoll::preload

using namespace tcoll::preload;

/// MPI_Start: runs a persistent collective of tcoll's, hands every other request to MPI.
TCOLL_PRELOAD_EXPORT int MPI_Start(MPI_Request* request) {
  persistent_collective* p = request ? find(*request) : nullptr;
  return p ? start(*p) : PMPI_Start(request);
}

/// MPI_Startall: the requests in array order (the order in which MPI starts persistent
/// collectives), tcoll's through `start`, runs of MPI's in one PMPI_Startall each.
TCOLL_PRELOAD_EXPORT int MPI_Startall(int count, MPI_Request requests[]) {
  if (live.load(std::memory_order_acquire) == 0 || count <= 0 || requests == nullptr)
    return PMPI_Startall(count, requests);
  int first = 0; // of the run of MPI's requests not yet started
  for (int i = 0; i <= count; ++i) {
    persistent_collective* p = i < count ? find(requests[i]) : nullptr;
    if (i < count && p == nullptr) continue;
    if (i > first)
      if (const int rc = PMPI_Startall(i - first, requests + first); rc != MPI_SUCCESS) return rc;
    first = i + 1;
    if (p != nullptr)
      if (const int rc = start(*p); rc != MPI_SUCCESS) return rc;
  }
  return MPI_SUCCESS;
}

/// MPI_Request_free: a persistent collective of tcoll's goes with its receive. Freeing an
/// active one is erroneous in MPI (Open MPI rejects it); tcoll frees it at the end of its run
/// instead (until then its tag stays taken).
TCOLL_PRELOAD_EXPORT int MPI_Request_free(MPI_Request* request) {
  if (request == nullptr || live.load(std::memory_order_acquire) == 0)
    return PMPI_Request_free(request);
  {
    std::lock_guard lock(persistent_mutex);
    const auto it = persistent_ops.find(*request);
    if (it == persistent_ops.end() || it->second->freed) return PMPI_Request_free(request);
    if (it->second->running) { // finish_persistent frees it
      it->second->freed = true;
      *request = MPI_REQUEST_NULL;
      return MPI_SUCCESS;
    }
    persistent_ops.erase(it);
    live.fetch_sub(1, std::memory_order_release);
  }
  return PMPI_Request_free(request);
}
