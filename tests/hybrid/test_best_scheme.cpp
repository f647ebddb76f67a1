// Per-layer scheme choice (suite 'hybrid'): Poseidon's Table 1 and Algorithm 1 against the
// paper's worked examples, and tcoll's alpha-beta comparison against costs worked out by
// hand here. Constant-evaluated where the deciders are constexpr.
#include <doctest/doctest.h>

#include <array>
#include <string>

#include <tcoll/hybrid/best_scheme.hpp>

using namespace tcoll::hybrid;
using tcoll::algorithm_id;

namespace {
constexpr layer vgg_fc = layer::fc(4096, 4096);
constexpr layer googlenet_fc = layer::fc(1000, 1024);

// Table 1 worked example (POS L122, L133): VGG-19 FC 4096 x 4096, K = 32, P1 = P2 = 8.
static_assert(table1::ps_worker(4096, 4096) == 33554432.0);              // "34M"
static_assert(table1::ps_server(4096, 4096, 8, 8) == 33554432.0);        // "34M"
static_assert(table1::ps_server_worker(4096, 4096, 8, 8) == 58720256.0); // "58.7M"
static_assert(table1::sfb_worker(4096, 4096, 32, 8) == 3670016.0);       // "3.7M"
static_assert(poseidon_best_scheme(vgg_fc, 8, 8, 32) == scheme::sfb);
// GoogLeNet on 16 nodes (POS L307): FC 1000 x 1024, K = 128: SFB 7.77M > PS 3.84M.
static_assert(table1::sfb_worker(1000, 1024, 128, 16) == 7772160.0);
static_assert(table1::ps_server_worker(1000, 1024, 16, 16) == 3840000.0);
static_assert(poseidon_best_scheme(googlenet_fc, 16, 16, 128) == scheme::dense);
// Non-FC layers always go to the PS.
static_assert(poseidon_best_scheme(layer::dense(4096), 8, 8, 32) == scheme::dense);
// tcoll's comparison is constexpr too.
static_assert(best_scheme(vgg_fc, 8, 32, sfb_costs{algorithm_id::ring, {1, {}, {0.0, 1.0, 0.0}}}) ==
              scheme::sfb);

constexpr tcoll::plan::hierarchy_params flat(double alpha, double beta) {
  return {1, {alpha, beta, 0.0}, {alpha, beta, 0.0}};
}
} // namespace

TEST_CASE("Table 1 formulas on the VGG-19 example and the Adam row") {
  CHECK(table1::ps_worker(4096, 4096) == 33554432.0);
  CHECK(table1::ps_server(4096, 4096, 8, 8) == 33554432.0);
  CHECK(table1::ps_server_worker(4096, 4096, 8, 8) == 58720256.0);
  CHECK(table1::sfb_worker(4096, 4096, 32, 8) == 3670016.0);
  // Adam (max): P1 MN + P1 K(M+N); K(M+N) + MN; (P1-1)(MN + KM + KN), by hand:
  CHECK(table1::adam_server(4096, 4096, 32, 8) == 8.0 * 16777216 + 8.0 * 32 * 8192);
  CHECK(table1::adam_worker(4096, 4096, 32) == 32.0 * 8192 + 16777216);
  CHECK(table1::adam_server_worker(4096, 4096, 32, 8) == 7.0 * (16777216 + 2 * 32 * 4096));
  // Asymmetric M, N, P1 != P2.
  CHECK(table1::ps_server(300, 70, 6, 3) == 2.0 * 6 * 300 * 70 / 3);
  CHECK(table1::ps_server_worker(300, 70, 6, 3) == 2.0 * 300 * 70 * 7 / 3);
  CHECK(table1::sfb_worker(300, 70, 5, 6) == 2.0 * 5 * 5 * 370);
}

TEST_CASE("Algorithm 1: worked examples, the tie going to SFB, non-FC layers") {
  CHECK(poseidon_best_scheme(vgg_fc, 8, 8, 32) == scheme::sfb);
  CHECK(poseidon_best_scheme(googlenet_fc, 16, 16, 128) == scheme::dense);
  // Tie: P1 = P2 = 2, M = N = 2K: SFB 2K(M+N) = 8K^2 = PS 2MN(2)/2 = 8K^2 -> SFB (line 7: <=).
  CHECK(table1::sfb_worker(2, 2, 1, 2) == table1::ps_server_worker(2, 2, 2, 2));
  CHECK(poseidon_best_scheme(layer::fc(2, 2), 2, 2, 1) == scheme::sfb);
  CHECK(poseidon_best_scheme(layer::fc(2, 2), 2, 2, 2) == scheme::dense);
  // Tie with P1 != P2: M = 6, N = 3, P1 = 2, P2 = 3: PS = 2*18*3/3 = 36, SFB = 2K*1*9 = 18K,
  // so K = 2 ties (SFB) and K = 3 does not.
  CHECK(poseidon_best_scheme(layer::fc(6, 3), 2, 3, 2) == scheme::sfb);
  CHECK(poseidon_best_scheme(layer::fc(6, 3), 2, 3, 3) == scheme::dense);
  CHECK(poseidon_best_scheme(layer::dense(1 << 20), 2, 2, 1) == scheme::dense);
  // The largest batch that still goes SFB for VGG's FC at P1 = P2 = 8:
  // 2K*7*8192 <= 58720256  <=>  K <= 512 (a tie at 512).
  CHECK(poseidon_best_scheme(vgg_fc, 8, 8, 512) == scheme::sfb);
  CHECK(poseidon_best_scheme(vgg_fc, 8, 8, 513) == scheme::dense);
}

