#pragma once
/// \file
/// tcoll planning layer: cost models, model profiles, fusion planners, the WFBP
/// timeline simulator and calibration. Pure C++20, no communication; see
/// docs/planner.md and docs/plan_api.md. The reader of benchmark JSON records,
/// tcoll/plan/bench_records.hpp, needs nlohmann/json and is included separately.

#include "tcoll/plan/adafusion.hpp"
#include "tcoll/plan/any_planner.hpp"
#include "tcoll/plan/interface.hpp"
#include "tcoll/plan/replan.hpp"
#include "tcoll/plan/bucket_plan.hpp"
#include "tcoll/plan/calibrate.hpp"
#include "tcoll/plan/cost_model.hpp"
#include "tcoll/plan/ddp.hpp"
#include "tcoll/plan/layerwise.hpp"
#include "tcoll/plan/mgwfbp.hpp"
#include "tcoll/plan/optimal.hpp"
#include "tcoll/plan/profile.hpp"
#include "tcoll/plan/simulate.hpp"
#include "tcoll/plan/single.hpp"
#include "tcoll/plan/threshold.hpp"
#include "tcoll/plan/trace.hpp"
