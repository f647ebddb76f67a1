/// \file
/// libtcoll_mpi.so: settings, counters, per-communicator state, MPI_Finalize and the query
/// functions. The collectives themselves are in allreduce.cpp and collectives.cpp.
#include "tcoll_mpi.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <utility>

#include <tcoll/reduce/runtime.hpp>
#include <tcoll/schedule/engine.hpp>

// the runtime kernels of the whole library, compiled here only (preload/meson.build)
TCOLL_RUNTIME_KERNELS_INSTANCE

#undef MPI_Finalize

namespace tcoll::preload {

const char* coll_name(coll c) noexcept {
  static const char* const names[coll_count] = {"MPI_Allreduce",
                                                "MPI_Reduce_scatter_block",
                                                "MPI_Allgather",
                                                "MPI_Bcast",
                                                "MPI_Reduce",
                                                "MPI_Iallreduce",
                                                "MPI_Barrier",
                                                "MPI_Allreduce_init",
                                                "MPI_Reduce_scatter",
                                                "MPI_Allgatherv",
                                                "MPI_Alltoall",
                                                "MPI_Gather",
                                                "MPI_Scatter",
                                                "MPI_Alltoallv",
                                                "MPI_Gatherv",
                                                "MPI_Scatterv",
                                                "MPI_Ibcast",
                                                "MPI_Ireduce",
                                                "MPI_Iallgather",
                                                "MPI_Ireduce_scatter_block",
                                                "MPI_Ialltoall",
                                                "MPI_Igather",
                                                "MPI_Iscatter",
                                                "MPI_Ialltoallv",
                                                "MPI_Igatherv",
                                                "MPI_Iscatterv",
                                                "MPI_Ireduce_scatter",
                                                "MPI_Iallgatherv",
                                                "MPI_Ibarrier",
                                                "MPI_Bcast_init",
                                                "MPI_Reduce_init",
                                                "MPI_Allgather_init",
                                                "MPI_Reduce_scatter_block_init",
                                                "MPI_Alltoall_init",
                                                "MPI_Gather_init",
                                                "MPI_Scatter_init",
                                                "MPI_Alltoallv_init",
                                                "MPI_Gatherv_init",
                                                "MPI_Scatterv_init",
                                                "MPI_Reduce_scatter_init",
                                                "MPI_Allgatherv_init",
                                                "MPI_Barrier_init"};
  return names[static_cast<int>(c)];
}

const char* fallback_name(fallback f) noexcept {
  static const char* const names[fallback_count] = {"user-defined op",
                                                    "op not run by tcoll on this datatype",
                                                    "derived or unsupported datatype",
                                                    "intercommunicator",
                                                    "below MPI_THREAD_MULTIPLE",
                                                    "arguments left to MPI",
                                                    "MPI not initialised",
                                                    "communicator not yet set up",
                                                    "no spare core for tcoll's engine thread"};
  return names[static_cast<int>(f)];
}

namespace {

/// The collectives whose selection variable the preload reads (the table's): the others
/// share one of these (`settings::rules`).
constexpr coll ruled_collectives[] = {coll::allreduce, coll::reduce_scatter_block,
                                      coll::allgather, coll::bcast,
                                      coll::reduce,    coll::alltoall,
                                      coll::gather,    coll::scatter,
                                      coll::alltoallv, coll::gatherv,
                                      coll::scatterv,  coll::barrier};
// the parser's rule for sizes that the ranks of a call do not share is the preload's
static_assert(std::ranges::all_of(ruled_collectives, [](coll c) {
  return per_rank_size(c) == !tcoll::size_is_shared(collective_of(c));
}));

/// Parses the selection string `text` of collective `c` (read from `var`) with tcoll's
/// parser and the table's names (every one the table lists for `c` runs here). Throws
/// invalid_argument.
/// A collective of `per_rank_size` takes only rules that cover every size (0-max; the
/// parser's `size_is_shared`): its ranks do not share a size to choose by, and a rule
/// covering part of the sizes would route the ranks of one call differently.
std::vector<size_rule> parse_rules(coll c, std::string_view var, std::string_view text) {
  try {
    return parse_selection(text, collective_of(c));
  } catch (const invalid_argument& e) {
    throw invalid_argument(std::string(var) + "='" + std::string(text) + "': " + e.message());
  }
}

settings read_settings() {
  settings s;
  try {
    for (coll c : ruled_collectives) {
      const std::string var(describe(collective_of(c)).selection_variable);
      if (const char* v = std::getenv(var.c_str()))
        s.rules[static_cast<int>(c)] = parse_rules(c, var, v);
    }
    s.rules[static_cast<int>(coll::iallreduce)] = s.rules[static_cast<int>(coll::allreduce)];
    s.rules[static_cast<int>(coll::allreduce_init)] = s.rules[static_cast<int>(coll::allreduce)];
    // the uneven-count forms share the selection string of their even-count collective
    s.rules[static_cast<int>(coll::reduce_scatter)] =
        s.rules[static_cast<int>(coll::reduce_scatter_block)];
    s.rules[static_cast<int>(coll::allgatherv)] = s.rules[static_cast<int>(coll::allgather)];
    // the non-blocking forms share their blocking form's
    for (auto [nonblocking, blocking] :
         {std::pair{coll::ibcast, coll::bcast}, std::pair{coll::ireduce, coll::reduce},
          std::pair{coll::iallgather, coll::allgather},
          std::pair{coll::ireduce_scatter_block, coll::reduce_scatter_block},
          std::pair{coll::ialltoall, coll::alltoall}, std::pair{coll::igather, coll::gather},
          std::pair{coll::iscatter, coll::scatter}, std::pair{coll::ialltoallv, coll::alltoallv},
          std::pair{coll::igatherv, coll::gatherv}, std::pair{coll::iscatterv, coll::scatterv},
          std::pair{coll::ireduce_scatter, coll::reduce_scatter_block},
          std::pair{coll::iallgatherv, coll::allgather}, std::pair{coll::ibarrier, coll::barrier},
          // and so do the persistent forms
          std::pair{coll::bcast_init, coll::bcast}, std::pair{coll::reduce_init, coll::reduce},
          std::pair{coll::allgather_init, coll::allgather},
          std::pair{coll::reduce_scatter_block_init, coll::reduce_scatter_block},
          std::pair{coll::alltoall_init, coll::alltoall},
          std::pair{coll::gather_init, coll::gather}, std::pair{coll::scatter_init, coll::scatter},
          std::pair{coll::alltoallv_init, coll::alltoallv},
          std::pair{coll::gatherv_init, coll::gatherv},
          std::pair{coll::scatterv_init, coll::scatterv},
          std::pair{coll::reduce_scatter_init, coll::reduce_scatter_block},
          std::pair{coll::allgatherv_init, coll::allgather},
          std::pair{coll::barrier_init, coll::barrier}})
      s.rules[static_cast<int>(nonblocking)] = s.rules[static_cast<int>(blocking)];
    if (const char* v = std::getenv("TCOLL_DEBUG"); v && *v) {
      const std::string_view d(v);
      if (d == "0")
        s.debug = 0;
      else if (d == "1")
        s.debug = 1;
      else if (d == "2")
        s.debug = 2;
      else
        throw invalid_argument("TCOLL_DEBUG='" + std::string(d) + "': expected 0, 1 or 2");
    }
    if (const char* v = std::getenv("TCOLL_SHM"); v && *v) {
      const std::string_view d(v);
      if (d != "0" && d != "1")
        throw invalid_argument("TCOLL_SHM='" + std::string(d) + "': expected 0 or 1");
      s.shm = d == "1";
    }
    long seconds = 3600;
    if (const char* v = std::getenv("TCOLL_TIMEOUT"); v && *v) {
      char* end = nullptr;
      seconds = std::strtol(v, &end, 10);
      if (*end != '\0' || seconds <= 0 || seconds > 24L * 3600 * 365)
        throw invalid_argument("TCOLL_TIMEOUT='" + std::string(v) +
                               "': expected a positive number of seconds");
    }
    s.timeout = std::chrono::seconds(seconds);
  } catch (const std::exception& e) {
    s.error = e.what();
  }
  return s;
}

// Counters. The totals are always kept (tcoll_mpi_counts); the table by algorithm and size
// only under TCOLL_DEBUG.
constexpr int size_buckets = 65; // 0 bytes, then [2^k, 2^(k+1)) for k = 0..63
/// By algorithm (`algorithm_id`), and in the last column the calls that moved nothing.
constexpr int empty_column = static_cast<int>(all_algorithm_ids.size());
std::atomic<unsigned long long> by_algo[coll_count][empty_column + 1][size_buckets];
std::atomic<unsigned long long> by_reason[coll_count][fallback_count];
std::atomic<unsigned long long> shm_calls[coll_count];
std::atomic<unsigned long long> packed_calls[coll_count];
std::atomic<unsigned long long> large_count_calls[coll_count];

int bucket_of(std::size_t bytes) {
  if (bytes == 0) return 0;
  int k = 0;
  while (bytes >>= 1) ++k;
  return k + 1;
}

/// "4K" style text of a power of two.
std::string pow2_text(int k) {
  static const char* const unit[] = {"", "K", "M", "G", "T", "P", "E"};
  return std::to_string(1ull << (k % 10)) + unit[k / 10];
}

int world_rank() {
  int r = -1;
  if (mpi_active()) PMPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

/// Writes `text` to stderr in one call (lines of several ranks do not interleave).
void emit(const std::string& text) {
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(2, text.data() + done, text.size() - done);
    if (n <= 0) break;
    done += static_cast<std::size_t>(n);
  }
}

std::string prefix() {
  return "tcoll_mpi[rank " + std::to_string(world_rank()) + "]: ";
}

void print_summary() {
  const std::string p = prefix();
  std::string out = p + "summary: " + std::to_string(through_total.load()) +
                    " calls through tcoll (passthrough included), " +
                    std::to_string(fallback_total.load()) + " fell back to PMPI\n";
  for (int c = 0; c < coll_count; ++c) {
    for (int a = 0; a <= empty_column; ++a)
      for (int b = 0; b < size_buckets; ++b)
        if (const auto n = by_algo[c][a][b].load()) {
          std::string range = "0 B";
          if (b > 0) {
            range = "[";
            range += pow2_text(b - 1);
            range += ", ";
            range += pow2_text(b);
            range += ") B";
          }
          out += p + "  " + coll_name(static_cast<coll>(c)) + " " +
                 std::string(a == empty_column ? "empty"
                                               : to_string(all_algorithm_ids[std::size_t(a)])) +
                 " " + range + ": " + std::to_string(n) + " calls\n";
        }
    if (const auto n = shm_calls[c].load())
      out += p + "  " + coll_name(static_cast<coll>(c)) +
             " over shared memory (shm_transport): " + std::to_string(n) + " calls\n";
    if (const auto n = packed_calls[c].load())
      out += p + "  " + coll_name(static_cast<coll>(c)) +
             " with a derived datatype packed on this rank: " + std::to_string(n) + " calls\n";
    if (const auto n = large_count_calls[c].load())
      out += p + "  " + coll_name(static_cast<coll>(c)) + " as " + coll_name(static_cast<coll>(c)) +
             "_c (large count) through tcoll: " + std::to_string(n) + " calls\n";
    for (int f = 0; f < fallback_count; ++f)
      if (const auto n = by_reason[c][f].load())
        out += p + "  " + coll_name(static_cast<coll>(c)) + " fallback (" +
               fallback_name(static_cast<fallback>(f)) + "): " + std::to_string(n) + " calls\n";
  }
  emit(out);
}

// Per-communicator state: an attribute whose delete callback frees it, and a registry so
// that MPI_Finalize can free what the user never freed while MPI still works.
std::mutex registry_mutex;
std::set<comm_state*> registry;
int keyval = MPI_KEYVAL_INVALID;
std::once_flag keyval_once;

void forget_communicators() noexcept {
  comm_generation.fetch_add(1, std::memory_order_acq_rel);
}

int delete_state(MPI_Comm, int, void* value, void*) {
  forget_communicators();
  auto* s = static_cast<comm_state*>(value);
  {
    std::lock_guard lock(registry_mutex);
    registry.erase(s);
  }
  delete s; // frees the duplicate communicators (noexcept)
  return MPI_SUCCESS;
}

} // namespace

settings load_settings() {
  return read_settings();
}

const settings& load_config() {
  static const settings s = load_settings();
  loaded_settings.store(&s, std::memory_order_release);
  return s;
}

bool chosen_by_rule(coll c, std::size_t bytes) {
  if (per_rank_size(c)) return !config().rules[static_cast<int>(c)].empty();
  return first_rule_covering(config().rules[static_cast<int>(c)], bytes) != nullptr;
}

algorithm_id choose_shared_memory(std::size_t bytes, int ranks) {
  const settings& s = config();
  if (bytes < s.shm_native_below_bytes) return algorithm_id::passthrough;
  return s.shm_choice.choose(bytes, ranks);
}

algorithm_id in_segment_here(coll c, MPI_Comm comm) {
  // MPI_Reduce_scatter shares its even form's rules but has no form in the area;
  // MPI_Allgatherv reaches here only with blocks of one size (allgatherv_call)
  if (c == coll::reduce_scatter) return algorithm_id::ring;
  if (tcoll::shm_transport* t = state_of(comm).shared_memory())
    if (t->segment_area().usable_here()) return algorithm_id::in_segment;
  const collective k = collective_of(c);
  if (k == collective::allreduce) return algorithm_id::recursive_doubling;
  // the barrier: dissemination over messages would be slower than MPI's own
  if (k == collective::barrier) return algorithm_id::passthrough;
  return algorithms_of(k).front(); // the tree or the ring
}

algorithm_id choose(coll c, std::size_t bytes) {
  const settings& s = config();
  // the rules of a per-rank-size collective cover 0-max (parse_rules): the first one decides
  if (per_rank_size(c))
    return s.rules[static_cast<int>(c)].empty() ? algorithm_id::passthrough
                                                : s.rules[static_cast<int>(c)].front().algorithm;
  if (const size_rule* r = first_rule_covering(s.rules[static_cast<int>(c)], bytes))
    return r->algorithm;
  if (bytes <= s.native_below_bytes) return algorithm_id::passthrough;
  const collective k = collective_of(c);
  // tcoll's built-in allreduce choice without the environment's rules (read above); the
  // other collectives' algorithm on a transport
  if (k == collective::allreduce)
    return automatic{.rules = {}}.choose(bytes, /*commutative=*/true, /*has_native=*/true);
  // over MPI point-to-point tcoll's exchange loses to MPI's own all-to-all at every size
  if (k == collective::alltoall) return algorithm_id::passthrough;
  // tcoll's linear gather and scatter over MPI point-to-point are MPI's basic linear
  // algorithms with the wrapper's cost on top: MPI's own
  if (k == collective::gather || k == collective::scatter) return algorithm_id::passthrough;
  return algorithms_of(k).front();
}

void count_call_debug(coll c, algorithm_id a, std::size_t bytes, MPI_Comm comm) {
  const int d = config().debug;
  by_algo[static_cast<int>(c)][static_cast<int>(a)][bucket_of(bytes)].fetch_add(
      1, std::memory_order_relaxed);
  if (d >= 2) {
    int size = 0;
    PMPI_Comm_size(comm, &size);
    emit(prefix() + coll_name(c) + " " + std::to_string(bytes) + " B on " + std::to_string(size) +
         " ranks: " + std::string(to_string(a)) + "\n");
  }
}

int count_empty_call_debug(coll c, MPI_Comm comm) {
  const int d = config().debug;
  by_algo[static_cast<int>(c)][empty_column][0].fetch_add(1, std::memory_order_relaxed);
  if (d >= 2) {
    int size = 0;
    PMPI_Comm_size(comm, &size);
    emit(prefix() + coll_name(c) + " 0 B on " + std::to_string(size) + " ranks: empty\n");
  }
  return MPI_SUCCESS;
}

void count_shared_memory(coll c) {
  if (config().debug) shm_calls[static_cast<int>(c)].fetch_add(1, std::memory_order_relaxed);
}

void count_packed(coll c) {
  if (config().debug) packed_calls[static_cast<int>(c)].fetch_add(1, std::memory_order_relaxed);
}

void count_large_count(coll c) {
  if (config().debug)
    large_count_calls[static_cast<int>(c)].fetch_add(1, std::memory_order_relaxed);
}

void count_fallback_debug(coll c, fallback why) {
  const int d = config().debug;
  by_reason[static_cast<int>(c)][static_cast<int>(why)].fetch_add(1, std::memory_order_relaxed);
  if (d >= 2) emit(prefix() + coll_name(c) + ": PMPI fallback (" + fallback_name(why) + ")\n");
}

bool mpi_active_slow() noexcept {
  int initialized = 0, finalized = 0;
  PMPI_Initialized(&initialized);
  PMPI_Finalized(&finalized);
  if (!initialized || finalized) return false;
  int expected = 0;
  mpi_state.compare_exchange_strong(expected, 1);
  return mpi_state.load() == 1;
}

void print_error(coll c, const std::string& what) {
  emit(prefix() + coll_name(c) + " failed: " + what + "\n");
}

int report_error(coll c, MPI_Comm comm, int code, const std::string& what) {
  print_error(c, what);
  const int rc = PMPI_Comm_call_errhandler(comm, code);
  (void)rc;
  return code;
}

int report_settings_error(coll c, MPI_Comm comm) {
  return report_error(c, comm, MPI_ERR_ARG, "invalid environment: " + config().error);
}

/// Waits (at most TCOLL_TIMEOUT, then throws timeout_error) until every rank of `s` has
/// reached this point, before a blocking creation step. `what` names it for errors.
static void join(const comm_state& s, const char* what) {
  const MPI_Comm user = s.user;
  const int rank = s.rank, size = s.size;
  // MPI_Comm_dup and MPI_Comm_split block without a timeout until every rank calls them. An
  // MPI_Ibarrier polled against TCOLL_TIMEOUT first makes sure every rank is here (after it
  // the creation is bounded), so a rank that never joins is reported instead of hanging.
  MPI_Request q = MPI_REQUEST_NULL;
  check_mpi(PMPI_Ibarrier(user, &q), "PMPI_Ibarrier", rank);
  const auto started = clock::now();
  const auto until = started + config().timeout;
  for (;;) {
    int done = 0;
    check_mpi(PMPI_Test(&q, &done, MPI_STATUS_IGNORE), "PMPI_Test(PMPI_Ibarrier)", rank);
    if (done) return;
    const auto now = clock::now();
    if (now >= until) // the request stays with MPI (a collective cannot be cancelled)
      throw timeout_error(std::string("creating tcoll's transport for ") + what +
                              ": not every rank of the communicator (size " + std::to_string(size) +
                              ") arrived within " +
                              std::to_string(config().timeout.count() / 1000) +
                              " s (TCOLL_TIMEOUT)",
                          rank);
    if (now - started > std::chrono::milliseconds(1)) std::this_thread::yield();
  }
}

void comm_state::agree_engine_core(int local_size) {
  if (engine_core_known) return;
  // a core for each rank's waiting thread and one for its engine: this rank may run on two
  // CPUs or more, and its node has twice as many CPUs as it has ranks of the communicator
  if (local_size < 1 && size == 1) local_size = 1;
  if (local_size < 1) {
    MPI_Comm local = MPI_COMM_NULL;
    check_mpi(PMPI_Comm_split_type(user, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local),
              "PMPI_Comm_split_type", rank);
    PMPI_Comm_size(local, &local_size);
    PMPI_Comm_free(&local);
  }
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  int spare = sched_getaffinity(0, sizeof cpus, &cpus) == 0 && CPU_COUNT(&cpus) > 1 &&
                      online >= 2L * local_size
                  ? 1
                  : 0;
  if (size > 1)
    check_mpi(PMPI_Allreduce(MPI_IN_PLACE, &spare, 1, MPI_INT, MPI_MIN, user),
              "PMPI_Allreduce(engine core)", rank);
  engine_core = spare != 0;
  engine_core_known = true;
}

mpi_transport& comm_state::transport() {
  if (!flat) {
    join(*this, "its first collective");
    mpi_options o;
    o.timeout = config().timeout;
    flat = std::make_unique<mpi_transport>(user, o);
    agree_engine_core();
  }
  return *flat;
}

shm_transport* comm_state::shared_memory() {
  if (node_checked) return node.get();
  node_checked = true;
  // TCOLL_SHM must be the same on every rank, like every TCOLL_ setting
  if (!config().shm || size == 1) return nullptr;
  join(*this, "shared memory");
  MPI_Comm local = MPI_COMM_NULL;
  check_mpi(PMPI_Comm_split_type(user, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local),
            "PMPI_Comm_split_type", rank);
  int local_size = 0;
  PMPI_Comm_size(local, &local_size);
  PMPI_Comm_free(&local);
  // the same answer on every rank: either every rank shares the node or none sees all
  if (local_size == size) {
    shm_options o;
    o.timeout = config().timeout;
    node = std::make_unique<shm_transport>(user, o);
  }
  agree_engine_core(local_size);
  return node.get();
}

hierarchical<mpi_transport, mpi_transport>& comm_state::hierarchy() {
  if (!hier) {
    const bool fresh = !flat;
    mpi_transport& t = transport(); // joins when it creates the flat transport
    if (!fresh) join(*this, "hierarchical");
    intra = std::make_unique<mpi_transport>(t.split_shared());
    inter = std::make_unique<mpi_transport>(t.split(intra->rank(), rank));
    int local = intra->size(), shards = 0;
    check_mpi(PMPI_Allreduce(&local, &shards, 1, MPI_INT, MPI_MIN, user),
              "PMPI_Allreduce(group size)", rank);
    // where every rank sits (the collectives but allreduce place blocks by world rank): each
    // node's leader is its lowest world rank (intra is split with the rank as key)
    int leader_and_local[2] = {rank, intra->rank()};
    tcoll::allreduce(*intra, &leader_and_local[0], &leader_and_local[0], 1, min_op{});
    std::vector<int> all(2 * static_cast<std::size_t>(size));
    check_mpi(PMPI_Allgather(leader_and_local, 2, MPI_INT, all.data(), 2, MPI_INT, user),
              "PMPI_Allgather(group leaders)", rank);
    hierarchy_shape shape{rank, size, shards};
    shape.groups = groups_from_leaders(all);
    if (intra->rank() < shards) { // inter orders its nodes by world rank, not by their leaders'
      shape.inter_world_ranks.resize(static_cast<std::size_t>(inter->size()));
      tcoll::allgather(*inter, &rank, shape.inter_world_ranks.data(), 1);
    }
    hier = std::make_unique<hierarchical<mpi_transport, mpi_transport>>(
        *intra, intra->rank() < shards ? inter.get() : nullptr, std::move(shape));
  }
  return *hier;
}

hierarchical<shm_transport, mpi_transport>* comm_state::shm_hierarchy() {
  if (!config().shm) return nullptr; // the same on every rank, like every TCOLL_ setting
  if (!node_hier) {
    join(*this, "hierarchical");
    node_hierarchy_options o;
    o.intra.timeout = config().timeout;
    o.inter.timeout = config().timeout;
    node_hier = std::make_unique<mpi_node_hierarchy>(user, o);
  }
  return &node_hier->get();
}

comm_state::~comm_state() {
  // every transport whose engine may run this communicator's MPI_Iallreduce calls
  const std::array<collective_context*, 6> contexts = {
      flat ? &flat->collectives() : nullptr,
      intra ? &intra->collectives() : nullptr,
      inter ? &inter->collectives() : nullptr,
      node ? &node->collectives() : nullptr,
      node_hier ? &node_hier->intra().collectives() : nullptr,
      node_hier && node_hier->inter() ? &node_hier->inter()->collectives() : nullptr};
  // pending calls finish first (every rank frees the communicator, so its peers run theirs
  // too), then no engine may outlive what its collectives use (hier uses intra and inter)
  for (collective_context* c : contexts)
    if (c) (void)tcoll::wait_engine_idle(*c, config().timeout);
  for (collective_context* c : contexts)
    if (c) c->detach();
  orphan_persistent(this);
  if (pending_setup) pending_setups.fetch_sub(1, std::memory_order_relaxed);
}

void comm_state::want_setup(unsigned what) {
  if (!what) return;
  if (!pending_setup) pending_setups.fetch_add(1, std::memory_order_relaxed);
  pending_setup |= what;
}

void comm_state::settle() {
  const unsigned what = std::exchange(pending_setup, 0u);
  if (!what) return;
  pending_setups.fetch_sub(1, std::memory_order_relaxed);
  if (what & setup_flat)
    if (!shared_memory()) transport();
  if (what & setup_hierarchy) on_hierarchy([](auto&) {});
}

int settle_pending_setup_slow(coll c, MPI_Comm comm) {
  if (comm == MPI_COMM_NULL || keyval == MPI_KEYVAL_INVALID) return MPI_SUCCESS;
  void* value = nullptr;
  int found = 0;
  if (PMPI_Comm_get_attr(comm, keyval, &value, &found) != MPI_SUCCESS || !found)
    return MPI_SUCCESS; // MPI judges a bad handle itself; no state, nothing pending
  try {
    static_cast<comm_state*>(value)->settle();
  } catch (const std::exception& e) {
    return report_error(c, comm, MPI_ERR_OTHER, e.what());
  }
  return MPI_SUCCESS;
}

std::byte* comm_state::scratch_bytes(std::size_t bytes) {
  if (scratch.size() < bytes) scratch.resize(bytes);
  return scratch.data();
}

namespace {
/// The attribute that carries a communicator's facts (`comm_facts`, packed into the value:
/// rank << 32 | size << 1 | inter), so that a thread that has not seen the communicator
/// learns them with one attribute lookup instead of three queries; its delete callback
/// tells the remembering threads that a handle may be reused.
int facts_keyval = MPI_KEYVAL_INVALID;
std::once_flag facts_keyval_once;

int delete_facts(MPI_Comm, int, void*, void*) {
  forget_communicators();
  return MPI_SUCCESS;
}

void* pack_facts(const comm_facts& f) {
  return reinterpret_cast<void*>(static_cast<std::uintptr_t>(f.rank) << 32 |
                                 static_cast<std::uintptr_t>(f.size) << 1 |
                                 static_cast<std::uintptr_t>(f.inter));
}

comm_facts unpack_facts(void* value) {
  const auto v = reinterpret_cast<std::uintptr_t>(value);
  return {static_cast<int>(v >> 32), static_cast<int>((v >> 1) & 0x7fffffffu), (v & 1u) != 0};
}

/// A communicator this thread has asked about, in the generation it asked in, with its
/// facts and (once some wrapper looked it up) its tcoll state.
struct known_comm {
  MPI_Comm comm = MPI_COMM_NULL;
  unsigned long long generation = 0;
  comm_facts facts;
  comm_state* state = nullptr;
};
/// Four per thread, replaced in turn: a program that alternates between a row and a column
/// communicator (and the world) keeps all of them.
constexpr int known_comm_slots = 4;
thread_local known_comm known_comms[known_comm_slots];
thread_local int next_known_slot = 0;

known_comm* find_known(MPI_Comm comm) {
  const unsigned long long g = comm_generation.load(std::memory_order_acquire);
  for (known_comm& k : known_comms)
    if (k.comm == comm && k.generation == g) return &k;
  return nullptr;
}

/// Remembers `comm` (not MPI_COMM_NULL) on this thread: from its facts attribute, else from
/// MPI's queries (then the attribute is set). Null where MPI rejects the handle: the caller
/// then asks MPI itself, which reports it.
known_comm* learn(MPI_Comm comm) {
  const unsigned long long g = comm_generation.load(std::memory_order_acquire);
  std::call_once(facts_keyval_once, [] {
    check_mpi(PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, &delete_facts, &facts_keyval, nullptr),
              "PMPI_Comm_create_keyval", world_rank());
  });
  void* value = nullptr;
  int found = 0;
  if (PMPI_Comm_get_attr(comm, facts_keyval, &value, &found) != MPI_SUCCESS) return nullptr;
  comm_facts f;
  if (found) {
    f = unpack_facts(value);
  } else {
    int inter = 0;
    if (PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS ||
        PMPI_Comm_rank(comm, &f.rank) != MPI_SUCCESS ||
        PMPI_Comm_size(comm, &f.size) != MPI_SUCCESS ||
        PMPI_Comm_set_attr(comm, facts_keyval, pack_facts(f = {f.rank, f.size, inter != 0})) !=
            MPI_SUCCESS)
      return nullptr;
  }
  known_comm& k = known_comms[next_known_slot];
  next_known_slot = (next_known_slot + 1) % known_comm_slots;
  k = {comm, g, f, nullptr};
  return &k;
}

/// `state_of` without remembering: the attribute, or a new state.
comm_state& state_lookup(MPI_Comm comm);
} // namespace

