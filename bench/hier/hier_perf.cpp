// hier_perf: nccl-tests style benchmark of the two-level algorithms on an emulated cluster of
// N nodes x G devices, side by side with the flat ring over all N*G ranks (and MPI_Allreduce
// under MPI), with the alpha-beta-gamma model prediction of every measurement.
//
//   ./hier_perf -t threads -N 2 -G 2 --gbit 10 -b 1M -e 64M          # in process, shaped<>
//   scripts/emulated_cluster.sh --rate 10gbit --np 2 -- ./hier_perf -t threads+mpi -G 2
//
// Transports:
//   threads      one thread team of N*G ranks; messages between nodes pass a shaped<> link
//                (--gbit, --alpha-us; one egress link per node, shared by its G threads).
//   threads+mpi  one MPI process per node (N = MPI size), G threads in it; between nodes
//                MPI (TCP inside scripts/emulated_cluster.sh, which shapes it), optionally
//                shaped<> on top (--gbit > 0). Needs MPI_THREAD_MULTIPLE.
// Algorithms (-a): ring (flat, all N*G ranks, composed transport), multi_ring (flat, -K rings),
//   hierarchical_leader, hierarchical_sharded, tensor (one member per node owning G buffers),
//   passthrough (threads+mpi: leader form with MPI_Allreduce among the node leaders).
// Other collectives (-C, a name of the table of collectives): broadcast, reduce, allgather,
//   reduce_scatter, alltoall, alltoallv (the all-to-all's equal blocks through the uneven
//   form), gather, scatter, each on the flat world with the table's flat algorithms (-a:
//   binomial_tree, scatter_allgather; ring; pairwise_exchange, bruck; linear)
//   and on the two-level machine (`hierarchical`: through the group leaders,
//   algorithm/via_leaders.hpp; all-to-all through the peers, algorithm/via_peers.hpp, and
//   `hierarchical_via_leaders` through the leaders, for alltoall and alltoallv), default both. -L
//   names the broadcast the two-level machine runs among the group leaders (default the line's
//   first, the binomial tree; the other collectives run their own whatever -L says). Sizes are the
//   table's size measure (the whole P-block buffer for the block collectives); roots are rank 0;
//   reduce and reduce_scatter have no in-place form (N/A). The model columns price the planner's
//   traffic formula (plan::collective_traffic) by the measured link where every rank is a node (-G
//   1), and print 0 otherwise (two link classes); "xfirst" compares with the first -a algorithm.
// Timing as nccl-tests: -w warm-up calls, barrier, -n timed calls; time = max over ranks of
// elapsed/n; -R repetitions, median reported. busbw = algbw * 2(P-1)/P with P = N*G for
// allreduce, (P-1)/P for allgather, reduce_scatter, alltoall, gather and scatter, and algbw
// for broadcast and reduce (nccl-tests' factors).
// The check (-c 1) runs one more call on integer-valued inputs and compares every element
// bit for bit with the sum computed independently in double.
// Model: alpha and beta of the link between nodes are measured in the same run (a
// simultaneous exchange of 8 B and 4 MiB between node 0 and node 1), the intra-node copy and
// reduction rates by timing memcpy and a float sum; formulas in docs/hierarchical.md.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include <tcoll/algorithm/hierarchical.hpp>
#include <tcoll/algorithm/multi_ring.hpp>
#include <tcoll/algorithm/visit.hpp>
#include <tcoll/collectives.hpp>
#include <tcoll/plan/cost_model.hpp>
#include <tcoll/tensor_allreduce.hpp>
#include <tcoll/transport/composed.hpp>
#include <tcoll/transport/shaped.hpp>
#include <tcoll/transport/subgroup.hpp>
#include <tcoll/transport/threads.hpp>

#ifdef TCOLL_HAVE_MPI
#include <mpi.h>

#include <tcoll/transport/mpi.hpp>
#endif

#include "../common/perf_report.hpp"