TEST_CASE("tcoll's decider: ring allreduce of MN against allgathers of K(M+N), by hand") {
  // Pure bandwidth (alpha = 0, beta = 1 us/byte), float.
  const sfb_costs bw{algorithm_id::ring, flat(0.0, 1.0)};
  // VGG FC, P = 8, K = 32: dense 2*7/8*4096*4096*4 = 117440512; SFB 7*(32 + 32*8192*4).
  CHECK(dense_cost_us(vgg_fc, 8, bw) == 117440512.0);
  CHECK(sfb_cost_us(vgg_fc, 8, 32, bw) == 7.0 * (32 + 32.0 * 8192 * 4));
  CHECK(best_scheme(vgg_fc, 8, 32, bw) == scheme::sfb);
  // GoogLeNet FC, P = 16, K = 128: dense 2*15/16*1000*1024*4 = 7680000; SFB 15*(32 +
  // 128*2024*4) = 15544800 -> dense.
  CHECK(dense_cost_us(googlenet_fc, 16, bw) == 7680000.0);
  CHECK(sfb_cost_us(googlenet_fc, 16, 128, bw) == 15.0 * (32 + 128.0 * 2024 * 4));
  CHECK(best_scheme(googlenet_fc, 16, 128, bw) == scheme::dense);
  // Crossover for VGG at P = 8: (p-1)(32 + 4K(M+N)) < 2(p-1)/p 4MN  <=>  K < 511.99..
  CHECK(best_scheme(vgg_fc, 8, 511, bw) == scheme::sfb);
  CHECK(best_scheme(vgg_fc, 8, 512, bw) == scheme::dense);
  // One rank: nothing to send, dense.
  CHECK(best_scheme(vgg_fc, 1, 32, bw) == scheme::dense);
  // Dense-only layers.
  CHECK(best_scheme(layer::dense(100000000), 8, 1, bw) == scheme::dense);
}

TEST_CASE("tcoll's decider: latency, the algorithm, the GEMM cost and ties") {
  // Latency only: ring allreduce 2(p-1) alpha < three allgathers 3(p-1) alpha -> dense.
  const sfb_costs lat{algorithm_id::ring, flat(10.0, 0.0)};
  CHECK(dense_cost_us(layer::fc(4, 4), 4, lat) == 60.0);
  CHECK(sfb_cost_us(layer::fc(4, 4), 4, 1, lat) == 90.0);
  CHECK(best_scheme(layer::fc(4, 4), 4, 1, lat) == scheme::dense);
  // Recursive doubling on 8 ranks: 3 (alpha + n beta); with beta = 1, alpha = 0, M = N = 64,
  // K = 1: dense 3*16384 = 49152, SFB 7*(32 + 512) = 3808 -> SFB.
  const sfb_costs rd{algorithm_id::recursive_doubling, flat(0.0, 1.0)};
  CHECK(dense_cost_us(layer::fc(64, 64), 8, rd) == 49152.0);
  CHECK(best_scheme(layer::fc(64, 64), 8, 1, rd) == scheme::sfb);
  // A costly GEMM (P K M N multiply-adds) tips it back to dense.
  sfb_costs slow_gemm = rd;
  slow_gemm.gemm_us_per_multiply_add = 1.0; // 8*64*64 = 32768 more -> 36576 < 49152: SFB
  CHECK(best_scheme(layer::fc(64, 64), 8, 1, slow_gemm) == scheme::sfb);
  slow_gemm.gemm_us_per_multiply_add = 2.0; // 65536 more -> dense
  CHECK(best_scheme(layer::fc(64, 64), 8, 1, slow_gemm) == scheme::dense);
  // A backward that skips the SFB layer's dense gradient saves K M N: SFB adds (P-1) K M N =
  // 7*4096 multiply-adds; at 2 us 3808 + 57344 = 61152 >= 49152: still dense; at 1.5 us
  // 3808 + 43008 = 46816: SFB (without the saving 3808 + 49152 = 52960: dense).
  slow_gemm.factor_only_backward = true;
  CHECK(sfb_extra_multiply_adds(layer::fc(64, 64), 8, 1, true) == 7.0 * 4096);
  CHECK(sfb_extra_multiply_adds(layer::fc(64, 64), 8, 3, false) == 8.0 * 3 * 4096);
  CHECK(sfb_cost_us(layer::fc(64, 64), 8, 1, slow_gemm) == 3808.0 + 2.0 * 7 * 4096);
  CHECK(best_scheme(layer::fc(64, 64), 8, 1, slow_gemm) == scheme::dense);
  slow_gemm.gemm_us_per_multiply_add = 1.5;
  CHECK(best_scheme(layer::fc(64, 64), 8, 1, slow_gemm) == scheme::sfb);
  slow_gemm.factor_only_backward = false; // 3808 + 1.5*32768 = 52960 -> dense
  CHECK(best_scheme(layer::fc(64, 64), 8, 1, slow_gemm) == scheme::dense);
  // Tie: alpha = 0, beta = 1, 2 ranks: dense = 4MN, SFB = 32 + 4K(M+N);
  // M = 20, N = 4: 320 = 32 + 96K at K = 3.
  const sfb_costs tie{algorithm_id::ring, flat(0.0, 1.0)};
  CHECK(dense_cost_us(layer::fc(20, 4), 2, tie) == sfb_cost_us(layer::fc(20, 4), 2, 3, tie));
  CHECK(best_scheme(layer::fc(20, 4), 2, 3, tie) == scheme::dense);
  sfb_costs tie_sfb = tie;
  tie_sfb.ties_go_to_sfb = true;
  CHECK(best_scheme(layer::fc(20, 4), 2, 3, tie_sfb) == scheme::sfb);
  // double elements double both sides.
  sfb_costs dbl = tie;
  dbl.element_bytes = 8;
  CHECK(dense_cost_us(layer::fc(20, 4), 2, dbl) == 640.0);
}