bool freeing_is_seen(MPI_Comm comm) {
  return comm == MPI_COMM_WORLD || comm == MPI_COMM_SELF || find_known(comm) != nullptr;
}

comm_facts facts_of(MPI_Comm comm) {
  if (known_comm* k = find_known(comm)) return k->facts;
  if (known_comm* k = learn(comm)) return k->facts;
  comm_facts f;
  int inter = 0;
  PMPI_Comm_test_inter(comm, &inter);
  PMPI_Comm_rank(comm, &f.rank);
  PMPI_Comm_size(comm, &f.size);
  f.inter = inter != 0;
  return f;
}

comm_state& state_of(MPI_Comm comm) {
  known_comm* k = find_known(comm);
  if (k && k->state) return *k->state;
  if (!k) k = learn(comm);
  comm_state& s = state_lookup(comm);
  if (k) k->state = &s;
  return s;
}

namespace {
comm_state& state_lookup(MPI_Comm comm) {
  std::call_once(keyval_once, [] {
    check_mpi(PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, &delete_state, &keyval, nullptr),
              "PMPI_Comm_create_keyval", world_rank());
  });
  void* value = nullptr;
  int found = 0;
  check_mpi(PMPI_Comm_get_attr(comm, keyval, &value, &found), "PMPI_Comm_get_attr", world_rank());
  if (found) return *static_cast<comm_state*>(value);
  auto s = std::make_unique<comm_state>();
  s->user = comm;
  PMPI_Comm_rank(comm, &s->rank);
  PMPI_Comm_size(comm, &s->size);
  check_mpi(PMPI_Comm_set_attr(comm, keyval, s.get()), "PMPI_Comm_set_attr", world_rank());
  std::lock_guard lock(registry_mutex);
  registry.insert(s.get());
  return *s.release();
}
} // namespace

