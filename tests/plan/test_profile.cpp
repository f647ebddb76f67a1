// Profiles: published parameter counts, OSF Table 2, the embedded form, workload
// construction by hand, timing files, and a fuzz test of the loader.
#include <doctest/doctest.h>

#include <random>
#include <string>

#include "tcoll/plan/embedded/resnet50.hpp"
#include "tcoll/plan/profile.hpp"

using namespace tcoll::plan;

namespace {
std::string profile_path(const std::string& model) {
  return std::string(TCOLL_PROFILE_DIR) + "/" + model + ".csv";
}
} // namespace

TEST_CASE("published parameter counts and tensor counts") {
  struct published {
    const char* model;
    std::uint64_t parameters;
    std::size_t tensors; // 0: not checked
  };
  // torchvision / HuggingFace definitions (see docs/planner.md)
  const published table[] = {
      {"resnet50", 25'557'032, 161}, {"resnet101", 44'549'160, 0},  {"resnet152", 60'192'808, 0},
      {"vgg16", 138'357'544, 32},    {"vgg19", 143'667'240, 38},    {"alexnet", 61'100'840, 16},
      {"googlenet", 6'624'904, 0},   {"bert_base", 109'482'240, 0}, {"gpt2_small", 124'439'808, 0},
  };
  for (const auto& row : table) {
    CAPTURE(row.model);
    const auto p = load_profile(profile_path(row.model));
    CHECK(p.model == row.model);
    CHECK(p.parameter_count() == row.parameters);
    if (row.tensors != 0) CHECK(p.tensors.size() == row.tensors);
  }
}

TEST_CASE("OSF Table 2: parameter size (MiB) and GFLOPs (multiply-adds) per image") {
  struct osf_row {
    const char* model;
    double size_mb;
    double gflops;
  };
  const osf_row table[] = {{"resnet50", 98, 4},
                           {"resnet101", 170, 8},
                           {"resnet152", 230, 12},
                           {"vgg16", 528, 16},
                           {"vgg19", 549, 20}};
  for (const auto& row : table) {
    CAPTURE(row.model);
    const auto p = load_profile(profile_path(row.model));
    const double mib = p.parameter_count() * 4.0 / (1 << 20);
    CHECK(mib == doctest::Approx(row.size_mb).epsilon(0.01));
    double flops = 0;
    for (const auto& t : p.tensors) flops += static_cast<double>(t.forward_flops);
    // the table rounds to whole GFLOPs and counts a multiply-add once
    CHECK(flops / 2 / 1e9 == doctest::Approx(row.gflops).epsilon(0.05 + 0.5 / row.gflops));
  }
  // MG-WFBP Sec. I: ResNet-50 "takes 102 MB data communication in one iteration"
  CHECK(load_profile(profile_path("resnet50")).parameter_count() * 4 / 1e6 ==
        doctest::Approx(102.2).epsilon(0.001));
}

TEST_CASE("backward order: the classifier comes first, the stem last") {
  const auto p = load_profile(profile_path("resnet50"));
  CHECK(p.tensors.front().name == "fc.bias");
  CHECK(p.tensors.back().name == "conv1.weight");
  CHECK(p.tensors.back().elements == 64 * 3 * 7 * 7);
  // stem conv: 2 * 64*3*7*7 MACs per output pixel, 112x112 outputs
  CHECK(p.tensors.back().forward_flops == 2ull * 64 * 3 * 7 * 7 * 112 * 112);
}

TEST_CASE("the embedded ResNet-50 equals the data file") {
  const auto p = load_profile(profile_path("resnet50"));
  REQUIRE(p.tensors.size() == embedded::resnet50.size());
  for (std::size_t i = 0; i < p.tensors.size(); ++i) {
    CHECK(p.tensors[i].name == embedded::resnet50[i].name);
    CHECK(p.tensors[i].elements == embedded::resnet50[i].elements);
    CHECK(p.tensors[i].forward_flops == embedded::resnet50[i].forward_flops);
  }
  static_assert(parameter_count(embedded::resnet50) == 25'557'032);
}

TEST_CASE("workload from FLOPs (OSF Eq. 5-6) by hand") {
  const auto p = parse_profile("name,elements,forward_flops\na,10,1000000000\nb,3,0\n", "tiny");
  // forward = M C / (c pi) = 2 * 1e9 / (0.5 * 1e12) s = 4000 us, backward twice that
  const auto w = make_workload(p, compute_model{1e12, 0.5, 2, 2});
  REQUIRE(w.size() == 2);
  CHECK(w.bytes[0] == 20);
  CHECK(w.bytes[1] == 6);
  CHECK(w.backward_us[0] == doctest::Approx(8000.0));
  CHECK(w.backward_us[1] == 0.0);
  CHECK(w.forward_us == doctest::Approx(4000.0));
  CHECK(w.compute_us() == doctest::Approx(12000.0));
}

