#pragma once
/// \file
/// The two-level machines of `allreduce_perf -t node` and their rows, one translation unit
/// per machine (bench/perf_node.cpp: the driver and `hierarchical<shm_transport,
/// mpi_transport>`; bench/perf_node_mpi.cpp: `hierarchical<mpi_transport, mpi_transport>`).
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include <tcoll/algorithm/hierarchical.hpp>
#include <tcoll/collectives.hpp>
#include <tcoll/node_hierarchy.hpp>
#include <tcoll/transport/mpi.hpp>

#include "perf_options.hpp"
#include "perf_report.hpp"
#include "perf_runner.hpp"

namespace tcoll::bench {

static_assert(hierarchical_options<>::name == "hierarchical",
              "allreduce_perf -a hierarchical (node_algorithms()) is the algorithm's name");

/// `hierarchical<mpi_transport, mpi_transport>` on the nodes `mpi_node_hierarchy` forms
/// with the same `ranks_per_node`: the same ranks, MPI point to point instead of shared
/// memory inside a node. Collective over `world` to construct.
class mpi_mpi_hierarchy {
public:
  mpi_mpi_hierarchy(mpi_transport& world, int ranks_per_node)
      : intra_(ranks_per_node > 0 ? world.split(world.rank() / ranks_per_node, world.rank())
                                  : world.split_shared()),
        inter_(world.split(intra_.rank(), world.rank())) {
    int shards = intra_.size(); // the smallest node's size (as mpi_node_hierarchy)
    allreduce(world, &shards, &shards, 1, min_op{}, recursive_doubling{});
    machine_.emplace(intra_, intra_.rank() < shards ? &inter_ : nullptr,
                     hierarchy_shape{world.rank(), world.size(), shards});
  }
  mpi_mpi_hierarchy(const mpi_mpi_hierarchy&) = delete;
  mpi_mpi_hierarchy& operator=(const mpi_mpi_hierarchy&) = delete;
  hierarchical<mpi_transport, mpi_transport>& get() noexcept { return *machine_; }

private:
  mpi_transport intra_, inter_;
  std::optional<hierarchical<mpi_transport, mpi_transport>> machine_;
};

/// One row `hierarchical/<inter>` (`hierarchical_options<inter>`) of `dtype` and `op` at
/// `bytes` on `machine`, timed and checked through `world` (the same ranks in the same
/// order); rank 0 appends it. `send` and `recv` hold at least `bytes`, aligned for every
/// element type.
void run_row_node(hierarchical<shm_transport, mpi_transport>& machine, mpi_transport& world,
                  const perf_options& o, const std::string& inter, const std::string& dtype,
                  const std::string& op, std::size_t bytes, void* send, void* recv,
                  std::vector<row>& rows);
void run_row_node(hierarchical<mpi_transport, mpi_transport>& machine, mpi_transport& world,
                  const perf_options& o, const std::string& inter, const std::string& dtype,
                  const std::string& op, std::size_t bytes, void* send, void* recv,
                  std::vector<row>& rows);

/// Calls f(algorithm struct) for the algorithm across nodes named `name`: ring,
/// recursive_doubling or recursive_halving_doubling. Fewer than `with_algorithm` offers, on
/// purpose: every one is instantiated for every element size and machine.
template <class F>
void with_inter_algorithm(const std::string& name, const perf_options& o, F&& f) {
  ring rg{};
  if (o.segment_bytes) rg.max_segment_bytes = o.segment_bytes;
  if (name == "ring") return f(rg);
  if (name == "recursive_doubling") return f(recursive_doubling{});
  if (name == "recursive_halving_doubling") return f(recursive_halving_doubling{});
  throw invalid_argument("allreduce_perf: --inter " + name +
                         ": ring, recursive_doubling or recursive_halving_doubling");
}

/// The body of both `run_row_node`s; `transport_name` is the row's transport.
template <class Machine>
void node_row(Machine& machine, mpi_transport& world, const perf_options& o,
              const std::string& transport_name, const std::string& inter, const std::string& dtype,
              const std::string& op, std::size_t bytes, void* send, void* recv,
              std::vector<row>& rows) {
  const scalar_type type = parse_dtype(dtype);
  const reduce_kind kind = parse_op(op);
  with_inter_algorithm(inter, o, [&](const auto& across) {
    hierarchical_options<std::decay_t<decltype(across)>> h;
    h.inter = across;
    if (o.segment_bytes) h.intra.max_segment_bytes = o.segment_bytes;
    row rw{"hierarchical/" + inter,
           transport_name,
           std::string(name_of(type)),
           op,
           world.size(),
           bytes,
           bytes / size_of(type),
           {},
           {}};
    rw.out_of_place = measure_on(machine, world, o, h, type, kind, send, recv, rw.count, false);
    rw.in_place = measure_on(machine, world, o, h, type, kind, send, recv, rw.count, true);
    if (world.rank() == 0) rows.push_back(rw);
  });
}

} // namespace tcoll::bench