namespace {

using namespace tcoll;
using namespace tcoll::bench;
using fsec = std::chrono::duration<double>;

struct options {
  std::size_t min_bytes = std::size_t{1} << 20, max_bytes = std::size_t{16} << 20;
  double factor = 2;
  int iters = 10, warmup = 3, reps = 3;
  bool check = true;
  std::string transport = "threads";
  int nodes = 2, G = 2, K = 2;
  double gbit = 10, alpha_us = 0;
  std::size_t segment = std::size_t{1} << 20;
  std::size_t pipeline = std::size_t{4} << 20;
  std::vector<std::string> algorithms{
      "ring", "multi_ring", "hierarchical_leader", "hierarchical_sharded", "tensor", "passthrough"};
  collective coll = collective::allreduce; ///< -C
  bool algorithms_given = false;
  std::string json;
  int timeout_s = 120;
  std::string leaders; ///< -L: the algorithm `hierarchical` runs among the leaders (broadcast)
  /// --each-block-across: via_peers::each_block_across_from_bytes (-C alltoall)
  std::size_t each_block_across = via_peers{}.each_block_across_from_bytes;
};

std::size_t parse_bytes(const std::string& s) {
  return tcoll::parse_bytes(s);
}

/// The machine's knobs `o` sets (the route through the peers).
hierarchical_machine_options machine_options(const options& o) {
  hierarchical_machine_options m;
  m.peers.each_block_across_from_bytes = o.each_block_across;
  return m;
}

const char* usage =
    "usage: hier_perf [-b min] [-e max] [-f factor] [-n iters] [-w warmup] [-R reps] [-c 0|1]\n"
    "  [-t threads|threads+mpi] [-N nodes (threads)] [-G threads per node] [-K rings]\n"
    "  [--gbit rate (0: unshaped)] [--alpha-us us] [-s segment bytes] [-T timeout s]\n"
    "  [-P hierarchical pipeline segment bytes (0: no pipeline)]\n"
    "  [-L the broadcast hierarchical runs among the leaders (-C broadcast)]\n"
    "  [-a ring,multi_ring,hierarchical_leader,hierarchical_sharded,tensor,passthrough]\n"
    "  [-C allreduce|broadcast|reduce|allgather|reduce_scatter|alltoall|alltoallv|gather|scatter]\n"
    "  (-C alltoallv: the all-to-all's equal blocks through the uneven form; -C alltoall(v): -a\n"
    "  also hierarchical_via_leaders, the machine's route through the leaders)\n"
    "  [--each-block-across bytes: through the peers, blocks from this size cross one message\n"
    "  each (via_peers::each_block_across_from_bytes)] [--json FILE]\n";

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    if (f == "-h" || f == "--help") {
      std::printf("%s", usage);
      std::exit(0);
    }
    if (i + 1 >= argc) throw invalid_argument("hier_perf: " + f + " needs a value");
    const std::string v = argv[++i];
    if (f == "-b")
      o.min_bytes = parse_bytes(v);
    else if (f == "-e")
      o.max_bytes = parse_bytes(v);
    else if (f == "-f")
      o.factor = std::stod(v);
    else if (f == "-n")
      o.iters = std::stoi(v);
    else if (f == "-w")
      o.warmup = std::stoi(v);
    else if (f == "-R")
      o.reps = std::stoi(v);
    else if (f == "-c")
      o.check = v != "0";
    else if (f == "-t")
      o.transport = v;
    else if (f == "-N")
      o.nodes = std::stoi(v);
    else if (f == "-G" || f == "-g")
      o.G = std::stoi(v);
    else if (f == "-K")
      o.K = std::stoi(v);
    else if (f == "--gbit")
      o.gbit = std::stod(v);
    else if (f == "--alpha-us")
      o.alpha_us = std::stod(v);
    else if (f == "-s")
      o.segment = parse_bytes(v);
    else if (f == "-P")
      o.pipeline = parse_bytes(v);
    else if (f == "-T")
      o.timeout_s = std::stoi(v);
    else if (f == "--json")
      o.json = v;
    else if (f == "--each-block-across")
      o.each_block_across = parse_bytes(v);
    else if (f == "-L")
      o.leaders = v;
    else if (f == "-C")
      o.coll = parse_collective(v);
    else if (f == "-a") {
      o.algorithms_given = true;
      o.algorithms.clear();
      std::size_t pos = 0;
      while (pos <= v.size()) {
        const auto end = std::min(v.find(',', pos), v.size());
        if (end > pos) o.algorithms.push_back(v.substr(pos, end - pos));
        pos = end + 1;
      }
    } else
      throw invalid_argument("hier_perf: unknown flag " + f + "\n" + usage);
  }
  if (o.coll != collective::allreduce) {
    const collective_description& d = describe(o.coll);
    if ((d.counts == count_rule::per_peer && o.coll != collective::alltoallv) ||
        d.counts == count_rule::none)
      throw invalid_argument("hier_perf: -C " + std::string(d.name) +
                             ": the v forms (but alltoallv) and barrier are not measured here");
    if (!o.algorithms_given) { // every flat algorithm of the table's line, then the hierarchy
      o.algorithms.clear();
      for (algorithm_id a : algorithms_of(d.id)) o.algorithms.emplace_back(to_string(a));
    }
    for (const auto& a : o.algorithms) // the table's names only, and no vendor collective
      if ((a != "hierarchical_via_leaders" ||
           (o.coll != collective::alltoall && o.coll != collective::alltoallv)) &&
          parse_algorithm(a, o.coll) == algorithm_id::passthrough)
        throw invalid_argument("hier_perf: -a passthrough: -C " + std::string(d.name) +
                               " measures tcoll's algorithms only");
  }
  if (o.transport != "threads" && o.transport != "threads+mpi")
    throw invalid_argument("hier_perf: -t must be threads or threads+mpi");
  if (o.min_bytes < 4 || o.min_bytes > o.max_bytes || o.factor <= 1 || o.iters < 1 || o.reps < 1 ||
      o.G < 1 || o.nodes < 1 || o.K < 1)
    throw invalid_argument("hier_perf: bad sizes or counts");
  return o;
}