bool is_intercomm(MPI_Comm comm) {
  // the predefined communicators are intracommunicators: no query (MPICH takes its global
  // lock in every call at MPI_THREAD_MULTIPLE, queries included)
  if (comm == MPI_COMM_NULL || comm == MPI_COMM_WORLD || comm == MPI_COMM_SELF) return false;
  return facts_of(comm).inter;
}

namespace {
enum class cls { sint, uint, real, byte };
struct named_type {
  MPI_Datatype type;
  cls kind;
};
/// The predefined C integer and floating types (and MPI_BYTE for the bitwise ops).
const std::vector<named_type>& reducible_types() {
  static const std::vector<named_type> table = [] {
    std::vector<named_type> table = {
        {MPI_INT, cls::sint},
        {MPI_FLOAT, cls::real},
        {MPI_DOUBLE, cls::real},
        {MPI_LONG, cls::sint},
        {MPI_UNSIGNED, cls::uint},
        {MPI_UNSIGNED_LONG, cls::uint},
        {MPI_LONG_LONG_INT, cls::sint},
        {MPI_LONG_LONG, cls::sint},
        {MPI_UNSIGNED_LONG_LONG, cls::uint},
        {MPI_SHORT, cls::sint},
        {MPI_UNSIGNED_SHORT, cls::uint},
        {MPI_SIGNED_CHAR, cls::sint},
        {MPI_UNSIGNED_CHAR, cls::uint},
        {MPI_INT8_T, cls::sint},
        {MPI_INT16_T, cls::sint},
        {MPI_INT32_T, cls::sint},
        {MPI_INT64_T, cls::sint},
        {MPI_UINT8_T, cls::uint},
        {MPI_UINT16_T, cls::uint},
        {MPI_UINT32_T, cls::uint},
        {MPI_UINT64_T, cls::uint},
        {MPI_AINT, cls::sint},
        {MPI_OFFSET, cls::sint},
        {MPI_COUNT, cls::sint},
        {MPI_LONG_DOUBLE, cls::real},
        {MPI_BYTE, cls::byte},
        // Fortran's named types, as a Fortran program passes them (MPICH's Fortran bindings
        // call the C entry points, so the preload sees those calls). Not MPI_REAL16: Fortran's
        // 16-byte real is binary128, not x86's 80-bit long double. MPI_LOGICAL's values are
        // the compiler's, not C's zero/non-zero: its logical ops stay with MPI.
        {MPI_INTEGER, cls::sint},
        {MPI_REAL, cls::real},
        {MPI_DOUBLE_PRECISION, cls::real},
        {MPI_INTEGER1, cls::sint},
        {MPI_INTEGER2, cls::sint},
        {MPI_INTEGER4, cls::sint},
        {MPI_INTEGER8, cls::sint},
        {MPI_REAL4, cls::real},
        {MPI_REAL8, cls::real},
    };
    // an MPI without a Fortran type defines its handle as MPI_DATATYPE_NULL
    table.erase(std::remove_if(table.begin(), table.end(),
                               [](const named_type& t) { return t.type == MPI_DATATYPE_NULL; }),
                table.end());
    return table;
  }();
  return table;
}
} // namespace

