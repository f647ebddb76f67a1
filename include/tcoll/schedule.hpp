#pragma once
/// \file
/// The execution layer: the communication engine and non-blocking collectives, prepared
/// allreduce, the gradient pool, the overlap scheduler and its measured Chrome trace.
#include "schedule/collective_tasks.hpp"
#include "schedule/engine.hpp"
#include "schedule/gradient_pool.hpp"
#include "schedule/iteration.hpp"
#include "schedule/nonblocking.hpp"
#include "schedule/prepared.hpp"
#include "schedule/scheduler.hpp"
#include "schedule/trace.hpp"