float value(int r, std::size_t i) {
  return static_cast<float>((r + 1) * (1 + int(i % 13)));
}

/// Link parameters measured in this run (seconds, seconds per byte).
struct calibration {
  double alpha = 0, beta = 0;  // between nodes
  double alpha_intra = 0;      // one message inside a node
  double copy = 0, reduce = 0; // per byte: memcpy, float sum dst = a + b
};

/// Model prediction (seconds) of one allreduce of `bytes` over N nodes x G ranks.
double model(const std::string& algo, double bytes, int N, int G, int K, std::size_t segment,
             const calibration& c) {
  const int P = N * G;
  const double lgG = std::ceil(std::log2(std::max(1, G)));
  // ring over the network (N nodes) carrying `b` bytes per node per step set
  auto net_ring = [&](double b, int ranks, double gamma) {
    if (ranks <= 1) return 0.0;
    return 2.0 * (ranks - 1) * c.alpha + 2.0 * (ranks - 1) / ranks * b * c.beta +
           (ranks - 1.0) / ranks * b * gamma;
  };
  if (algo == "ring") {
    // the boundary links are the slowest of the ring; every step waits for them
    if (N == 1) return 2.0 * (P - 1) * c.alpha_intra + (P - 1.0) / P * bytes * (c.reduce + c.copy);
    return 2.0 * (P - 1) * c.alpha + 2.0 * (P - 1) / P * bytes * c.beta +
           (P - 1.0) / P * bytes * c.reduce;
  }
  if (algo == "multi_ring") {
    if (N == 1) return 2.0 * (P - 1) * c.alpha_intra + (P - 1.0) / P * bytes * (c.reduce + c.copy);
    // the reductions of all but the last ring of a step hide behind later transfers
    return 2.0 * (P - 1) * c.alpha + 2.0 * (P - 1) / P * bytes * c.beta +
           (P - 1.0) / P * bytes * c.reduce / K;
  }
  if (algo == "hierarchical_leader" || algo == "passthrough") {
    const double intra = lgG * (2 * c.alpha_intra + bytes * (c.reduce + c.copy));
    return intra + net_ring(bytes, N, c.reduce);
  }
  if (algo == "hierarchical_sharded") {
    const double intra =
        2.0 * (G - 1) * c.alpha_intra + (G - 1.0) / G * bytes * (c.reduce + c.copy);
    // G shard rings of bytes/G share each node's link: bytes per node per step as one ring of
    // `bytes`, but each thread reduces only its shard
    double t = intra;
    if (N > 1)
      t += 2.0 * (N - 1) * c.alpha + 2.0 * (N - 1) / N * bytes * c.beta +
           (N - 1.0) / N * bytes / G * c.reduce;
    return t;
  }
  if (algo == "tensor") {
    const double exposed = std::min(bytes, static_cast<double>(segment));
    return (G - 1) * exposed * (c.reduce + c.copy) + net_ring(bytes, N, c.reduce);
  }
  return 0;
}

/// The planner's prediction (seconds) of a flat algorithm of collective `coll` (not
/// allreduce) where every rank is a node of its own (G == 1: every message crosses the
/// network): `plan::collective_traffic` priced by the measured link, reductions at the
/// measured reduce rate. 0 where it has none (G > 1: two link classes; hierarchical;
/// in_segment).
double collective_model(collective coll, const std::string& algo, double bytes, int N, int G,
                        const calibration& c) {
  if (G != 1) return 0;
  try {
    const plan::rank_traffic t =
        plan::collective_traffic(coll, parse_algorithm(algo, coll), bytes, N);
    return t.us(plan::link_params{c.alpha * 1e6, c.beta * 1e6, c.reduce * 1e6}) * 1e-6;
  } catch (const invalid_argument&) {
    return 0;
  }
}

/// The prediction (seconds) of row `r`'s algorithm: `model` for allreduce, `collective_model`
/// for the others.
double predicted(const options& o, const std::string& algo, double bytes, const calibration& c,
                 int N) {
  return o.coll == collective::allreduce ? model(algo, bytes, N, o.G, o.K, o.segment, c)
                                         : collective_model(o.coll, algo, bytes, N, o.G, c);
}

/// What a rank needs from the harness: barrier and reductions over all N*G ranks.
struct harness {
  std::function<void()> barrier;
  std::function<double(double)> max_all;
  std::function<long long(long long)> sum_all;
};

/// Shared per-node state: the G ranks' buffers (tensor) and scratch for reductions.
struct node_state {
  explicit node_state(int G) : outs(std::size_t(G)), dslot(std::size_t(G)), lslot(std::size_t(G)) {}
  std::vector<float*> outs;
  std::vector<double> dslot;
  std::vector<long long> lslot;
};

