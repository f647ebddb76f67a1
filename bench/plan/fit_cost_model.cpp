// fit_cost_model: least-squares calibration of the planner's cost models from the
// --json output of bench/allreduce_perf.
//
//   fit_cost_model FILE [--algorithm NAME] [--ranks N] [--transport NAME] [--inplace 0|1]
//                  [--model linear|piecewise|both] [--threshold BYTES|auto]
//                  [--weighting relative|absolute] [--gamma US_PER_BYTE]
//
// Prints the linear model T = a + b*M (MG-WFBP Eq. 9) and, for the library's flat
// algorithms at a fixed rank count, the alpha and beta it implies; and the piecewise
// model of OSF Eq. 18. Each with its rms and max relative error over the samples.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <string>

#include "tcoll/plan/bench_records.hpp"

using namespace tcoll::plan;

namespace {

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "fit_cost_model: %s\n"
               "usage: fit_cost_model FILE [--algorithm NAME] [--ranks N] [--transport NAME] "
               "[--inplace 0|1]\n"
               "                      [--model linear|piecewise|both] [--threshold BYTES|auto]\n"
               "                      [--weighting relative|absolute] [--gamma US_PER_BYTE]\n",
               why.c_str());
  std::exit(2);
}

/// The flat algorithm (one with a link to recover) of the table named `name`, if any.
std::optional<tcoll::algorithm_id> flat_algorithm(const std::string& name) {
  for (tcoll::algorithm_id a : tcoll::all_algorithm_ids)
    if (has_flat_allreduce_cost(a) && name == tcoll::to_string(a)) return a;
  return std::nullopt;
}

void print_error(const fit_error& e) {
  std::printf(
      "  fit error: rms relative %.2f%%, max relative %.2f%%, rms %.3f us over %zu samples\n",
      100 * e.rms_relative, 100 * e.max_relative, e.rms_us, e.count);
}

} // namespace

int main(int argc, char** argv) {
  std::string path, model = "both", threshold = "auto";
  record_filter filter;
  fit_options options;
  double gamma = 0.0;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&] {
      if (i + 1 >= argc) usage("missing value after " + arg);
      return std::string(argv[++i]);
    };
    if (arg == "--algorithm")
      filter.algorithm = value();
    else if (arg == "--ranks")
      filter.ranks = std::atoi(value().c_str());
    else if (arg == "--transport")
      filter.transport = value();
    else if (arg == "--inplace")
      filter.inplace = std::atoi(value().c_str());
    else if (arg == "--model")
      model = value();
    else if (arg == "--threshold")
      threshold = value();
    else if (arg == "--gamma")
      gamma = std::atof(value().c_str());
    else if (arg == "--weighting") {
      const auto w = value();
      if (w == "relative")
        options.weighting = fit_weighting::relative;
      else if (w == "absolute")
        options.weighting = fit_weighting::absolute;
      else
        usage("unknown weighting " + w);
    } else if (arg == "-h" || arg == "--help")
      usage("help");
    else if (!arg.empty() && arg[0] == '-')
      usage("unknown option " + arg);
    else if (path.empty())
      path = arg;
    else
      usage("more than one input file");
  }
  if (path.empty()) usage("no input file");
  if (model != "linear" && model != "piecewise" && model != "both") usage("unknown model " + model);

  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "fit_cost_model: cannot open %s\n", path.c_str());
    return 1;
  }
  std::ostringstream text;
  text << in.rdbuf();
  try {
    const auto records = to_allreduce_records(parse_json_records(text.str()));
    const auto samples = select_samples(records, filter);
    std::set<std::string> algorithms;
    std::set<int> ranks;
    for (const auto& r : records) {
      if ((filter.algorithm.empty() || r.algorithm == filter.algorithm) &&
          (filter.ranks == 0 || r.ranks == filter.ranks)) {
        algorithms.insert(r.algorithm);
        ranks.insert(r.ranks);
      }
    }
    std::printf("# %s: %zu records, %zu selected (algorithm=%s ranks=%s)\n", path.c_str(),
                records.size(), samples.size(),
                filter.algorithm.empty() ? "any" : filter.algorithm.c_str(),
                filter.ranks ? std::to_string(filter.ranks).c_str() : "any");
    if (samples.empty()) {
      std::fprintf(stderr, "fit_cost_model: no records match the filter\n");
      return 1;
    }
    if (algorithms.size() > 1 || ranks.size() > 1)
      std::printf("# warning: fitting several algorithms/rank counts together; use --algorithm and "
                  "--ranks\n");

    if (model != "piecewise") {
      const auto fit = fit_linear(samples, options);
      std::printf("linear: T(M) = a + b*M\n  a = %.6g us\n  b = %.6g us/byte (%.4g GB/s)\n",
                  fit.startup_us, fit.per_byte_us,
                  fit.per_byte_us > 0 ? 1e-3 / fit.per_byte_us : 0.0);
      print_error(evaluate_fit(fit, samples));
      const auto algorithm = flat_algorithm(filter.algorithm);
      if (algorithm && filter.ranks >= 2) {
        const auto link = link_from_linear_fit(*algorithm, filter.ranks, fit, gamma);
        std::printf("  implied link for %s on %d ranks (gamma = %.4g us/byte): alpha = %.6g us, "
                    "beta = %.6g us/byte\n",
                    filter.algorithm.c_str(), filter.ranks, gamma, link.alpha_us,
                    link.beta_us_per_byte);
      }
    }
    if (model != "linear") {
      const auto fit = threshold == "auto"
                           ? fit_piecewise_auto(samples, options)
                           : fit_piecewise(samples, std::atof(threshold.c_str()), options);
      std::printf("piecewise (OSF Eq. 18): a1*log2(D) + b1 if D < %.6g bytes, else a2*D + b2\n"
                  "  a1 = %.6g us  b1 = %.6g us  a2 = %.6g us/byte  b2 = %.6g us\n",
                  fit.threshold_bytes, fit.log_slope_us, fit.log_offset_us, fit.linear_slope_us,
                  fit.linear_offset_us);
      print_error(evaluate_fit(fit, samples));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fit_cost_model: %s\n", e.what());
    return 1;
  }
  return 0;
}
