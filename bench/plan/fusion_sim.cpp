// fusion_sim: simulated iteration time and scaling factor of every fusion planner for
// every model profile x rank count x network (bench/plan/fusion_grid.hpp), plus the
// two paper experiments the planners come from (MG-WFBP Fig. 9, OSF Fig. 11).
//
//   fusion_sim [--profiles DIR] [--json FILE] [--quiet]
//              [--trace FILE --trace-cell MODEL,RANKS,NETWORK,PLANNER]
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "fusion_grid.hpp"

using namespace tcoll::plan;

namespace {

struct cell {
  std::string model, network, planner;
  int ranks = 0;
  double iteration_us = 0, scaling_factor = 0, compute_us = 0, non_overlapped_us = 0;
  std::size_t buckets = 0;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "fusion_sim: %s\nusage: fusion_sim [--profiles DIR] [--json FILE] [--quiet]\n"
               "                  [--trace FILE --trace-cell MODEL,RANKS,NETWORK,PLANNER]\n",
               why);
  std::exit(2);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// Speedup of every listed planner (N * scaling factor) for one model on one network.
void paper_block(const char* title, const workload& w, const grid::network& net,
                 const std::vector<int>& ranks, const std::vector<std::string_view>& planners,
                 bool speedup) {
  std::printf("\n%s\n%8s", title, "ranks");
  for (auto p : planners) std::printf(" %12.*s", static_cast<int>(p.size()), p.data());
  std::printf("\n");
  for (int n : ranks) {
    const auto truth = grid::truth_for(net, n);
    std::printf("%8d", n);
    for (auto p : planners) {
      const auto t = simulate(w, truth, grid::plan_with(p, w, truth));
      std::printf(" %12.3f", speedup ? n * t.scaling_factor : t.scaling_factor);
    }
    std::printf("\n");
  }
}

} // namespace