namespace {
reduction classify_uncached(MPI_Datatype type, MPI_Op op);
} // namespace

reduction classify_reduction(MPI_Datatype type, MPI_Op op) {
  // Programs repeat the same (type, op): one remembered answer per thread skips the table
  // scan and MPI_Type_size. Only predefined ops and types are remembered (their handles
  // never change meaning; a freed user op's handle could be reused).
  thread_local MPI_Datatype last_type = MPI_DATATYPE_NULL;
  thread_local MPI_Op last_op = MPI_OP_NULL;
  thread_local reduction last;
  if (type == last_type && op == last_op && type != MPI_DATATYPE_NULL) return last;
  const reduction r = classify_uncached(type, op);
  if (r.ok()) last_type = type, last_op = op, last = r;
  return r;
}

namespace {
reduction classify_uncached(MPI_Datatype type, MPI_Op op) {
  reduction r;
  std::optional<reduce_kind> o;
  if (op == MPI_SUM)
    o = reduce_kind::sum;
  else if (op == MPI_PROD)
    o = reduce_kind::prod;
  else if (op == MPI_MIN)
    o = reduce_kind::min;
  else if (op == MPI_MAX)
    o = reduce_kind::max;
  else if (op == MPI_BAND)
    o = reduce_kind::band;
  else if (op == MPI_BOR)
    o = reduce_kind::bor;
  else if (op == MPI_BXOR)
    o = reduce_kind::bxor;
  else if (op == MPI_LAND)
    o = reduce_kind::land;
  else if (op == MPI_LOR)
    o = reduce_kind::lor;
  else if (op == MPI_LXOR)
    o = reduce_kind::lxor;
  if (!o) {
    // MPI_MAXLOC, MPI_MINLOC, MPI_REPLACE, MPI_NO_OP are predefined; anything else is a user op.
    const bool predefined = op == MPI_MAXLOC || op == MPI_MINLOC || op == MPI_REPLACE ||
                            op == MPI_NO_OP || op == MPI_OP_NULL;
    r.why = predefined ? fallback::op_type : fallback::user_op;
    return r;
  }
  const auto& table = reducible_types();
  const auto it =
      std::find_if(table.begin(), table.end(), [&](const named_type& n) { return n.type == type; });
  if (it == table.end()) {
    r.why = fallback::datatype;
    return r;
  }
  int size = 0;
  PMPI_Type_size(type, &size);
  const bool bitwise = o == reduce_kind::band || o == reduce_kind::bor || o == reduce_kind::bxor;
  const bool logical = o == reduce_kind::land || o == reduce_kind::lor || o == reduce_kind::lxor;
  const bool order = o == reduce_kind::min || o == reduce_kind::max;
  r.why = fallback::op_type;
  if (it->kind == cls::real) {
    if (bitwise || logical) return r;
    if (size == 4)
      r.type = scalar_type::float32;
    else if (size == 8)
      r.type = scalar_type::float64;
    else if (size == static_cast<int>(sizeof(long double)))
      r.type = scalar_type::long_double;
    else {
      r.why = fallback::datatype;
      return r;
    }
  } else {
    if (it->kind == cls::byte && !bitwise) return r;
    const bool keep_sign = it->kind == cls::sint && order;
    switch (size) {
    case 1:
      r.type = keep_sign ? scalar_type::int8 : scalar_type::uint8;
      break;
    case 2:
      r.type = keep_sign ? scalar_type::int16 : scalar_type::uint16;
      break;
    case 4:
      r.type = keep_sign ? scalar_type::int32 : scalar_type::uint32;
      break;
    case 8:
      r.type = keep_sign ? scalar_type::int64 : scalar_type::uint64;
      break;
    default:
      r.why = fallback::datatype;
      return r;
    }
  }
  r.op = *o;
  r.size = static_cast<std::size_t>(size);
  return r;
}

} // namespace