/// nccl-tests' busbw factor of collective `c` on P ranks.
double busbw_factor(collective c, int P) {
  if (P <= 1) return 0.0;
  switch (c) {
  case collective::allreduce:
    return 2.0 * (P - 1) / P;
  case collective::broadcast:
  case collective::reduce:
    return 1.0;
  default:
    return double(P - 1) / P;
  }
}

/// Does collective `c` have an in-place form here (the table's in-place rule)?
bool has_in_place(collective c) {
  return describe(c).in_place != in_place_rule::none;
}

/// One call of collective `c` (not allreduce) with algorithm `algo` (a flat one of the table on
/// `world`, or `hierarchical` on `hier`), `n` elements of the size measure, `block = n / P`,
/// root 0. Buffers hold `n` elements; block collectives use block `q` at `q * block` (the
/// in-place forms: this rank's own block of the P-block buffer).
template <class World, class Hier>
void call_collective(collective c, const std::string& algo, const std::string& leaders,
                     World& world, Hier& hier, Hier& hier_via_leaders, const float* s, float* d,
                     std::size_t n, bool inplace) {
  const int P = world.size(), me = world.rank();
  const std::size_t block = n / std::size_t(P), own = std::size_t(me) * block;
  // hierarchical_via_leaders: the machine whose all-to-all takes the leaders' route
  const bool via_leaders_route = algo == "hierarchical_via_leaders";
  const algorithm_id a = via_leaders_route ? algorithm_id::hierarchical : parse_algorithm(algo, c);
  // f(communicator, algorithm object) for collective C: `world` with the object of `a` (the
  // library's one dispatch, visit_algorithm), or the two-level machine for `hierarchical`,
  // given the object of `leaders` (else the table's first): broadcast runs it among the
  // leaders, the others run their own form whatever object they get. in_segment: the
  // collective area, which the emulated cluster's transports do not have; it runs its
  // message algorithm there
  auto on = [&]<collective C>(std::integral_constant<collective, C>, auto&& f) {
    if (a == algorithm_id::hierarchical)
      visit_algorithm<C>(leaders.empty() ? algorithms_of(C).front() : parse_algorithm(leaders, C),
                         [&](const auto& x) { f(via_leaders_route ? hier_via_leaders : hier, x); });
    else
      visit_algorithm<C>(a, [&](const auto& x) { f(world, x); });
  };
  switch (c) {
  case collective::broadcast:
    on(std::integral_constant<collective, collective::broadcast>{},
       [&](auto& comm, const auto& x) { tcoll::broadcast(comm, d, n, 0, x); });
    return;
  case collective::reduce:
    on(std::integral_constant<collective, collective::reduce>{},
       [&](auto& comm, const auto& x) { tcoll::reduce(comm, s, d, n, 0, sum_op{}, x); });
    return;
  case collective::allgather:
    on(std::integral_constant<collective, collective::allgather>{}, [&](auto& comm, const auto& x) {
      tcoll::allgather(comm, (inplace ? d : s) + own, d, block, x);
    });
    return;
  case collective::reduce_scatter:
    on(std::integral_constant<collective, collective::reduce_scatter>{},
       [&](auto& comm, const auto& x) { tcoll::reduce_scatter(comm, s, d, block, sum_op{}, x); });
    return;
  case collective::alltoall:
    on(std::integral_constant<collective, collective::alltoall>{},
       [&](auto& comm, const auto& x) { tcoll::alltoall(comm, inplace ? d : s, d, block, x); });
    return;
  case collective::alltoallv: { // the all-to-all's blocks, through the uneven form's path
    const std::vector<std::size_t> counts(static_cast<std::size_t>(P), block);
    std::vector<std::size_t> displs(static_cast<std::size_t>(P));
    for (std::size_t q = 0; q < displs.size(); ++q) displs[q] = q * block;
    const std::span<const std::size_t> c_(counts), d_(displs);
    on(std::integral_constant<collective, collective::alltoallv>{}, [&](auto& comm, const auto& x) {
      tcoll::alltoallv(comm, inplace ? d : s, c_, d_, d, c_, d_, x);
    });
    return;
  }
  case collective::gather:
    on(std::integral_constant<collective, collective::gather>{}, [&](auto& comm, const auto& x) {
      tcoll::gather(comm, (inplace ? d : s) + own, d, block, 0, x);
    });
    return;
  case collective::scatter:
    on(std::integral_constant<collective, collective::scatter>{}, [&](auto& comm, const auto& x) {
      tcoll::scatter(comm, inplace ? d : s, d + own, block, 0, x);
    });
    return;
  default:
    throw invalid_argument("hier_perf: -C " + std::string(to_string(c)) + " is not measured");
  }
}

