#pragma once
/// \file
/// Timings of a scheduled iteration (steady clock): what the overlap scheduler records and
/// the trace writer reads, in a header of their own so the trace writer needs no scheduler.
#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include "../core/concepts.hpp" // tcoll::clock

namespace tcoll {

/// Timings of one bucket (one job of the iteration driver) in one iteration (steady clock).
struct bucket_timing {
  std::size_t bucket = 0, first_tensor = 0, end_tensor = 0;
  std::size_t bytes = 0;           ///< on the wire (the pool's bytes unless a mixed-precision wire)
  clock::time_point first_ready{}; ///< its first tensor was marked ready
  clock::time_point ready{};       ///< its last tensor was marked ready
  clock::time_point queued{};      ///< handed to the engine (= start of QUEUE)
  clock::time_point started{};     ///< its allreduce began
  clock::time_point finished{};    ///< its allreduce ended
  clock::time_point collected{};   ///< `finish()` had its result (after its wait)
};

/// Timings of one scheduled iteration.
struct iteration_timing {
  clock::time_point begin{};                   ///< end of the previous finish() (or construction)
  clock::time_point end{};                     ///< finish() returned
  std::vector<clock::time_point> tensor_ready; ///< per tensor, in backward order
  std::vector<bucket_timing> buckets;          ///< in plan order
  std::string algorithm;
};

} // namespace tcoll
