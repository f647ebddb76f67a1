// Data-parallel training of a multilayer perceptron on 5,000 MNIST digits with tcoll.
//
//   build/examples/train_mnist --ranks 4 --epochs 5                  (ranks as threads)
//   mpirun -np 4 build/examples/train_mnist --transport mpi          (one rank per process)
//
// Every rank holds a full replica of the model. Each global batch is cut into one disjoint
// shard per rank; every rank runs forward and backward on its shard, the gradient buffer is
// averaged across ranks with tcoll::allreduce, and every rank applies the same SGD update,
// so the replicas stay bitwise identical (checked after every epoch). See docs/train.md.
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tcoll/tcoll.hpp>
#include <tcoll/transport/shaped.hpp>
#include <type_traits>
#include <vector>

#include "elastic_exchange.hpp"
#include "exchange.hpp"
#include "hybrid_exchange.hpp"
#include "mlp.hpp"
#include "mnist.hpp"
#include "sparse_exchange.hpp"

#ifdef TCOLL_HAVE_MPI
#include <mpi.h>

#include <tcoll/elastic/mpi_join.hpp>
#include <tcoll/transport/mpi.hpp>
#endif

namespace {

/// Exit codes (77 is "skipped" for meson and automake test harnesses).
enum exit_code : int {
  exit_ok = 0,
  exit_error = 1,
  exit_usage = 2,
  exit_replicas_differ = 3,
  exit_no_learning = 4,
  exit_data_missing = 77
};

/// Gradient exchange schemes. The registry's (compress/registry.hpp) that the app runs:
/// `dense` (the whole buffer, every step; exchange.hpp), `csc` (GradientFlow's sparse
/// chunks), `topk` (element-wise top-k) and `dgc` (DGC; the three in sparse_exchange.hpp).
/// And two of the app's own: `hybrid` (per layer the registry's `sfb` or dense, Poseidon;
/// hybrid_exchange.hpp) and `easgd` (elastic averaging across client groups;
/// elastic_exchange.hpp).
constexpr tcoll::compression_scheme registry_schemes[] = {
    tcoll::compression_scheme::dense, tcoll::compression_scheme::csc,
    tcoll::compression_scheme::topk, tcoll::compression_scheme::dgc};
constexpr std::string_view own_schemes[] = {"hybrid", "easgd"};

/// The registry's scheme `name`, if the app runs it.
std::optional<tcoll::compression_scheme> registry_scheme(std::string_view name) {
  for (tcoll::compression_scheme s : registry_schemes)
    if (tcoll::to_string(s) == name) return s;
  return std::nullopt;
}

/// Everything the command line sets.
struct options {
  int ranks = 2;                 ///< thread ranks (ignored under MPI: the world size)
  int epochs = 5;                ///< passes over the training set
  std::size_t global_batch = 64; ///< samples per step over all ranks together
  train::sgd_config sgd{};       ///< learning rate and momentum (constant schedule)
  std::uint64_t seed = 1;        ///< weights and the per-epoch shuffles
  std::string algorithm = "automatic";
  std::string scheme = "dense";
  /// --density, --chunk, --warmup, --residual (csc, topk, dgc), at the app's defaults
  tcoll::compression_options sparse = train::app_sparse_defaults();
  std::uint16_t sparse_knobs = 0; ///< the `compression_knob` bits given on the command line
  /// A planner: backward overlaps the scheduled buckets (dense; default none), or for
  /// hybrid `layerwise` (default: one job per tensor during backward) or `none`.
  std::string overlap;
  std::size_t autotune_steps = 5;
  std::string transport = "threads";
  std::string json_path; ///< per-epoch records; empty: none
  std::string data_path = "data/mnist/mnist_5k.csv.gz";
  std::size_t train_samples = 0; ///< 0: the whole training split
  std::size_t test_every = 5;    ///< every n-th sample of the file is a test sample
  std::vector<std::size_t> hidden{512, 256};
  std::size_t eval_chunk = 500;    ///< test samples per forward pass (bounds memory)
  bool check_learning = false;     ///< fail unless the loss of the last steps is lower
  std::size_t learning_window = 5; ///< steps averaged at each end for --check-learning
  /// --check-learning demands last <= (1 - this) * first: a quarter less, well above the
  /// batch-to-batch noise of an untrained model (within 5% at learning rate 0, seeds 1-6).
  double min_loss_decrease = 0.25;
  int clients = 2;                    ///< easgd: client groups (plus one server rank)
  int interval = 64;                  ///< easgd: iterations between elastic exchanges
  double alpha = 0;                   ///< easgd: elastic rate; 0 = 0.9 / clients
  std::string elastic_mode = "async"; ///< easgd: async (server) or sync (leaders allreduce)
  /// easgd under MPI: a port file that joins separately started jobs (one server job, one
  /// job per client, MXNET-MPI's setup); empty: one job split into groups
  std::string elastic_port;
  std::string elastic_role;    ///< with --elastic-port: server or client
  int join_timeout_s = 120;    ///< with --elastic-port: longest wait for the other jobs
  double link_gbit = 0;        ///< threads: emulated link between nodes (0: none)
  double link_latency_us = 20; ///< threads: its per-message latency
  int node_ranks = 0;          ///< threads: ranks per emulated node (0: 1, easgd: per client)
  /// hybrid: us per multiply-add of the SFB reconstruction in the plan; negative: measure
  /// it on every rank at plan time (calibrate_gemm_us), 0: ignore it (Poseidon)
  double gemm_us = -1;
  bool fuse_dense = true; ///< hybrid: one allreduce per run of consecutive dense tensors
};

void print_usage(std::FILE* to) {
  std::fprintf(to,
               "usage: train_mnist [options]\n"
               "  --ranks N           thread ranks (default 2; under MPI the world size)\n"
               "  --epochs N          passes over the training set (default 5)\n"
               "  --batch N           global batch, split over the ranks (default 64)\n"
               "  --lr X              learning rate, constant (default 0.05)\n"
               "  --momentum X        SGD momentum (default 0.9)\n"
               "  --seed N            initial weights and shuffles (default 1)\n"
               "  --algo NAME         automatic|ring|multi_ring|recursive_doubling|\n"
               "                      recursive_halving_doubling|binomial_tree|passthrough (MPI)\n"
               "  --scheme NAME       gradient exchange: dense (default: the whole gradient),\n"
               "                      csc (GradientFlow sparse chunks), topk (element-wise) or\n"
               "                      dgc (DGC's momentum correction and masking around top-k,\n"
               "                      plain SGD steps)\n"
               "  --density X         csc/topk/dgc: fraction of chunks (csc) or elements\n"
               "                      communicated after warm-up, in [0, 1] (default 0.15)\n"
               "  --chunk N           csc: elements per chunk (default 1000)\n"
               "  --warmup N          csc/topk/dgc: steps of linear ramp from dense (default 30)\n"
               "  --residual RULE     csc/topk: what unsent gradient becomes: momentum_scaled\n"
               "                      (momentum * g, Algorithm 1; default), error_feedback (g)\n"
               "                      or none (dropped)\n"
               "  --scheme hybrid     per FC layer SFB or dense by best_scheme at plan time,\n"
               "                      biases dense (model link: --link-gbit, else 10 Gbit/s)\n"
               "  --gemm-us X         hybrid: plan cost of one SFB reconstruction multiply-add;\n"
               "                      calibrate (default: timed on every rank at plan time),\n"
               "                      or microseconds (0: ignored, as in Poseidon)\n"
               "  --fuse-dense 0|1    hybrid: one allreduce per run of consecutive dense\n"
               "                      tensors (1, default) or one per tensor (0)\n"
               "  --scheme easgd      elastic averaging: the last rank is the server, the\n"
               "                      others form --clients C groups (default 2) that train\n"
               "                      synchronously inside and exchange with the center every\n"
               "                      --interval I iterations (64) with --alpha A (0.9/C);\n"
               "                      --elastic-mode sync: no server, the client leaders\n"
               "                      allreduce their parameters as the center (comparison)\n"
               "  --elastic-port FILE  easgd under MPI: every client its own mpirun; the\n"
               "  --elastic-role R       server's job (R = server, 1 process) writes an MPI\n"
               "                        port to FILE, each client job (R = client) connects;\n"
               "                        Open MPI needs ompi-server (docs/elastic.md)\n"
               "  --join-timeout-s S    with --elastic-port: wait for the jobs (default 120)\n"
               "  --link-gbit G       threads: emulate G Gbit/s between nodes (tcoll::shaped)\n"
               "  --link-latency-us L   with --link-latency-us L per message (default 20)\n"
               "  --node-ranks N        and N ranks per node (default 1; easgd: a client's)\n"
               "  --overlap PLANNER   none (default: one allreduce after backward), or a fusion\n"
               "                      planner (layerwise|single|threshold|ddp|mgwfbp|adafusion|\n"
               "                      optimal): backward writes into a gradient pool and the\n"
               "                      overlap scheduler allreduces the planned buckets meanwhile;\n"
               "                      hybrid: layerwise (default: a job per tensor as its\n"
               "                      gradient appears, Poseidon Algorithm 2), another planner\n"
               "                      (its buckets group the dense tensors; --fuse-dense\n"
               "                      then does not apply) or none\n"
               "  --autotune N        with --overlap PLANNER: re-plan after N measured steps\n"
               "                      (default 5, 0: keep the first plan; hybrid: the dense\n"
               "                      buckets, not with layerwise)\n"
               "  --transport NAME    threads (default) or mpi (when built with MPI)\n"
               "  --json FILE         write per-epoch records\n"
               "  --data FILE         MNIST csv.gz (default data/mnist/mnist_5k.csv.gz)\n"
               "  --train-samples N   use a fixed random subset of N training samples\n"
               "  --hidden A,B,...    hidden layer widths (default 512,256)\n"
               "  --check-learning    exit 4 unless the mean loss of the last steps of the run is\n"
               "                      below that of the first steps by a fraction\n"
               "                      (--learning-window N steps, default 5;\n"
               "                      --min-loss-decrease F, default 0.25)\n");
}

struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::size_t parse_count(std::string_view flag, const char* text) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text, &end, 10);
  if (errno || end == text || *end || text[0] == '-')
    throw usage_error(std::string(flag) + ": not a count: '" + text + "'");
  return static_cast<std::size_t>(v);
}