/// Elements of this rank's result of `call_collective` that differ from the expectation
/// computed from every rank's input `value(q, i)` (sums are exact: integer-valued floats).
long long collective_wrong(collective c, const float* d, std::size_t n, int me, int P) {
  const std::size_t block = n / std::size_t(P), own = std::size_t(me) * block;
  long long bad = 0;
  auto sum_at = [&](std::size_t i) {
    double e = 0;
    for (int q = 0; q < P; ++q) e += value(q, i);
    return static_cast<float>(e);
  };
  switch (c) {
  case collective::broadcast:
    for (std::size_t i = 0; i < n; ++i) bad += d[i] != value(0, i);
    break;
  case collective::reduce:
    if (me == 0)
      for (std::size_t i = 0; i < n; ++i) bad += d[i] != sum_at(i);
    break;
  case collective::allgather:
    for (std::size_t i = 0; i < block * std::size_t(P); ++i)
      bad += d[i] != value(int(i / block), i);
    break;
  case collective::reduce_scatter:
    for (std::size_t j = 0; j < block; ++j) bad += d[j] != sum_at(own + j);
    break;
  case collective::alltoall:
  case collective::alltoallv:
    for (std::size_t i = 0; i < block * std::size_t(P); ++i)
      bad += d[i] != value(int(i / block), own + i % block);
    break;
  case collective::gather:
    if (me == 0)
      for (std::size_t i = 0; i < block * std::size_t(P); ++i)
        bad += d[i] != value(int(i / block), i);
    break;
  case collective::scatter:
    for (std::size_t j = 0; j < block; ++j) bad += d[own + j] != value(0, own + j);
    break;
  default:
    break;
  }
  return bad;
}

template <class World, class Hier, class Leaders>
std::vector<row> run_rank(const options& o, World& world, Hier& hier, Hier& hier_via_leaders,
                          Leaders* leaders, int local, node_state& node, const harness& h,
                          const std::string& tname, calibration& cal,
                          const std::function<void(const float*, float*, std::size_t)>& native) {
  const int P = world.size(), me = world.rank(), G = o.G, N = P / G;
  std::vector<row> rows;
  // --- calibration -----------------------------------------------------------------------
  {
    auto exchange = [&](int peer, std::size_t bytes, int reps) {
      std::vector<char> s(bytes, 1), r(bytes);
      std::vector<double> t;
      for (int i = 0; i < reps; ++i) {
        const auto t0 = clock::now();
        auto rr = world.irecv(peer, r.data(), bytes, 99);
        auto rs = world.isend(peer, s.data(), bytes, 99);
        world.wait(rr, clock::now() + std::chrono::seconds(o.timeout_s));
        world.wait(rs, clock::now() + std::chrono::seconds(o.timeout_s));
        t.push_back(fsec(clock::now() - t0).count());
      }
      std::sort(t.begin(), t.end());
      return t[t.size() / 2];
    };
    const std::size_t big = std::size_t{4} << 20;
    double a = 0, b = 0, ai = 0;
    h.barrier();
    if (N > 1 && (me == 0 || me == G)) {
      exchange(me == 0 ? G : 0, 8, 5); // warm the connection
      a = exchange(me == 0 ? G : 0, 8, 30);
      b = (exchange(me == 0 ? G : 0, big, 5) - a) / double(big);
    }
    h.barrier();
    if (G > 1 && (me == 0 || me == 1)) ai = exchange(1 - me, 8, 30);
    h.barrier();
    cal.alpha = h.max_all(a);
    cal.beta = h.max_all(b);
    cal.alpha_intra = h.max_all(ai);
    if (me == 0) {
      std::vector<float> x(big / 4, 1.0f), y(big / 4, 2.0f), z(big / 4);
      cpu_reducer red;
      double tc = 1e9, tr = 1e9;
      for (int i = 0; i < 5; ++i) {
        auto t0 = clock::now();
        std::memcpy(z.data(), x.data(), big);
        tc = std::min(tc, fsec(clock::now() - t0).count());
        t0 = clock::now();
        red.reduce(sum_op{}, z.data(), x.data(), y.data(), x.size());
        tr = std::min(tr, fsec(clock::now() - t0).count());
      }
      cal.copy = tc / double(big);
      cal.reduce = tr / double(big);
    }
    cal.copy = h.max_all(cal.copy);
    cal.reduce = h.max_all(cal.reduce);
  }

  // --- measurements ----------------------------------------------------------------------
  for (std::size_t bytes = o.min_bytes; bytes <= o.max_bytes;
       bytes = std::max(bytes + 4, static_cast<std::size_t>(double(bytes) * o.factor))) {
    std::size_t n = bytes / sizeof(float);
    if (o.coll != collective::allreduce) n -= n % std::size_t(P); // P equal blocks
    if (n == 0) continue;
    std::vector<float> in(n), out(n);
    for (const auto& algo : o.algorithms) {
      if (algo == "passthrough" && !native) continue;
      bool inplace_call = false; // the pass of the placement loop below
      auto call = [&](const float* s, float* d) {
        if (o.coll != collective::allreduce)
          call_collective(o.coll, algo, o.leaders, world, hier, hier_via_leaders, s, d, n,
                          inplace_call);
        else if (algo == "ring")
          tcoll::allreduce(world, s, d, n, sum_op{}, ring{o.segment});
        else if (algo == "multi_ring")
          tcoll::allreduce(world, s, d, n, sum_op{},
                           multi_ring{o.K, ring_order::alternate, o.segment});
        else if (algo == "hierarchical_leader")
          allreduce(hier, s, d, n, sum_op{},
                    hierarchical_options<ring>{hierarchical_form::leader, ring{o.segment},
                                               ring{o.segment}});
        else if (algo == "hierarchical_sharded")
          allreduce(hier, s, d, n, sum_op{},
                    hierarchical_options<ring>{hierarchical_form::sharded, ring{o.segment},
                                               ring{o.segment}, o.pipeline});
        else if (algo == "passthrough")
          native(s, d, n);
        else if (algo == "tensor") {
          // one member per node owning the G buffers of its threads (in place)
          if (s != d) std::memcpy(d, s, n * sizeof(float));
          node.outs[std::size_t(local)] = d;
          h.barrier();
          if (local == 0)
            tensor_allreduce(*leaders, std::span<float* const>(node.outs), n, sum_op{},
                             tensor_options{std::size_t{4} << 20, ring{o.segment}});
          h.barrier();
        } else
          throw invalid_argument("hier_perf: unknown algorithm " + algo);
      };
      row r;
      r.algorithm = algo;
      r.transport = tname;
      r.dtype = "float";
      r.op = describe(o.coll).reduces ? "sum" : "none";
      r.ranks = P;
      r.bytes = n * sizeof(float);
      r.count = n;
      for (int inplace = 0; inplace < 2; ++inplace) {
        inplace_call = inplace != 0;
        if (inplace && !has_in_place(o.coll)) continue; // N/A (wrong stays -1)
        auto fill = [&] {
          for (std::size_t i = 0; i < n; ++i) in[i] = value(me, i);
          if (o.coll == collective::broadcast) // one buffer: the root's data in either
            std::copy(in.begin(), in.end(), out.begin());
        };
        float* dst = inplace ? in.data() : out.data();
        fill();
        for (int w = 0; w < o.warmup; ++w) {
          call(in.data(), dst);
          if (inplace) fill();
        }
        std::vector<double> times;
        for (int rep = 0; rep < o.reps; ++rep) {
          fill();
          h.barrier();
          const auto t0 = clock::now();
          for (int it = 0; it < o.iters; ++it) call(in.data(), dst);
          times.push_back(h.max_all(fsec(clock::now() - t0).count() / o.iters));
        }
        std::sort(times.begin(), times.end());
        long long wrong = -1;
        if (o.check) {
          std::fill(out.begin(), out.end(), -1.0f); // what the call does not write stays -1
          fill();
          call(in.data(), dst);
          long long bad = 0;
          if (o.coll != collective::allreduce) {
            bad = collective_wrong(o.coll, dst, n, me, P);
          } else {
            for (std::size_t i = 0; i < n; ++i) {
              double e = 0;
              for (int q = 0; q < P; ++q) e += value(q, i);
              if (dst[i] != static_cast<float>(e)) ++bad;
            }
          }
          wrong = h.sum_all(bad);
        }
        measurement m = make_measurement(times[times.size() / 2] * 1e6, r.bytes, P, wrong);
        m.busbw_gbs = m.algbw_gbs * busbw_factor(o.coll, P);
        (inplace ? r.in_place : r.out_of_place) = m;
      }
      rows.push_back(r);
    }
    if (bytes == o.max_bytes) break;
  }
  return rows;
}