TEST_CASE("workload from a measured timing file") {
  const auto p = parse_profile("name,elements,forward_flops\na,10,5\nb,3,5\n", "tiny");
  const auto mixed =
      parse_layer_timings("# measured\nname,backward_us,forward_us\nb,7.5,2\na,4,1\n");
  const auto w = make_workload(p, mixed, 4);
  CHECK(w.backward_us[0] == 4.0); // profile order, not file order
  CHECK(w.backward_us[1] == 7.5);
  CHECK(w.forward_us == doctest::Approx(3.0));
  CHECK(w.bytes[0] == 40);
  // without forward times, forward is half of backward (OSF Eq. 6)
  const auto only_backward = parse_layer_timings("name,backward_us\na,4\nb,6\n");
  CHECK(make_workload(p, only_backward).forward_us == doctest::Approx(5.0));
  const auto missing = parse_layer_timings("name,backward_us\na,4\n");
  CHECK_THROWS_WITH_AS(make_workload(p, missing), doctest::Contains("no entry for tensor 'b'"),
                       profile_error);
  CHECK_THROWS_WITH_AS(parse_layer_timings("name,backward_us\na,-1\n"), doctest::Contains(":2:"),
                       profile_error);
  CHECK_THROWS_WITH_AS(parse_layer_timings("name,backward_us,forward_us\na,4,\n"),
                       doctest::Contains("forward_us"), profile_error);
}

TEST_CASE("malformed profiles give line-numbered errors") {
  struct bad {
    const char* text;
    const char* message;
  };
  const bad cases[] = {
      {"", "no header"},
      {"# only a comment\n", "no header"},
      {"name,elements\nx,1\n", ":1: expected header"},
      {"name,elements,forward_flops\n", "lists no tensors"},
      {"name,elements,forward_flops\na,1,2,3\n", ":2: expected 3 comma-separated fields, got 4"},
      {"name,elements,forward_flops\na,1\n", ":2: expected 3"},
      {"name,elements,forward_flops\n,1,2\n", ":2: empty tensor name"},
      {"name,elements,forward_flops\na,0,2\n", "has 0 elements"},
      {"name,elements,forward_flops\na,-5,2\n", "'-5' is not a non-negative integer"},
      {"name,elements,forward_flops\na,1.5,2\n", "'1.5' is not a non-negative integer"},
      {"name,elements,forward_flops\na,12x,2\n", "not a non-negative integer"},
      {"name,elements,forward_flops\na,,2\n", "elements '' is not"},
      {"name,elements,forward_flops\na,1,99999999999999999999999\n", "too large"},
      {"name,elements,forward_flops\na,1,1\n\n# gap\na,2,2\n",
       ":5: duplicate tensor 'a' (first on line 2)"},
      {"name,elements,forward_flops\na,281474976710657,1\n", "implausibly many"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.text);
    CHECK_THROWS_WITH_AS(parse_profile(c.text, "m", "f.csv"), doctest::Contains(c.message),
                         profile_error);
  }
  CHECK_THROWS_WITH_AS(load_profile("/nonexistent/x.csv"), doctest::Contains("cannot open"),
                       profile_error);
  // tolerated: CRLF line ends, spaces around fields, comments anywhere
  const auto ok =
      parse_profile("# c\r\nname,elements,forward_flops\r\n a , 3 , 4 \r\n# c\nb,1,0", "m");
  CHECK(ok.tensors.size() == 2);
  CHECK(ok.tensors[0].name == "a");
  CHECK(ok.tensors[0].elements == 3);
}

TEST_CASE("fuzz: garbage and mutated profiles either parse consistently or throw profile_error") {
  std::mt19937_64 rng(20240611);
  const std::string valid = "# header comment\nname,elements,forward_flops\nfc.bias,1000,1000\n"
                            "fc.weight,2048000,4096000\nconv1.weight,9408,236027904\n";
  const std::string alphabet = "abc,.#-+0123456789\n\r\t \xff\x00e";
  int parsed = 0, rejected = 0;
  for (int round = 0; round < 4000; ++round) {
    std::string text;
    if (round % 4 == 0) { // pure garbage
      const std::size_t n = rng() % 200;
      for (std::size_t i = 0; i < n; ++i) text += static_cast<char>(rng() % 256);
    } else { // a valid file with a few random edits
      text = valid;
      const int edits = 1 + static_cast<int>(rng() % 4);
      for (int e = 0; e < edits && !text.empty(); ++e) {
        const std::size_t at = rng() % text.size();
        switch (rng() % 3) {
        case 0:
          text[at] = alphabet[rng() % alphabet.size()];
          break;
        case 1:
          text.erase(at, 1 + rng() % 8);
          break;
        default:
          text.insert(at, 1, alphabet[rng() % alphabet.size()]);
        }
      }
    }
    try {
      const auto p = parse_profile(text, "fuzz");
      ++parsed;
      REQUIRE_FALSE(p.tensors.empty());
      for (const auto& t : p.tensors) {
        REQUIRE(t.elements > 0);
        REQUIRE_FALSE(t.name.empty());
      }
    } catch (const profile_error& e) {
      ++rejected;
      REQUIRE(std::string(e.what()).find("fuzz") == std::string::npos); // message names the source
      REQUIRE(std::string(e.what()).find("tcoll: <profile>:") == 0);    // tcoll::error decorates
    }
  }
  CHECK(parsed > 100);    // the mutations leave many files valid...
  CHECK(rejected > 1000); // ...and break many
}