float parse_real(std::string_view flag, const char* text) {
  char* end = nullptr;
  errno = 0;
  const float v = std::strtof(text, &end);
  if (errno || end == text || *end || !(v >= 0))
    throw usage_error(std::string(flag) + ": not a non-negative number: '" + text + "'");
  return v;
}

/// A fraction in [0, 1], read as a double (0.15 stays 0.15 in the JSON).
double parse_fraction(std::string_view flag, const char* text) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text, &end);
  if (errno || end == text || *end || !(v >= 0 && v <= 1))
    throw usage_error(std::string(flag) + ": not a number in [0, 1]: '" + text + "'");
  return v;
}

options parse_options(int argc, char** argv) {
  options o;
  bool ranks_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (flag == "-h" || flag == "--help") {
      print_usage(stdout);
      std::exit(exit_ok);
    }
    if (flag == "--check-learning") {
      o.check_learning = true;
      continue;
    }
    if (i + 1 >= argc) throw usage_error(std::string(flag) + ": missing value");
    const char* value = argv[++i];
    if (flag == "--ranks") {
      o.ranks = static_cast<int>(parse_count(flag, value));
      ranks_given = true;
    } else if (flag == "--epochs") {
      o.epochs = static_cast<int>(parse_count(flag, value));
    } else if (flag == "--batch") {
      o.global_batch = parse_count(flag, value);
    } else if (flag == "--lr") {
      o.sgd.learning_rate = parse_real(flag, value);
    } else if (flag == "--momentum") {
      o.sgd.momentum = parse_real(flag, value);
    } else if (flag == "--seed") {
      o.seed = parse_count(flag, value);
    } else if (flag == "--algo") {
      o.algorithm = value;
    } else if (flag == "--scheme") {
      o.scheme = value;
    } else if (flag == "--density") {
      o.sparse.density = parse_fraction(flag, value);
      o.sparse_knobs |= static_cast<std::uint16_t>(tcoll::compression_knob::density);
    } else if (flag == "--chunk") {
      o.sparse.chunk_elements = parse_count(flag, value);
      if (o.sparse.chunk_elements == 0) throw usage_error("--chunk must be at least 1");
      o.sparse_knobs |= static_cast<std::uint16_t>(tcoll::compression_knob::chunk_elements);
    } else if (flag == "--warmup") {
      o.sparse.warmup_iterations = parse_count(flag, value);
      o.sparse_knobs |= static_cast<std::uint16_t>(tcoll::compression_knob::warmup_iterations);
    } else if (flag == "--residual") {
      if (std::string_view(value) == "dgc")
        throw usage_error("--residual dgc: DGC is a scheme of its own now (--scheme dgc)");
      try {
        o.sparse.residual = tcoll::parse_residual_rule(value);
      } catch (const std::exception& e) {
        throw usage_error(std::string("--residual: ") + e.what());
      }
      o.sparse_knobs |= static_cast<std::uint16_t>(tcoll::compression_knob::residual);
    } else if (flag == "--clients") {
      o.clients = static_cast<int>(parse_count(flag, value));
    } else if (flag == "--interval") {
      o.interval = static_cast<int>(parse_count(flag, value));
    } else if (flag == "--elastic-mode") {
      o.elastic_mode = value;
      if (o.elastic_mode != "async" && o.elastic_mode != "sync")
        throw usage_error("--elastic-mode must be async or sync, not '" + o.elastic_mode + "'");
    } else if (flag == "--alpha") {
      o.alpha = parse_real(flag, value);
      if (!(o.alpha > 0 && o.alpha <= 1)) throw usage_error("--alpha must be in (0, 1]");
    } else if (flag == "--elastic-port") {
      o.elastic_port = value;
    } else if (flag == "--elastic-role") {
      o.elastic_role = value;
      if (o.elastic_role != "server" && o.elastic_role != "client")
        throw usage_error("--elastic-role must be server or client, not '" + o.elastic_role + "'");
    } else if (flag == "--join-timeout-s") {
      o.join_timeout_s = static_cast<int>(parse_count(flag, value));
    } else if (flag == "--link-gbit") {
      o.link_gbit = parse_real(flag, value);
    } else if (flag == "--gemm-us") {
      const std::string v = value;
      o.gemm_us = v == "calibrate" ? -1.0 : parse_real(flag, value);
      if (v != "calibrate" && !(o.gemm_us >= 0))
        throw usage_error("--gemm-us takes calibrate or a cost >= 0, not '" + v + "'");
    } else if (flag == "--fuse-dense") {
      const std::string v = value;
      if (v != "0" && v != "1") throw usage_error("--fuse-dense takes 0 or 1, not '" + v + "'");
      o.fuse_dense = v == "1";
    } else if (flag == "--link-latency-us") {
      o.link_latency_us = parse_real(flag, value);
    } else if (flag == "--node-ranks") {
      o.node_ranks = static_cast<int>(parse_count(flag, value));
    } else if (flag == "--overlap") {
      o.overlap = value;
    } else if (flag == "--autotune") {
      o.autotune_steps = parse_count(flag, value);
    } else if (flag == "--transport") {
      o.transport = value;
    } else if (flag == "--json") {
      o.json_path = value;
    } else if (flag == "--data") {
      o.data_path = value;
    } else if (flag == "--train-samples") {
      o.train_samples = parse_count(flag, value);
    } else if (flag == "--min-loss-decrease") {
      o.min_loss_decrease = parse_real(flag, value);
    } else if (flag == "--learning-window") {
      o.learning_window = parse_count(flag, value);
    } else if (flag == "--hidden") {
      o.hidden.clear();
      std::string_view rest = value;
      while (!rest.empty()) {
        const auto comma = std::min(rest.find(','), rest.size());
        o.hidden.push_back(parse_count(flag, std::string(rest.substr(0, comma)).c_str()));
        rest.remove_prefix(std::min(comma + 1, rest.size()));
      }
    } else {
      throw usage_error("unknown flag " + std::string(flag) + " (see --help)");
    }
  }
  if (o.ranks < 1) throw usage_error("--ranks must be at least 1");
  if (o.epochs < 1) throw usage_error("--epochs must be at least 1");
  if (o.global_batch < 1) throw usage_error("--batch must be at least 1");
  if (o.learning_window < 1) throw usage_error("--learning-window must be at least 1");
  if (o.min_loss_decrease >= 1) throw usage_error("--min-loss-decrease must be below 1");
  for (std::size_t w : o.hidden)
    if (w == 0) throw usage_error("--hidden: widths must be positive");
  const std::optional<tcoll::compression_scheme> compression = registry_scheme(o.scheme);
  if (!compression && std::find(std::begin(own_schemes), std::end(own_schemes), o.scheme) ==
                          std::end(own_schemes)) {
    std::string list;
    for (auto s : registry_schemes) list += (list.empty() ? "" : ", ") + std::string(to_string(s));
    for (auto s : own_schemes) list += ", " + std::string(s);
    throw usage_error("unknown --scheme '" + o.scheme + "' (available: " + list + ")");
  }
  if (o.algorithm != "automatic") {
    tcoll::algorithm_id id{};
    try {
      id = tcoll::parse_algorithm(o.algorithm, tcoll::collective::allreduce);
    } catch (const tcoll::invalid_argument& e) {
      throw usage_error(std::string("--algo: ") + e.what() + " or automatic");
    }
    // automatic passes over a hierarchical rule on one transport, which has no second level
    if (id == tcoll::algorithm_id::hierarchical)
      throw usage_error("--algo hierarchical: the training app runs on one transport, which has "
                        "no second level (a flat algorithm or automatic)");
  }
  // a knob the scheme does not read is an error naming the scheme's own (the registry's)
  if (o.sparse_knobs && !compression)
    throw usage_error("--density, --chunk, --warmup and --residual apply to --scheme csc, topk "
                      "and dgc, not " +
                      o.scheme);
  if (compression) try {
      tcoll::check_knobs(*compression, o.sparse_knobs, "train_mnist");
    } catch (const tcoll::invalid_argument& e) {
      throw usage_error(e.what());
    }
  if (o.overlap.empty()) o.overlap = o.scheme == "hybrid" ? "layerwise" : "none";
  if (o.scheme == "hybrid" && o.overlap != "none" && !tcoll::plan::planner_by_name(o.overlap))
    throw usage_error("--scheme hybrid takes --overlap layerwise (one job per tensor during "
                      "backward, the default), a fusion planner (its buckets group the dense "
                      "tensors) or none, not '" +
                      o.overlap + "'");
  if (o.overlap != "none" && o.scheme != "dense" && o.scheme != "hybrid")
    throw usage_error(
        "--overlap applies to --scheme dense and hybrid (csc overlaps its own buffers with "
        "backward; topk and dgc exchange after backward)");
  if (o.elastic_mode != "async" && o.scheme != "easgd")
    throw usage_error("--elastic-mode applies to --scheme easgd");
  if (o.scheme == "easgd") {
    if (o.clients < 1) throw usage_error("--clients must be at least 1");
    if (o.interval < 1) throw usage_error("--interval must be at least 1");
    const bool sync = o.elastic_mode == "sync";
    if (o.transport == "threads" && o.ranks < o.clients + (sync ? 0 : 1))
      throw usage_error(sync ? "--scheme easgd --elastic-mode sync needs --ranks >= clients"
                             : "--scheme easgd needs --ranks >= clients + 1 (one server)");
  }
  if (o.elastic_port.empty() != o.elastic_role.empty())
    throw usage_error("--elastic-port and --elastic-role go together");
  if (!o.elastic_port.empty() &&
      (o.transport != "mpi" || o.scheme != "easgd" || o.elastic_mode != "async"))
    throw usage_error("--elastic-port joins MPI jobs for asynchronous easgd: --transport mpi "
                      "--scheme easgd");
  if (o.link_gbit > 0 && o.transport != "threads")
    throw usage_error("--link-gbit emulates links between thread ranks: --transport threads");
  if (o.overlap != "none" && !tcoll::plan::planner_by_name(o.overlap))
    throw usage_error("unknown --overlap planner '" + o.overlap +
                      "' (none, layerwise, single, threshold, ddp, mgwfbp, adafusion, optimal)");
  if (o.transport != "threads" && o.transport != "mpi")
    throw usage_error("unknown --transport '" + o.transport + "' (threads, mpi)");