namespace {
std::size_t contiguous_size_uncached(MPI_Datatype type);
} // namespace

std::size_t contiguous_size(MPI_Datatype type) {
  // One remembered answer per thread, as classify_reduction: three datatype queries (each
  // taking MPICH's global lock at MPI_THREAD_MULTIPLE) were a third of a passthrough call's
  // cost. Only predefined types give a non-zero size, and their handles never change meaning.
  thread_local MPI_Datatype last_type = MPI_DATATYPE_NULL;
  thread_local std::size_t last_size = 0;
  if (type == last_type && type != MPI_DATATYPE_NULL) return last_size;
  const std::size_t size = contiguous_size_uncached(type);
  if (size != 0) last_type = type, last_size = size;
  return size;
}

namespace {
std::size_t contiguous_size_uncached(MPI_Datatype type) {
  if (type == MPI_DATATYPE_NULL) return 0;
  int ints = 0, addrs = 0, types = 0, combiner = 0;
  if (PMPI_Type_get_envelope(type, &ints, &addrs, &types, &combiner) != MPI_SUCCESS ||
      combiner != MPI_COMBINER_NAMED)
    return 0;
  int size = 0;
  MPI_Aint lb = 0, extent = 0;
  if (PMPI_Type_size(type, &size) != MPI_SUCCESS ||
      PMPI_Type_get_extent(type, &lb, &extent) != MPI_SUCCESS)
    return 0;
  if (size <= 0 || lb != 0 || extent != size) return 0;
  return static_cast<std::size_t>(size);
}
} // namespace

