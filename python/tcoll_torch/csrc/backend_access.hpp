#pragma once
// What other parts of the extension may reach of a tcoll backend (backend.hpp): its
// communicators. The DistributedDataParallel reducer (ddp.cpp) runs the execution layer's
// iteration driver on them, in the same message spaces as the backend's own calls.
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <tcoll/algorithm/hierarchical.hpp>
#include <tcoll/collectives.hpp>
#include <tcoll/transport/shm.hpp>

#include "internode_transport.hpp"

namespace tcoll_torch {

/// A tcoll backend's communicators: its node's shared-memory transport (every rank of the
/// group on one node), and across nodes the hierarchy its allreduce runs on and the flat
/// transport over every rank that its other collectives run on (both null on one node).
struct backend_communicators {
  tcoll::shm_transport* shm = nullptr;
  tcoll::hierarchical<tcoll::shm_transport, internode_transport>* machine = nullptr;
  int rank = 0, size = 1;
  internode_transport* flat = nullptr;
};

/// The communicators of `b`; throws (a Python ValueError) when `b` is not a tcoll backend.
backend_communicators communicators_of(const c10::intrusive_ptr<c10d::Backend>& b);

} // namespace tcoll_torch