#ifndef TCOLL_HAVE_MPI
  if (o.transport == "mpi") throw usage_error("--transport mpi: this build has no MPI");
#endif
  if (o.transport == "mpi" && ranks_given)
    std::fprintf(stderr, "train: --ranks is ignored under MPI (the world size counts)\n");
  if (o.algorithm == "passthrough" && o.transport != "mpi")
    throw usage_error("--algo passthrough needs a vendor allreduce: use --transport mpi");
  return o;
}

/// The algorithm named `name` (checked by parse_options) as `automatic` with one rule for
/// every size, so each exchange is instantiated once per transport and its allreduces run
/// the named algorithm through automatic's dispatch (default knobs, as `visit_algorithm`
/// gives them). One exchange per algorithm made this file take 151 s to compile.
tcoll::automatic algorithm_of(const std::string& name) {
  if (name == "automatic") return tcoll::automatic{}; // TCOLL_ALLREDUCE_ALGO, else built in
  return tcoll::automatic{.rules = {tcoll::size_rule{.algorithm = tcoll::parse_algorithm(
                                                         name, tcoll::collective::allreduce)}}};
}

/// Fisher-Yates shuffle driven by splitmix64, so every rank (and every platform) draws the
/// same permutation from the same seed.
void shuffle(std::vector<std::size_t>& order, std::uint64_t seed) {
  train::detail::splitmix64 rng{seed};
  for (std::size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.next() % i]);
}

