// The foundation's collective test bodies on device_team with the cuda reducer.
#include <doctest/doctest.h>

#include <tcoll/reduce/cuda.cuh>

#include "team_cases.hpp"

using namespace tcoll;
using namespace tcoll::testing;

TCOLL_DEVICE_TEAM_CASES(tcoll::cuda_reducer, "device_team+cuda")
