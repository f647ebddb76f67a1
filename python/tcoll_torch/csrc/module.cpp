// The Python module `tcoll_torch._C` (tcoll_torch/__init__.py): the functions that create
// and inspect a tcoll backend from Python, the `direct_handle` of `tcoll_torch.all_reduce`,
// the call into Python that `split_group` makes (create_through_python), and the DDP
// reducer of ddp.cpp. The one file of the backend that includes pybind11 and
// torch/extension.h.
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/extension.h>

#include <pybind11/chrono.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "backend.hpp"
#include "backend_access.hpp"
#include "mpi_link.hpp"

namespace tcoll_torch {

/// Adds the DistributedDataParallel reducer (`_C.Reducer`) to the module (ddp.cpp).
void register_ddp(pybind11::module& m);

c10::intrusive_ptr<c10d::Backend>
create_through_python(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                      std::chrono::milliseconds timeout,
                      const std::vector<std::uint64_t>& global_ranks) {
  pybind11::gil_scoped_acquire gil;
  auto made = pybind11::module_::import("tcoll_torch")
                  .attr("_create")(store->clone(), rank, size, timeout, global_ranks);
  return made.cast<c10::intrusive_ptr<c10d::Backend>>();
}

/// `b` (the object `group._get_backend(torch.device("cpu"))` returns) as a tcoll backend;
/// otherwise an error naming `what`, the function asked.
backend& tcoll_backend(const c10::intrusive_ptr<c10d::Backend>& b, const char* what) {
  auto* mine = dynamic_cast<backend*>(b.get());
  TORCH_CHECK(mine, "tcoll: ", what, ": not a tcoll backend");
  return *mine;
}

/// `time_raw_allreduce` of the tcoll backend of a process group.
double time_raw_allreduce(const c10::intrusive_ptr<c10d::Backend>& b, std::size_t bytes,
                          int iters) {
  return tcoll_backend(b, "time_raw_allreduce").time_raw_allreduce(bytes, iters);
}

backend_communicators communicators_of(const c10::intrusive_ptr<c10d::Backend>& b) {
  auto* mine = dynamic_cast<backend*>(b.get());
  if (!mine)
    throw pybind11::value_error("tcoll: the process group's CPU backend is " +
                                (b ? b->getBackendName() : std::string("missing")) +
                                ", not tcoll (init_process_group(\"tcoll\") or \"cpu:tcoll,...\")");
  return mine->communicators();
}

namespace { // hidden, as pybind11's own types (no visibility warning for its class_)
/// A tcoll backend held for `tcoll_torch.all_reduce` (tcoll_torch/__init__.py keeps one per
/// group): the checked cast is made once, not per call.
class direct_handle {
public:
  explicit direct_handle(const c10::intrusive_ptr<c10d::Backend>& b)
      : keep_(b), backend_(dynamic_cast<backend*>(b.get())) {
    if (!backend_)
      throw pybind11::value_error("tcoll_torch.all_reduce: the group's CPU backend is " +
                                  (b ? b->getBackendName() : std::string("missing")) +
                                  ", not tcoll");
  }
  void all_reduce(const at::Tensor& tensor, c10d::ReduceOp::RedOpType op) {
    backend_->all_reduce_now(tensor, op);
  }

private:
  c10::intrusive_ptr<c10d::Backend> keep_;
  backend* backend_;
};
} // namespace

/// What carries a tcoll backend's messages between nodes: "mpi", "gloo" or "none".
std::string internode_of(const c10::intrusive_ptr<c10d::Backend>& b) {
  return tcoll_backend(b, "internode_of").internode();
}

/// mpi_link::world_ranks with its tcoll errors as Python ValueErrors.
std::vector<int> mpi_world_ranks(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size) {
  try {
    return mpi_link::world_ranks(*store, rank, size);
  } catch (const tcoll::invalid_argument& e) {
    throw pybind11::value_error(std::string("tcoll: ") + e.what());
  }
}

/// The layout a tcoll backend runs with (tests, TCOLL_DEBUG users).
std::tuple<int, int, int, int, int> layout_of(const c10::intrusive_ptr<c10d::Backend>& b) {
  return tcoll_backend(b, "layout_of").layout();
}

/// Messages this rank has sent from registered memory on its node's transport (tests: the
/// staged allreduce sends from its registered buffers).
std::uint64_t registered_messages(const c10::intrusive_ptr<c10d::Backend>& b) {
  return tcoll_backend(b, "registered_messages").registered_messages();
}

/// Calls this rank has run on its two-level machine across nodes (tests).
std::uint64_t machine_calls(const c10::intrusive_ptr<c10d::Backend>& b) {
  return tcoll_backend(b, "machine_calls").machine_calls();
}
} // namespace tcoll_torch

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "tcoll's torch.distributed backend (docs/torch.md)";
  m.def("registered_messages", &tcoll_torch::registered_messages,
        "messages sent from registered shared memory by this rank (tests)");
  m.def("machine_calls", &tcoll_torch::machine_calls,
        "calls this rank has run on its two-level machine across nodes (tests)");
  // the collective set-up calls wait for the other ranks through the store: without the
  // GIL, so that the process's other Python threads (their collectives included) go on
  using no_gil = pybind11::call_guard<pybind11::gil_scoped_release>;
  m.def("node_layout", &tcoll_torch::node_layout,
        "(node, nodes, local_rank, local_size, shards) of a group (collective)", no_gil());
  m.def("create_backend", &tcoll_torch::create_backend, "the creator of a tcoll process group",
        no_gil(), pybind11::arg("store"), pybind11::arg("rank"), pybind11::arg("size"),
        pybind11::arg("timeout"), pybind11::arg("layout"), pybind11::arg("flat_group") = nullptr,
        pybind11::arg("inter_group") = nullptr, pybind11::arg("mpi_ranks") = std::vector<int>{},
        pybind11::arg("global_ranks") = std::vector<std::uint64_t>{});
  m.def(
      "set_records_flight_recorder",
      [](bool on) { tcoll_torch::records_natively.store(on, std::memory_order_relaxed); },
      "whether tcoll's groups record into torch's Flight Recorder themselves (set once torch "
      "attaches no recording hook to them)");
  m.def("mpi_world_ranks", &tcoll_torch::mpi_world_ranks, no_gil(),
        "every rank's MPI_COMM_WORLD rank when MPI is to carry the group's messages between "
        "nodes, else [] (collective through the store; TCOLL_TORCH_INTERNODE)");
  m.def("mpi_finalize", &tcoll_torch::mpi_link::finalize_if_initialised_here,
        "MPI_Finalize, if this extension initialised MPI");
  m.def(
      "mpi_initialised_here", [] { return tcoll_torch::mpi_link::initialised_here(); },
      "whether this extension called MPI_Init_thread");
  m.def("internode_of", &tcoll_torch::internode_of,
        "what carries a tcoll backend's messages between nodes: mpi, gloo or none");
  m.attr("built_with_mpi") = tcoll_torch::mpi_link::built_with_mpi();
  // the GIL is let go while the call runs: a future callback of an earlier call (a DDP comm
  // hook) may need it on the engine thread before this call can start
  pybind11::class_<tcoll_torch::direct_handle>(m, "DirectHandle")
      .def(pybind11::init<const c10::intrusive_ptr<c10d::Backend>&>())
      .def("all_reduce", &tcoll_torch::direct_handle::all_reduce,
           pybind11::call_guard<pybind11::gil_scoped_release>(),
           "allreduce of one CPU tensor in place, returning when done");
  m.def("layout_of", &tcoll_torch::layout_of,
        "(node, nodes, local_rank, local_size, shards) of a tcoll backend");
  m.def("time_raw_allreduce", &tcoll_torch::time_raw_allreduce,
        "seconds per blocking allreduce straight from C++ (collective; benchmarks only)");
  tcoll_torch::register_ddp(m);
}