/// FNV-1a over the bytes of the parameters: equal hashes on all ranks (compared with a min
/// and a max allreduce) mean the replicas agree.
std::uint64_t parameter_hash(std::span<const float> parameters) {
  constexpr std::uint64_t fnv_offset = 0xcbf29ce484222325ULL, fnv_prime = 0x100000001b3ULL;
  std::uint64_t h = fnv_offset;
  const auto* bytes = reinterpret_cast<const unsigned char*>(parameters.data());
  for (std::size_t i = 0; i < parameters.size_bytes(); ++i) h = (h ^ bytes[i]) * fnv_prime;
  return h;
}

/// What one epoch measured (the same on every rank after the statistics allreduce).
struct epoch_record {
  int epoch = 0;
  double train_loss = 0;       ///< mean over the epoch's samples, before each update
  double first_steps_loss = 0; ///< mean over the first `learning_window` steps
  double last_steps_loss = 0;  ///< mean over the last `learning_window` steps
  double test_loss = 0;
  double test_accuracy = 0;
  std::vector<double> bytes_sent_per_rank; ///< gradient allreduce traffic, this epoch
  double seconds = 0;                      ///< rank 0's wall time of the epoch
  bool replicas_identical = false;
  std::uint64_t parameter_hash = 0;
};

/// Input, hidden and output widths of the network `o` asks for.
std::vector<std::size_t> layer_widths(const options& o) {
  std::vector<std::size_t> widths{train::mnist_pixels};
  widths.insert(widths.end(), o.hidden.begin(), o.hidden.end());
  widths.push_back(train::mnist_classes);
  return widths;
}