void print_model(const options& o, const std::vector<row>& rows, const calibration& c, int N) {
  std::printf("#\n# link between nodes (measured): alpha %.2f us, beta %.4f ns/B (%.2f Gbit/s); "
              "inside a node: alpha %.2f us, copy %.4f ns/B, reduce %.4f ns/B\n",
              c.alpha * 1e6, c.beta * 1e9, c.beta > 0 ? 8e-9 / c.beta : 0.0, c.alpha_intra * 1e6,
              c.copy * 1e9, c.reduce * 1e9);
  const bool allreduce = o.coll == collective::allreduce;
  const std::string first = allreduce ? "ring" : o.algorithms.front();
  std::printf("#\n# %s: model vs measured (out-of-place), and busbw relative to %s\n",
              std::string(to_string(o.coll)).c_str(), first.c_str());
  std::printf("#%11s %22s %10s %10s %8s %8s\n", "size", "algorithm", "time(us)", "model(us)",
              "meas/mod", allreduce ? "xring" : "xfirst");
  for (const auto& r : rows) {
    double ring_bw = 0;
    for (const auto& q : rows)
      if (q.bytes == r.bytes && q.algorithm == first) ring_bw = q.out_of_place.busbw_gbs;
    const double m = predicted(o, r.algorithm, double(r.bytes), c, N) * 1e6;
    std::printf(" %11zu %22s %10.1f %10.1f %8.2f %8.2f\n", r.bytes, r.algorithm.c_str(),
                r.out_of_place.time_us, m, m > 0 ? r.out_of_place.time_us / m : 0.0,
                ring_bw > 0 ? r.out_of_place.busbw_gbs / ring_bw : 0.0);
  }
}