long long signature_bytes(long long count, MPI_Datatype type) {
  if (count < 0 || type == MPI_DATATYPE_NULL) return -1;
  MPI_Count size = 0;
  if (PMPI_Type_size_x(type, &size) != MPI_SUCCESS || size < 0 || size == MPI_UNDEFINED) return -1;
  if (size > 0 && count > std::numeric_limits<long long>::max() / size) return -1;
  return static_cast<long long>(size) * count;
}

namespace {

/// A private duplicate of MPI_COMM_SELF: the local pack and unpack never match a message of
/// the user's on MPI_COMM_SELF. Left to MPI_Finalize.
MPI_Comm private_self() {
  static MPI_Comm self = [] {
    MPI_Comm c = MPI_COMM_NULL;
    check_mpi(PMPI_Comm_dup(MPI_COMM_SELF, &c), "PMPI_Comm_dup(MPI_COMM_SELF)", world_rank());
    return c;
  }();
  return self;
}

/// MPI counts are ints (the pieces of a large-count call too): moves `bytes` in pieces of at most 1
/// GiB (a whole number of elements of `type` each, as MPI_BYTE on the contiguous side).
template <class Copy>
void in_pieces(long long count, std::size_t bytes, Copy&& copy) {
  if (count == 0 || bytes == 0) return;
  const std::size_t elem = bytes / static_cast<std::size_t>(count);
  const std::size_t per =
      std::max<std::size_t>(1, (std::size_t{1} << 30) / std::max<std::size_t>(1, elem));
  for (std::size_t first = 0; first < static_cast<std::size_t>(count); first += per) {
    const std::size_t n = std::min(per, static_cast<std::size_t>(count) - first);
    copy(first, n, elem);
  }
}

} // namespace

