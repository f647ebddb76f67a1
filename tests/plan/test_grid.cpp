// The fusion_sim grid: optimal is never slower than any other planner in any cell.
#include <doctest/doctest.h>

#include <string>

#include "../../bench/plan/fusion_grid.hpp"

using namespace tcoll::plan;

TEST_CASE("optimal is never slower than any planner in any fusion_sim cell") {
  int cells = 0;
  for (const auto& model : grid::models) {
    const auto prof =
        load_profile(std::string(TCOLL_PROFILE_DIR) + "/" + std::string(model.name) + ".csv");
    const auto w = make_workload(prof, grid::compute_for(model.batch_size));
    for (const auto& net : grid::networks) {
      for (int ranks : grid::rank_counts) {
        const auto truth = grid::truth_for(net, ranks);
        const double best = iteration_time_us(w, truth, grid::plan_with("optimal", w, truth));
        for (auto planner : grid::planner_names) {
          const auto p = grid::plan_with(planner, w, truth);
          REQUIRE(is_valid(p, w.size()));
          const double t = iteration_time_us(w, truth, p);
          if (!(best <= t * (1 + 1e-12))) {
            CAPTURE(model.name);
            CAPTURE(net.name);
            CAPTURE(ranks);
            CAPTURE(planner);
            CHECK(best <= t);
          }
          ++cells;
        }
      }
    }
  }
  CHECK(cells == 9 * 4 * 8 * 8);
}