TEST_CASE("tcoll's decider with a hierarchical dense allreduce: the form is a knob") {
  // 8 ranks in groups of 4: the dense cost is the planner's hierarchical formula, sharded by
  // default (the hierarchical allreduce's default), leader when told.
  const tcoll::plan::hierarchy_params two_level{4, {1.0, 0.1, 0.0}, {10.0, 1.0, 0.0}};
  sfb_costs hier{algorithm_id::hierarchical, two_level};
  const double bytes = 64.0 * 64.0 * 4.0;
  CHECK(dense_cost_us(layer::fc(64, 64), 8, hier) ==
        tcoll::plan::hierarchical_sharded_allreduce_us(bytes, 8, two_level));
  hier.dense_form = tcoll::hierarchical_form::leader;
  CHECK(dense_cost_us(layer::fc(64, 64), 8, hier) ==
        tcoll::plan::hierarchical_leader_allreduce_us(bytes, 8, two_level));
  // an algorithm of another collective is refused
  const sfb_costs wrong{algorithm_id::bruck, flat(0.0, 1.0)};
  CHECK_THROWS_AS((void)dense_cost_us(layer::fc(4, 4), 4, wrong), tcoll::invalid_argument);
}

TEST_CASE("tcoll's decider on arbitrary calibrated models (model_costs)") {
  using tcoll::plan::linear_cost;
  // Linear models equal to a ring allreduce and a ring allgather on 8 ranks of a
  // bandwidth-only link (beta = 1): allreduce 2*7/8 bytes, allgather 7 bytes per rank.
  const model_costs<linear_cost, linear_cost> ring8{{0.0, 1.75}, {0.0, 7.0}};
  CHECK(dense_cost_us(vgg_fc, 8, ring8) == 117440512.0);
  CHECK(sfb_cost_us(vgg_fc, 8, 32, ring8) == 7.0 * (32 + 32.0 * 8192 * 4));
  CHECK(best_scheme(vgg_fc, 8, 511, ring8) == scheme::sfb);
  CHECK(best_scheme(vgg_fc, 8, 512, ring8) == scheme::dense);
  // A startup cost per allgather: FC 64x64, K = 1: dense 1.75*16384 = 28672; SFB
  // 3*1000 + 7*(32 + 256 + 256) = 6808 -> SFB; with 10000 us per startup: 33808 -> dense.
  const model_costs<linear_cost, linear_cost> lat1{{0.0, 1.75}, {1000.0, 7.0}};
  const model_costs<linear_cost, linear_cost> lat10{{0.0, 1.75}, {10000.0, 7.0}};
  CHECK(sfb_cost_us(layer::fc(64, 64), 8, 1, lat1) == 6808.0);
  CHECK(best_scheme(layer::fc(64, 64), 8, 1, lat1) == scheme::sfb);
  CHECK(best_scheme(layer::fc(64, 64), 8, 1, lat10) == scheme::dense);
  // OSF's piecewise model (log below 1 MB, linear above) for both collectives.
  const tcoll::plan::piecewise_cost pw{10.0, 50.0, 0.001, 100.0, 1048576.0};
  const model_costs<tcoll::plan::piecewise_cost, tcoll::plan::piecewise_cost> osf{pw, pw};
  // dense 4096x4096 floats: 0.001*67108864 + 100; SFB: 3 small allgathers on the log piece:
  // 10*log2(32) + 50 + 2 * (10*log2(32*4096*4) + 50) = 100 + 2*(190 + 50) = 580.
  CHECK(dense_cost_us(vgg_fc, 8, osf) == doctest::Approx(67208.864));
  CHECK(sfb_cost_us(vgg_fc, 8, 32, osf) == doctest::Approx(580.0));
  CHECK(best_scheme(vgg_fc, 8, 32, osf) == scheme::sfb);
  const std::array<layer, 2> m = {vgg_fc, layer::dense(10)};
  CHECK(best_schemes(m, 8, 32, osf) == std::vector<scheme>{scheme::sfb, scheme::dense});
  static_assert(best_scheme(layer::fc(64, 64), 8, 1,
                            model_costs<linear_cost, linear_cost>{{0.0, 1.75}, {1000.0, 7.0}}) ==
                scheme::sfb);
}