bool write_json_with_model(const options& o, const std::vector<row>& rows, const calibration& c,
                           int N) {
  std::FILE* f = std::fopen(o.json.c_str(), "w");
  if (!f) return false;
  std::fprintf(f, "[");
  bool first = true;
  for (const auto& r : rows)
    for (int ip = 0; ip < 2; ++ip) {
      const auto& m = ip ? r.in_place : r.out_of_place;
      std::fprintf(f,
                   "%s\n {\"collective\": \"%s\", \"algorithm\": \"%s\", \"transport\": \"%s\", "
                   "\"ranks\": %d, "
                   "\"nodes\": %d, \"per_node\": %d, \"rings\": %d, \"gbit\": %g, "
                   "\"dtype\": \"float\", \"op\": \"sum\", \"bytes\": %zu, \"count\": %zu, "
                   "\"inplace\": %s, \"time_us\": %.3f, \"algbw_gbs\": %.6f, \"busbw_gbs\": %.6f, "
                   "\"model_us\": %.3f, \"wrong\": %s, \"iters\": %d, \"reps\": %d, "
                   "\"alpha_us\": %.4f, \"beta_ns_per_byte\": %.6f, \"reduce_ns_per_byte\": %.6f, "
                   "\"copy_ns_per_byte\": %.6f, \"leaders\": \"%s\"}",
                   first ? "" : ",", std::string(to_string(o.coll)).c_str(), r.algorithm.c_str(),
                   r.transport.c_str(), r.ranks, N, o.G, o.K, o.gbit, r.bytes, r.count,
                   ip ? "true" : "false", m.time_us, m.algbw_gbs, m.busbw_gbs,
                   predicted(o, r.algorithm, double(r.bytes), c, N) * 1e6,
                   m.wrong < 0 ? "null" : std::to_string(m.wrong).c_str(), o.iters, o.reps,
                   c.alpha * 1e6, c.beta * 1e9, c.reduce * 1e9, c.copy * 1e9,
                   o.leaders.c_str()); // -L; empty: the line's first
      first = false;
    }
  std::fprintf(f, "\n]\n");
  return std::fclose(f) == 0;
}

int finish(const options& o, const std::vector<row>& rows, const calibration& c, int N) {
  std::printf("# hier_perf: %s, transport %s nodes %d x %d per node, shaped %g Gbit/s + %g us, "
              "K %d, iters %d reps %d\n",
              std::string(to_string(o.coll)).c_str(), o.transport.c_str(), N, o.G, o.gbit,
              o.alpha_us, o.K, o.iters, o.reps);
  if (!o.leaders.empty())
    std::printf("# hierarchical runs %s among the leaders (-L)\n", o.leaders.c_str());
  print_report(stdout, rows);
  print_model(o, rows, c, N);
  if (!o.json.empty() && !write_json_with_model(o, rows, c, N)) {
    std::fprintf(stderr, "hier_perf: cannot write %s\n", o.json.c_str());
    return 1;
  }
  long long wrong = 0;
  for (const auto& r : rows)
    wrong += std::max(0LL, r.out_of_place.wrong) + std::max(0LL, r.in_place.wrong);
  return wrong ? 3 : 0;
}

int run_threads(const options& o) {
  const int P = o.nodes * o.G;
  shaped_network net(
      shaping{std::chrono::nanoseconds(static_cast<long long>(o.alpha_us * 1e3)), o.gbit, o.G});
  std::vector<row> rows;
  calibration cal;
  node_state state(P); // one "node" for the harness: the whole team
  // the G threads of one emulated node share its node_state (tensor buffers)
  std::vector<std::unique_ptr<node_state>> nodes;
  for (int k = 0; k < o.nodes; ++k) nodes.push_back(std::make_unique<node_state>(o.G));
  thread_team(P, std::chrono::seconds(o.timeout_s)).run([&](thread_transport& t) {
    shaped<thread_transport> world(t, net);
    harness h;
    h.barrier = [&] { world.barrier(); };
    h.max_all = [&](double x) {
      state.dslot[std::size_t(t.rank())] = x;
      t.barrier();
      const double m = *std::max_element(state.dslot.begin(), state.dslot.end());
      t.barrier();
      return m;
    };
    h.sum_all = [&](long long x) {
      state.lslot[std::size_t(t.rank())] = x;
      t.barrier();
      long long s = 0;
      for (auto v : state.lslot) s += v;
      t.barrier();
      return s;
    };
    auto v = split_groups(world, o.G);
    hierarchy_shape shape{v.world_rank, v.world_size, v.shards};
    shape.groups = v.group_members; // the collectives but allreduce place blocks by world rank
    hierarchical hier(v.intra, v.inter_ptr(), shape, machine_options(o));
    hierarchical hier_via_leaders(v.intra, v.inter_ptr(), std::move(shape),
                                  {alltoall_route::via_leaders});
    t.barrier();
    auto r = run_rank(o, world, hier, hier_via_leaders, v.inter_ptr(), v.local,
                      *nodes[std::size_t(v.group)], h, "threads", cal, {});
    if (t.rank() == 0) rows = std::move(r);
  });
  return finish(o, rows, cal, o.nodes);
}

