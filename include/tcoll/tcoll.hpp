#pragma once
/// \file
/// Umbrella header: the core, the CPU reducer, the thread transport, every algorithm and the
/// entry points. Optional transports have their own headers (transport/mpi.hpp, ...).
#include "collectives.hpp"
#include "core/concepts.hpp"
#include "core/error.hpp"
#include "core/ops.hpp"
#include "core/symbolic.hpp"
#include "core/types.hpp"
#include "reduce/cpu.hpp"
#include "transport/threads.hpp"