/// One rank's whole training run over any tcoll transport.
template <class Transport>
std::vector<epoch_record> train_rank(Transport& t, const options& o,
                                     const train::train_test_split& data,
                                     const std::vector<std::size_t>& train_subset) {
  const int rank = t.rank(), ranks = t.size();
  train::mlp model(train::mlp_config{layer_widths(o), o.seed});
  train::sgd_momentum optimiser(model.parameters().size(), o.sgd);
  tcoll::counting<Transport> counted(t);
  std::unique_ptr<train::gradient_exchange> exchange;
  {
    const tcoll::automatic algo = algorithm_of(o.algorithm);
    using algo_type = tcoll::automatic;
    using comm_type = tcoll::counting<Transport>;
    if (o.algorithm == "passthrough" &&
        !tcoll::has_native_allreduce<comm_type, float, tcoll::avg_op>)
      throw tcoll::invalid_argument("passthrough: this transport has no vendor allreduce");
    else if (o.scheme == "csc")
      exchange = std::make_unique<train::csc_exchange<comm_type, algo_type>>(counted, model, algo,
                                                                             o.sparse, o.sgd);
    else if (o.scheme == "hybrid")
      exchange = std::make_unique<train::hybrid_exchange<comm_type, algo_type>>(
          counted, model, algo,
          train::hybrid_config{.global_batch = o.global_batch,
                               .link_gbit = o.link_gbit > 0 ? o.link_gbit : 10.0,
                               .link_alpha_us = o.link_gbit > 0 ? o.link_latency_us : 20.0,
                               .overlap = o.overlap != "none",
                               .gemm_us_per_multiply_add = o.gemm_us,
                               .fuse_dense = o.fuse_dense,
                               .planner =
                                   o.overlap == "none" || o.overlap == "layerwise" ? "" : o.overlap,
                               .autotune_steps = o.autotune_steps});
    else if (o.scheme == "topk" || o.scheme == "dgc")
      exchange = std::make_unique<train::topk_exchange<comm_type, algo_type>>(
          counted, model, algo, tcoll::parse_compression(o.scheme), o.sparse, o.sgd);
    else if (o.overlap == "none")
      exchange =
          std::make_unique<train::after_backward<comm_type, algo_type>>(counted, model, algo);
    else
      exchange = std::make_unique<train::overlapped<comm_type, algo_type>>(
          counted, model, algo, train::overlap_options{o.overlap, o.autotune_steps});
  }
  model.on_gradient_ready = [&](std::size_t i) { exchange->gradient_ready(i); };

  const std::size_t samples = train_subset.size();
  const std::size_t steps = (samples + o.global_batch - 1) / o.global_batch;
  std::vector<float> batch_pixels;
  std::vector<std::uint8_t> batch_labels;
  std::vector<std::size_t> order = train_subset;
  std::vector<epoch_record> records;

  // Test shard of this rank, evaluated in chunks.
  const std::size_t test_size = data.test.size();
  const std::size_t test_begin = test_size * rank / ranks,
                    test_end = test_size * (rank + 1) / ranks;

  for (int epoch = 1; epoch <= o.epochs; ++epoch) {
    const auto started = std::chrono::steady_clock::now();
    counted.reset();
    shuffle(order, o.seed + static_cast<std::uint64_t>(epoch));
    // Statistics summed over ranks once per epoch: per-step loss sums, the test loss sum,
    // the test hits, and each rank's bytes in its own slot.
    std::vector<double> stats(steps + 2 + static_cast<std::size_t>(ranks), 0.0);
    for (std::size_t step = 0; step < steps; ++step) {
      const std::size_t begin = step * o.global_batch;
      const std::size_t count = std::min(o.global_batch, samples - begin);
      const std::size_t shard_begin = begin + count * rank / ranks;
      const std::size_t shard_end = begin + count * (rank + 1) / ranks;
      batch_pixels.clear();
      batch_labels.clear();
      for (std::size_t k = shard_begin; k < shard_end; ++k) {
        const std::size_t i = order[k];
        const float* image = data.train.pixels.data() + i * train::mnist_pixels;
        batch_pixels.insert(batch_pixels.end(), image, image + train::mnist_pixels);
        batch_labels.push_back(data.train.labels[i]);
      }
      // Scaled so that the average over ranks is the mean gradient over the global batch,
      // whatever the shard sizes: sum_r (ranks/count * shard sum) / ranks = total / count.
      const float scale = static_cast<float>(ranks) / static_cast<float>(count);
      const auto result = model.forward_backward(batch_pixels.data(), batch_labels.data(),
                                                 batch_labels.size(), scale);
      stats[step] = result.loss_sum;
      exchange->finish_step();
      exchange->apply_update(model, optimiser);
    }

    train::batch_result test;
    for (std::size_t c = test_begin; c < test_end; c += o.eval_chunk) {
      const std::size_t n = std::min(o.eval_chunk, test_end - c);
      const auto r = model.evaluate(data.test.pixels.data() + c * train::mnist_pixels,
                                    data.test.labels.data() + c, n);
      test.loss_sum += r.loss_sum;
      test.correct += r.correct;
    }
    stats[steps] = test.loss_sum;
    stats[steps + 1] = static_cast<double>(test.correct);
    stats[steps + 2 + static_cast<std::size_t>(rank)] =
        static_cast<double>(counted.counts().bytes_sent);
    tcoll::allreduce(t, std::span<double>(stats), tcoll::sum_op{}, tcoll::automatic{});

    std::uint64_t hash_min = parameter_hash(model.parameters()), hash_max = hash_min;
    tcoll::allreduce(t, std::span<std::uint64_t>(&hash_min, 1), tcoll::min_op{},
                     tcoll::automatic{});
    tcoll::allreduce(t, std::span<std::uint64_t>(&hash_max, 1), tcoll::max_op{},
                     tcoll::automatic{});

    epoch_record rec;
    rec.epoch = epoch;
    const auto step_samples = [&](std::size_t step) {
      return static_cast<double>(std::min(o.global_batch, samples - step * o.global_batch));
    };
    const auto window_mean = [&](std::size_t first, std::size_t last) {
      double loss = 0, n = 0;
      for (std::size_t s = first; s < last; ++s) loss += stats[s], n += step_samples(s);
      return loss / n;
    };
    const std::size_t window = std::min(o.learning_window, steps);
    rec.train_loss = window_mean(0, steps);
    rec.first_steps_loss = window_mean(0, window);
    rec.last_steps_loss = window_mean(steps - window, steps);
    rec.test_loss = test_size ? stats[steps] / static_cast<double>(test_size) : 0;
    rec.test_accuracy = test_size ? stats[steps + 1] / static_cast<double>(test_size) : 0;
    rec.bytes_sent_per_rank.assign(stats.begin() + static_cast<std::ptrdiff_t>(steps + 2),
                                   stats.end());
    rec.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    rec.replicas_identical = hash_min == hash_max;
    rec.parameter_hash = hash_min;
    if (rank == 0) {
      double mean_bytes = 0;
      for (double b : rec.bytes_sent_per_rank) mean_bytes += b / ranks;
      std::printf("epoch %d  train_loss %.4f  test_loss %.4f  test_accuracy %.2f%%  "
                  "sent/rank %.1f MB  %.2f s%s\n",
                  epoch, rec.train_loss, rec.test_loss, 100 * rec.test_accuracy, mean_bytes / 1e6,
                  rec.seconds, rec.replicas_identical ? "" : "  REPLICAS DIFFER");
      std::fflush(stdout);
    }
    records.push_back(std::move(rec));
  }
  if (rank == 0 && !exchange->describe().empty()) std::printf("%s\n", exchange->describe().c_str());
  return records;
}