namespace {

/// Held around each send-receive of `copy_local`: they all use one communicator and one tag,
/// and a user thread packing a start's send side while the engine thread unpacks an earlier
/// call's receive side would otherwise match each other's messages (seen as a truncation
/// error under MPICH 5 in 2 of about 55 runs of `preload_persistent_others`, and in 5 of 6 runs
/// of `preload_pack_race`, which tests this lock).
std::mutex local_copy_mutex;

/// Moves `count` elements of `type` at `typed` to (`pack`) or from `bytes` contiguous bytes
/// at `flat`, in pieces of at most 1 GiB: a send of one side received as the other.
void copy_local(bool pack, const void* typed, long long count, MPI_Datatype type, std::byte* flat,
                std::size_t bytes) {
  std::lock_guard lock(local_copy_mutex);
  MPI_Aint lb = 0, extent = 0;
  check_mpi(PMPI_Type_get_extent(type, &lb, &extent), "PMPI_Type_get_extent", world_rank());
  in_pieces(count, bytes, [&](std::size_t first, std::size_t n, std::size_t elem) {
    auto* elems =
        static_cast<char*>(const_cast<void*>(typed)) + static_cast<MPI_Aint>(first) * extent;
    std::byte* raw = flat + first * elem;
    const int n_elems = static_cast<int>(n), n_bytes = static_cast<int>(n * elem);
    check_mpi(pack ? PMPI_Sendrecv(elems, n_elems, type, 0, 0, raw, n_bytes, MPI_BYTE, 0, 0,
                                   private_self(), MPI_STATUS_IGNORE)
                   : PMPI_Sendrecv(raw, n_bytes, MPI_BYTE, 0, 0, elems, n_elems, type, 0, 0,
                                   private_self(), MPI_STATUS_IGNORE),
              pack ? "PMPI_Sendrecv (local pack)" : "PMPI_Sendrecv (local unpack)", world_rank());
  });
}

} // namespace