int main(int argc, char** argv) {
  std::string profile_dir = TCOLL_PROFILE_DIR, json_path, trace_path, trace_cell;
  bool quiet = false;
  for (int i = 1; i < argc; ++i) {
    auto value = [&] {
      if (i + 1 >= argc) usage("missing value");
      return std::string(argv[++i]);
    };
    if (!std::strcmp(argv[i], "--profiles"))
      profile_dir = value();
    else if (!std::strcmp(argv[i], "--json"))
      json_path = value();
    else if (!std::strcmp(argv[i], "--trace"))
      trace_path = value();
    else if (!std::strcmp(argv[i], "--trace-cell"))
      trace_cell = value();
    else if (!std::strcmp(argv[i], "--quiet"))
      quiet = true;
    else
      usage("unknown argument");
  }
  if (trace_path.empty() != trace_cell.empty()) usage("--trace and --trace-cell go together");

  std::map<std::string, profile> profiles;
  try {
    for (const auto& m : grid::models)
      profiles[std::string(m.name)] =
          load_profile(profile_dir + "/" + std::string(m.name) + ".csv");
  } catch (const profile_error& e) {
    std::fprintf(stderr, "fusion_sim: %s\n", e.what());
    return 1;
  }

  std::vector<cell> cells;
  if (!quiet) {
    std::printf("# scaling factor (OSF Eq. 3/11) per planner; ring allreduce; V100-class GPU at "
                "50%% of peak\n");
    std::printf("%-11s %-8s %5s", "model", "network", "ranks");
    for (auto p : grid::planner_names) std::printf(" %12.*s", static_cast<int>(p.size()), p.data());
    std::printf(" %8s\n", "opt.bkts");
  }
  for (const auto& m : grid::models) {
    const auto& prof = profiles[std::string(m.name)];
    const auto w = make_workload(prof, grid::compute_for(m.batch_size));
    for (const auto& net : grid::networks) {
      for (int ranks : grid::rank_counts) {
        const auto truth = grid::truth_for(net, ranks);
        if (!quiet)
          std::printf("%-11.*s %-8.*s %5d", int(m.name.size()), m.name.data(), int(net.name.size()),
                      net.name.data(), ranks);
        std::size_t optimal_buckets = 0;
        for (auto planner : grid::planner_names) {
          const auto plan = grid::plan_with(planner, w, truth);
          const auto t = simulate(w, truth, plan);
          cells.push_back({std::string(m.name), std::string(net.name), std::string(planner), ranks,
                           t.iteration_us, t.scaling_factor, t.compute_us, t.non_overlapped_us,
                           plan.bucket_count()});
          if (planner == "optimal") optimal_buckets = plan.bucket_count();
          if (!quiet) std::printf(" %12.4f", t.scaling_factor);
          const std::string id = std::string(m.name) + "," + std::to_string(ranks) + "," +
                                 std::string(net.name) + "," + std::string(planner);
          if (id == trace_cell) {
            std::ofstream out(trace_path);
            std::vector<std::string> names;
            for (const auto& tensor : prof.tensors) names.push_back(tensor.name);
            write_chrome_trace(out, t, names);
            if (!out) {
              std::fprintf(stderr, "fusion_sim: cannot write %s\n", trace_path.c_str());
              return 1;
            }
          }
        }
        if (!quiet) std::printf(" %8zu\n", optimal_buckets);
      }
    }
  }

  // optimal against each baseline: ratio of iteration times over all cells
  std::printf("\n# optimal vs baselines over %zu cells: speedup = t_baseline / t_optimal\n",
              cells.size() / grid::planner_names.size());
  std::printf("%-14s %10s %10s  %s\n", "baseline", "median", "worst", "worst cell");
  const std::size_t P = grid::planner_names.size();
  bool optimal_never_slower = true;
  for (std::size_t b = 0; b < P; ++b) {
    if (grid::planner_names[b] == "optimal") continue;
    std::vector<double> ratios;
    double worst = 0;
    std::string worst_cell;
    for (std::size_t c = 0; c < cells.size(); c += P) {
      const cell& base = cells[c + b];
      const cell& opt = cells[c + P - 1];
      const double r = base.iteration_us / opt.iteration_us;
      if (r < 1 - 1e-12) optimal_never_slower = false;
      ratios.push_back(r);
      if (r > worst) {
        worst = r;
        worst_cell = base.model + " " + base.network + " " + std::to_string(base.ranks);
      }
    }
    std::printf("%-14.*s %10.4f %10.3f  %s\n", int(grid::planner_names[b].size()),
                grid::planner_names[b].data(), median(ratios), worst, worst_cell.c_str());
  }
  std::printf("optimal never slower than any planner: %s\n", optimal_never_slower ? "yes" : "NO");

  // MG-WFBP Fig. 9: K80 nodes on 10 GbE, GoogLeNet batch 64, ResNet-50 batch 32.
  const compute_model k80{5.6e12, 0.5, 0, 4};
  const std::vector<int> fig9_ranks{4, 8, 16, 32, 64};
  const std::vector<std::string_view> fig9_planners{"layerwise", "single", "mgwfbp", "optimal"};
  auto with_batch = [](compute_model c, int batch) {
    c.batch_size = batch;
    return c;
  };
  paper_block("# MG-WFBP Fig. 9 (simulated K80 cluster, 10GbE): speedup N*SF; layerwise = WFBP, "
              "single = SyncEASGD",
              make_workload(profiles["googlenet"], with_batch(k80, 64)), grid::networks[0],
              fig9_ranks, fig9_planners, true);
  std::printf("  (googlenet, batch 64)\n");
  paper_block("", make_workload(profiles["resnet50"], with_batch(k80, 32)), grid::networks[0],
              fig9_ranks, fig9_planners, true);
  std::printf("  (resnet50, batch 32)\n");

  // OSF Fig. 11: 32 RTX 2080 Ti (13.4 TFLOP/s) on 25 GbE.
  std::printf("\n# OSF Fig. 11 (32 GPUs, 25GbE, RTX 2080 Ti at 50%%, batch 32): scaling factor\n");
  std::printf("%-11s %12s %12s %12s %12s\n", "model", "fusion_100mb", "mgwfbp", "adafusion",
              "optimal");
  for (const char* model : {"resnet50", "resnet101", "resnet152", "vgg16", "vgg19"}) {
    const auto w = make_workload(profiles[model], compute_model{13.4e12, 0.5, 32, 4});
    const auto truth = grid::truth_for(grid::networks[1], 32);
    std::printf("%-11s", model);
    for (auto p : {"fusion_100mb", "mgwfbp", "adafusion", "optimal"})
      std::printf(" %12.4f", simulate(w, truth, grid::plan_with(p, w, truth)).scaling_factor);
    std::printf("\n");
  }

  if (!json_path.empty()) {
    std::ofstream out(json_path);
    out.precision(10);
    out << "[\n";
    for (std::size_t i = 0; i < cells.size(); ++i) {
      const auto& c = cells[i];
      out << "  {\"model\":\"" << c.model << "\",\"ranks\":" << c.ranks << ",\"network\":\""
          << c.network << "\",\"planner\":\"" << c.planner
          << "\",\"iteration_time_us\":" << c.iteration_us
          << ",\"scaling_factor\":" << c.scaling_factor << ",\"buckets\":" << c.buckets
          << ",\"compute_us\":" << c.compute_us << ",\"non_overlapped_us\":" << c.non_overlapped_us
          << "}" << (i + 1 < cells.size() ? ",\n" : "\n");
    }
    out << "]\n";
    if (!out) {
      std::fprintf(stderr, "fusion_sim: cannot write %s\n", json_path.c_str());
      return 1;
    }
  }
  return optimal_never_slower ? 0 : 1;
}