/// A float as the short decimal that was typed (0.05, not 0.0500000007).
std::string shortest(float value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.*g", std::numeric_limits<float>::digits10 + 1,
                static_cast<double>(value));
  return text;
}

std::string hex64(std::uint64_t v) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(v));
  return text;
}

void write_json(const std::string& path, const options& o, int ranks, std::size_t train_samples,
                std::size_t test_samples, const std::vector<epoch_record>& records) {
  std::size_t parameters = 0;
  const auto widths = layer_widths(o);
  for (std::size_t l = 0; l + 1 < widths.size(); ++l) parameters += (widths[l] + 1) * widths[l + 1];
  std::ofstream out(path);
  if (!out) throw std::runtime_error("cannot write " + path);
  out.precision(9);
  out << "{\n  \"config\": {\"ranks\": " << ranks << ", \"transport\": \"" << o.transport
      << "\", \"algorithm\": \"" << o.algorithm << "\", \"scheme\": \"" << o.scheme
      << "\", \"overlap\": \"" << o.overlap << "\", \"epochs\": " << o.epochs
      << ", \"global_batch\": " << o.global_batch
      << ", \"learning_rate\": " << shortest(o.sgd.learning_rate)
      << ", \"momentum\": " << shortest(o.sgd.momentum) << ", \"seed\": " << o.seed;
  if (o.scheme == "csc" || o.scheme == "topk" || o.scheme == "dgc")
    out << ", \"density\": " << o.sparse.density
        << ", \"warmup_steps\": " << o.sparse.warmup_iterations << ", \"residual\": \""
        << (o.scheme == "dgc" ? "dgc" : tcoll::sparse::to_string(o.sparse.residual)) << "\"";
  if (o.scheme == "csc") out << ", \"chunk_elements\": " << o.sparse.chunk_elements;
  out << ", \"train_samples\": " << train_samples << ", \"test_samples\": " << test_samples
      << ", \"parameters\": " << parameters << ", \"layer_widths\": [";
  for (std::size_t l = 0; l < widths.size(); ++l) out << (l ? ", " : "") << widths[l];
  out << "]},\n  \"epochs\": [";
  for (std::size_t i = 0; i < records.size(); ++i) {
    const auto& r = records[i];
    out << (i ? ",\n" : "\n") << "    {\"epoch\": " << r.epoch
        << ", \"train_loss\": " << r.train_loss << ", \"first_steps_loss\": " << r.first_steps_loss
        << ", \"last_steps_loss\": " << r.last_steps_loss << ", \"test_loss\": " << r.test_loss
        << ", \"test_accuracy\": " << r.test_accuracy << ", \"bytes_sent_per_rank\": [";
    for (std::size_t k = 0; k < r.bytes_sent_per_rank.size(); ++k)
      out << (k ? ", " : "") << static_cast<std::uint64_t>(r.bytes_sent_per_rank[k]);
    out << "], \"seconds\": " << r.seconds
        << ", \"replicas_identical\": " << (r.replicas_identical ? "true" : "false")
        << ", \"parameter_hash\": \"" << hex64(r.parameter_hash) << "\"}";
  }
  out << "\n  ]\n}\n";
}