TEST_CASE("per-model helpers: one scheme per layer, FC weights and dense biases") {
  // VGG-19's classifier at P = 8, K = 32: fc6 25088 -> 4096, fc7 4096 -> 4096, fc8 4096 ->
  // 1000 (M = outputs, N = inputs), each with a dense bias, plus a CONV layer.
  const std::array<layer, 7> model = {
      layer::dense(2359296), layer::fc(4096, 25088), layer::dense(4096), layer::fc(4096, 4096),
      layer::dense(4096),    layer::fc(1000, 4096),  layer::dense(1000)};
  // Poseidon: fc8: SFB 2*32*7*5096 = 2283008 <= 2*4096000*14/8 = 14336000 -> SFB too.
  const auto pos = poseidon_best_schemes(model, 8, 8, 32);
  const std::vector<scheme> want = {scheme::dense, scheme::sfb, scheme::dense, scheme::sfb,
                                    scheme::dense, scheme::sfb, scheme::dense};
  CHECK(pos == want);
  const auto mine = best_schemes(model, 8, 32, sfb_costs{algorithm_id::ring, flat(0, 1)});
  CHECK(mine == want);
  // At 16 nodes with K = 128: fc7: SFB 2*128*15*8192 = 31457280 <= 2*16777216*30/16 =
  // 62914560 -> SFB; fc8: SFB 2*128*15*5096 = 19568640 > 2*4096000*30/16 = 15360000 -> PS.
  const auto pos16 = poseidon_best_schemes(model, 16, 16, 128);
  CHECK(pos16[3] == scheme::sfb);
  CHECK(pos16[5] == scheme::dense);
  // The span form is constexpr.
  constexpr auto at_compile_time = [] {
    std::array<layer, 2> m = {layer::fc(4096, 4096), layer::dense(10)};
    std::array<scheme, 2> out{};
    poseidon_best_schemes(m, 8, 8, 32, out);
    return out;
  }();
  static_assert(at_compile_time[0] == scheme::sfb && at_compile_time[1] == scheme::dense);
  CHECK(scheme_name(at_compile_time[0]) == "sfb");
}

TEST_CASE("bad arguments of the deciders name the argument") {
  auto message = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const tcoll::invalid_argument& e) {
      return e.what();
    }
    return "nothing thrown";
  };
  CHECK(message([] { (void)poseidon_best_scheme(vgg_fc, 0, 8, 32); }).find("workers (P1) is 0") !=
        std::string::npos);
  CHECK(message([] { (void)poseidon_best_scheme(vgg_fc, 8, 0, 32); }).find("servers (P2) is 0") !=
        std::string::npos);
  CHECK(message([] { (void)poseidon_best_scheme(vgg_fc, 8, 8, 0); }).find("batch (K) is 0") !=
        std::string::npos);
  CHECK(message([] { (void)best_scheme(vgg_fc, 0, 8); }).find("ranks is 0") != std::string::npos);
  CHECK(message([] { (void)best_scheme(vgg_fc, 4, -1); }).find("batch (K) is -1") !=
        std::string::npos);
  CHECK(message([] { (void)best_scheme(layer::fc(0, 3), 4, 1); }).find("M >= 1 and N >= 1") !=
        std::string::npos);
  const std::array<layer, 2> two = {vgg_fc, vgg_fc};
  std::array<scheme, 1> one{};
  CHECK(message([&] { best_schemes(two, 4, 1, sfb_costs{}, one); }).find("out has 1 entries") !=
        std::string::npos);
}
