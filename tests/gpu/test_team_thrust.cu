// The foundation's collective test bodies on device_team with the thrust reducer.
#include <doctest/doctest.h>

#include <tcoll/reduce/thrust.cuh>

#include "team_cases.hpp"

using namespace tcoll;
using namespace tcoll::testing;

TCOLL_DEVICE_TEAM_CASES(tcoll::thrust_reducer, "device_team+thrust")