/// Loads the data, runs the ranks over `run_ranks(body)`, reports; returns the exit code.
template <class RunRanks>
int run(const options& o, bool is_root, RunRanks&& run_ranks) {
  if (!std::filesystem::exists(o.data_path)) {
    std::printf("train: skipped: %s is missing; run scripts/fetch_mnist.sh\n", o.data_path.c_str());
    return exit_data_missing;
  }
  const train::train_test_split data =
      train::split_every_nth(train::load_mnist_csv_gz(o.data_path), o.test_every);
  // A fixed random subset (the file is sorted by label, so a prefix would hold few digits).
  std::vector<std::size_t> subset(data.train.size());
  std::iota(subset.begin(), subset.end(), std::size_t{0});
  if (o.train_samples && o.train_samples < subset.size()) {
    shuffle(subset, o.seed);
    subset.resize(o.train_samples);
  }
  std::vector<epoch_record> records;
  int ranks = 0;
  if (o.scheme == "easgd") { // its own loop and reports (elastic_exchange.hpp)
    train::easgd_config c{
        o.clients, o.interval,      o.alpha,      o.epochs,    o.global_batch,          o.sgd,
        o.seed,    layer_widths(o), o.eval_chunk, o.json_path, o.elastic_mode == "sync"};
    std::atomic<int> code{exit_ok};
    run_ranks([&](auto& t) {
      if (t.rank() == 0 && is_root && c.synchronous)
        std::printf("train: easgd (sync), %d ranks (%s): %d clients, no server, interval %d, "
                    "%zu training / %zu test samples, batch %zu per step over all clients\n",
                    t.size(), o.transport.c_str(), o.clients, o.interval, subset.size(),
                    data.test.size(), o.global_batch);
      else if (t.rank() == 0 && is_root)
        std::printf("train: easgd, %d ranks (%s): %d clients + server (rank %d), interval %d, "
                    "%zu training / %zu test samples, batch %zu per step over all clients\n",
                    t.size(), o.transport.c_str(), o.clients, t.size() - 1, o.interval,
                    subset.size(), data.test.size(), o.global_batch);
      if (train::run_easgd(t, c, data, subset) != 0) code = exit_replicas_differ;
    });
    return code;
  }
  run_ranks([&](auto& t) {
    if (t.rank() == 0 && is_root)
      std::printf("train: %d ranks (%s), %zu training / %zu test samples, global batch %zu, "
                  "lr %g, momentum %g, algo %s, scheme %s, overlap %s\n",
                  t.size(), o.transport.c_str(), subset.size(), data.test.size(), o.global_batch,
                  static_cast<double>(o.sgd.learning_rate), static_cast<double>(o.sgd.momentum),
                  o.algorithm.c_str(), o.scheme.c_str(), o.overlap.c_str());
    auto mine = train_rank(t, o, data, subset);
    if (t.rank() == 0) {
      records = std::move(mine);
      ranks = t.size();
    }
  });
  if (!is_root) return exit_ok; // MPI ranks other than 0 report nothing
  if (!o.json_path.empty())
    write_json(o.json_path, o, ranks, subset.size(), data.test.size(), records);
  const auto& last = records.back();
  const bool agree = std::all_of(records.begin(), records.end(),
                                 [](const epoch_record& r) { return r.replicas_identical; });
  std::printf("replicas: %s (parameter hash %016llx)\n",
              agree ? "bitwise identical on every rank" : "DIFFER",
              static_cast<unsigned long long>(last.parameter_hash));
  if (!agree) return exit_replicas_differ;
  if (o.check_learning) {
    const double first = records.front().first_steps_loss, final_loss = last.last_steps_loss;
    const bool learned = final_loss <= (1 - o.min_loss_decrease) * first;
    std::printf("learning: mean loss of the first %zu steps %.4f, of the last %zu steps %.4f: "
                "%s (by %.0f%%, %.0f%% required)\n",
                o.learning_window, first, o.learning_window, final_loss,
                learned ? "decreased" : "DID NOT DECREASE ENOUGH", 100 * (1 - final_loss / first),
                100 * o.min_loss_decrease);
    if (!learned) return exit_no_learning;
  }
  return exit_ok;
}

} // namespace