void pack_local(const void* buf, long long count, MPI_Datatype type, std::byte* out,
                std::size_t bytes) {
  copy_local(true, buf, count, type, out, bytes);
}

void unpack_local(const std::byte* in, std::size_t bytes, void* buf, long long count,
                  MPI_Datatype type) {
  copy_local(false, buf, count, type, const_cast<std::byte*>(in), bytes);
}

} // namespace tcoll::preload

using namespace tcoll::preload;

/// Prints the TCOLL_DEBUG summary, frees every communicator's tcoll state while MPI still
/// works, then finalises MPI.
TCOLL_PRELOAD_EXPORT int MPI_Finalize(void) {
  if (mpi_active()) {
    // TCOLL_DEBUG=1: world rank 0's summary; 2: every rank's.
    if (config().debug >= 2 || (config().debug == 1 && world_rank() == 0)) print_summary();
    std::vector<comm_state*> live;
    {
      std::lock_guard lock(registry_mutex);
      live.assign(registry.begin(), registry.end());
    }
    for (comm_state* s : live) PMPI_Comm_delete_attr(s->user, keyval); // runs delete_state
    if (keyval != MPI_KEYVAL_INVALID) PMPI_Comm_free_keyval(&keyval);
    if (facts_keyval != MPI_KEYVAL_INVALID) PMPI_Comm_free_keyval(&facts_keyval);
  }
  mpi_state.store(2, std::memory_order_release);
  return PMPI_Finalize();
}

/// Query symbol: the calls run through tcoll (passthrough included) and the calls that fell
/// back to PMPI so far in this process; either pointer may be null. Returns 1 (the library
/// is loaded). Look it up with dlsym(RTLD_DEFAULT, "tcoll_mpi_counts").
TCOLL_PRELOAD_EXPORT int tcoll_mpi_counts(unsigned long long* through_tcoll,
                                          unsigned long long* fell_back) {
  if (through_tcoll) *through_tcoll = through_total.load();
  if (fell_back) *fell_back = fallback_total.load();
  return 1;
}
