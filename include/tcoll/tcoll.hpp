#pragma once
/// \file
/// Umbrella header: the core, the CPU reducer, the thread transport and its decorators,
/// every algorithm (flat, multi-ring, hierarchical, tensor) and the entry points. Transports
/// that need a vendor library have their own headers (transport/mpi.hpp, transport/nccl.hpp,
/// transport/composed.hpp, reduce/cuda.cuh, ...); the planner is plan.hpp.
#include "algorithm/hierarchical.hpp"
#include "algorithm/multi_ring.hpp"
#include "collectives.hpp"
#include "communicator.hpp"
#include "core/concepts.hpp"
#include "core/error.hpp"
#include "core/ops.hpp"
#include "core/symbolic.hpp"
#include "core/types.hpp"
#include "reduce/cpu.hpp"
#include "tensor_allreduce.hpp"
#include "transport/counting.hpp"
#include "transport/shaped.hpp"
#include "transport/subgroup.hpp"
#include "transport/threads.hpp"