int main(int argc, char** argv) {
  options o;
  try {
    o = parse_options(argc, argv);
  } catch (const usage_error& e) {
    std::fprintf(stderr, "train: %s\n", e.what());
    return exit_usage;
  }
  try {
    if (o.transport == "threads") {
      tcoll::thread_team team(o.ranks);
      if (o.link_gbit > 0) { // emulated nodes joined by a slower link (tcoll::shaped)
        int per_node = o.node_ranks;
        if (per_node < 1)
          per_node = o.scheme != "easgd"        ? 1
                     : o.elastic_mode == "sync" ? o.ranks / o.clients
                                                : (o.ranks - 1) / o.clients;
        tcoll::shaped_network net(tcoll::shaping{
            std::chrono::nanoseconds(static_cast<long long>(o.link_latency_us * 1e3)), o.link_gbit,
            per_node});
        std::printf("train: emulated link %.3g Gbit/s, %.3g us between nodes of %d ranks\n",
                    o.link_gbit, o.link_latency_us, per_node);
        return run(o, true, [&](auto&& body) {
          team.run([&](tcoll::thread_transport& t) {
            tcoll::shaped<tcoll::thread_transport> s(t, net);
            body(s);
          });
        });
      }
      return run(o, true,
                 [&](auto&& body) { team.run([&](tcoll::thread_transport& t) { body(t); }); });
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train: error: %s\n", e.what());
    return exit_error;
  }
#ifdef TCOLL_HAVE_MPI
  // The application owns MPI; tcoll works on a duplicate. Non-blocking collectives (csc's
  // lazy buffers, --overlap) run on tcoll's communication thread: MPI_THREAD_MULTIPLE.
  int provided = MPI_THREAD_SINGLE;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm world = MPI_COMM_WORLD;
  tcoll::elastic::joined_world joined;
  if (!o.elastic_port.empty()) { // MXNET-MPI's setup: a server job and one job per client
    namespace el = tcoll::elastic;
    const el::join_options jo{.timeout = std::chrono::seconds(o.join_timeout_s),
                              .server_last = true};
    try {
      joined = o.elastic_role == "server"
                   ? el::accept_clients(MPI_COMM_WORLD, o.elastic_port, o.clients, jo)
                   : el::join_server(MPI_COMM_WORLD, o.elastic_port, jo);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "train: %s\n", e.what());
      MPI_Abort(MPI_COMM_WORLD, exit_error);
    }
    o.clients = joined.clients; // the server's count
    // easgd's layout cuts the workers into equal consecutive blocks: each job one block
    std::string bad;
    if (joined.job_sizes[static_cast<std::size_t>(joined.clients)] != 1)
      bad = "the server's job must be 1 process";
    else if (!joined.uniform_client_size())
      bad = "every client job must have the same number of processes";
    int joined_rank = 0;
    MPI_Comm_rank(joined.comm, &joined_rank);
    if (!bad.empty()) {
      if (joined_rank == 0) {
        std::fprintf(stderr,
                     "train: --elastic-port: %s; job sizes (clients in order of "
                     "arrival, then the server):",
                     bad.c_str());
        for (int s : joined.job_sizes) std::fprintf(stderr, " %d", s);
        std::fprintf(stderr, "\n");
      }
      tcoll::elastic::finalize_joined(joined, exit_usage);
      return exit_usage;
    }
    if (joined_rank == 0)
      std::printf("train: joined %d client jobs of %d processes and a server job through %s\n",
                  joined.clients, joined.job_sizes[0], o.elastic_port.c_str());
    world = joined.comm;
  }
  int world_rank = 0;
  MPI_Comm_rank(world, &world_rank);
  int code = exit_error;
  try {
    tcoll::mpi_transport t(world);
    code = run(o, world_rank == 0, [&](auto&& body) { body(t); });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train: rank %d: error: %s\n", world_rank, e.what());
    MPI_Abort(world, exit_error);
  }
  // Only rank 0 reports; every process exits with its verdict.
  MPI_Bcast(&code, 1, MPI_INT, 0, world);
  if (joined.comm != MPI_COMM_NULL)
    tcoll::elastic::finalize_joined(joined, code); // a barrier, then exit (Open MPI 4.1)
  else
    MPI_Finalize();
  return code;
#else
  return exit_error; // unreachable: parse_options rejects --transport mpi without MPI
#endif
}