#ifdef TCOLL_HAVE_MPI
int run_mpi(const options& o) {
  int provided = 0;
  MPI_Query_thread(&provided);
  if (provided < MPI_THREAD_MULTIPLE && o.G > 1) {
    std::fprintf(stderr,
                 "hier_perf: -t threads+mpi with G > 1 needs MPI_THREAD_MULTIPLE "
                 "(provided level %d)\n",
                 provided);
    return 2;
  }
  int mrank = 0, msize = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &mrank);
  MPI_Comm_size(MPI_COMM_WORLD, &msize);
  mpi_transport mpi(MPI_COMM_WORLD, std::chrono::milliseconds(o.timeout_s * 1000));
  int* tag_ub = nullptr;
  int flag = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &flag);
  const int max_tag = flag && tag_ub ? *tag_ub : 32767;
  shaped_network net(
      shaping{std::chrono::nanoseconds(static_cast<long long>(o.alpha_us * 1e3)), o.gbit, 1});
  node_state node(o.G);
  std::vector<row> rows;
  calibration cal;
  thread_team(o.G, std::chrono::seconds(o.timeout_s)).run([&](thread_transport& t) {
    // every thread its own shaped endpoint over the shared MPI transport (shared egress
    // clock in `net`), a flat world over all (process, thread) pairs, and its inter view
    shaped<mpi_transport> link(mpi, net);
    composed<thread_transport, shaped<mpi_transport>> world(t, link, max_tag);
    std::vector<int> all(static_cast<std::size_t>(msize));
    for (int i = 0; i < msize; ++i) all[std::size_t(i)] = i;
    // tag offsets keep the G inter views (one per local index) apart on one communicator
    subgroup<shaped<mpi_transport>> inter(link, all, inter_tag_offset + 64 * t.rank());
    hierarchy_shape shape{world.rank(), world.size(), o.G};
    for (int p = 0; p < msize; ++p) { // composed<>: world rank = process * G + thread
      shape.groups.emplace_back();
      for (int j = 0; j < o.G; ++j) shape.groups.back().push_back(p * o.G + j);
    }
    hierarchical hier(t, &inter, shape, machine_options(o));
    hierarchical hier_via_leaders(t, &inter, std::move(shape), {alltoall_route::via_leaders});
    harness h;
    h.barrier = [&] { world.barrier(); };
    h.max_all = [&](double x) {
      node.dslot[std::size_t(t.rank())] = x;
      t.barrier();
      if (t.rank() == 0) {
        double m = *std::max_element(node.dslot.begin(), node.dslot.end());
        MPI_Allreduce(MPI_IN_PLACE, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        node.dslot[0] = m;
      }
      t.barrier();
      const double m = node.dslot[0];
      t.barrier();
      return m;
    };
    h.sum_all = [&](long long x) {
      node.lslot[std::size_t(t.rank())] = x;
      t.barrier();
      if (t.rank() == 0) {
        long long s = 0;
        for (auto v : node.lslot) s += v;
        MPI_Allreduce(MPI_IN_PLACE, &s, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
        node.lslot[0] = s;
      }
      t.barrier();
      const long long s = node.lslot[0];
      t.barrier();
      return s;
    };
    // passthrough: leader form with MPI_Allreduce (unshaped MPI) among the node leaders
    hierarchical native_hier(t, t.rank() == 0 ? &mpi : nullptr, {world.rank(), world.size(), 1});
    auto native = [&](const float* s, float* d, std::size_t n) {
      allreduce(native_hier, s, d, n, sum_op{},
                hierarchical_options<passthrough>{hierarchical_form::leader});
    };
    auto r = run_rank(o, world, hier, hier_via_leaders, &inter, t.rank(), node, h, "threads+mpi",
                      cal, native);
    if (t.rank() == 0) rows = std::move(r);
  });
  return mrank == 0 ? finish(o, rows, cal, msize) : 0;
}
#endif

} // namespace

int main(int argc, char** argv) {
  try {
    const options o = parse(argc, argv);
    if (o.transport == "threads") return run_threads(o);
#ifdef TCOLL_HAVE_MPI
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    int rc = 0;
    try {
      rc = run_mpi(o);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "hier_perf: %s\n", e.what());
      rc = 1;
    }
    MPI_Finalize();
    return rc;
#else
    std::fprintf(stderr, "hier_perf: built without MPI; -t threads+mpi is not available\n");
    return 2;
#endif
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hier_perf: %s\n", e.what());
    return 1;
  }
}
