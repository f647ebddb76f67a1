#pragma once
/// \file
/// `--scheme easgd`: elastic averaging SGD (MXNET-MPI Sec. 5, Fig. 8) with
/// `tcoll::elastic`. One job is cut into a server (the last rank, holding the center) and
/// `clients` groups of consecutive ranks. Inside a group: synchronous data-parallel SGD
/// (average allreduce of the gradients on the group's subgroup transport). Every
/// `interval` iterations, after backward and before the update (Fig. 8), the group's leader
/// pushes its parameters to the server (Eq. 2), applies Eq. 3 with the returned center and
/// broadcasts inside the group.
///
/// Data: the training samples are dealt once (fixed permutation of the seed) into one
/// partition per client; each epoch a client shuffles its own partition and walks it in
/// batches of `global_batch / clients` samples split over its ranks, so one epoch is one
/// pass of the whole job over the data and the per-rank batch equals that of synchronous
/// SGD over the same training ranks.
///
/// Reports: after each of its epochs a client evaluates its own parameters on the whole
/// test split (sharded over its ranks); its leader prints a line with the wall time since
/// the start. The server copies the center (with the wall time) each time the pushes it
/// served reach another job epoch's worth (clients x exchanges per client epoch), and at
/// the end; after serving it evaluates those copies (the center's accuracy over time) and
/// the final center, and gathers every client's records (point-to-point, with the
/// transport's timeout; a dropped client is skipped).
///
/// `--elastic-mode sync` runs the library's synchronous variant instead, for comparison:
/// no server, every rank trains, all ranks are cut into the client groups, and every
/// `interval` iterations the client leaders allreduce (average) their parameters as the
/// center and apply Eq. 3; the leader of client 0 gathers the records and writes the JSON.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <span>
#include <sstream>
#include <string>
#include <tcoll/elastic.hpp>
#include <tcoll/tcoll.hpp>
#include <vector>

#include "mlp.hpp"
#include "mnist.hpp"

namespace train {

/// What `--scheme easgd` needs from the command line.
struct easgd_config {
  int clients = 2;
  int interval = 64;
  double alpha = 0; ///< 0: the library's default, 0.9 / clients
  int epochs = 5;
  std::size_t global_batch = 64;
  sgd_config sgd{};
  std::uint64_t seed = 1;
  std::vector<std::size_t> widths;
  std::size_t eval_chunk = 500;
  std::string json_path;
  bool synchronous = false; ///< the library's synchronous variant (no server)
};

/// One client epoch as reported.
struct easgd_epoch {
  double epoch = 0, test_accuracy = 0, test_loss = 0, train_loss = 0, seconds = 0, exchanges = 0,
         bytes_in_client = 0;
  static constexpr std::size_t fields = 7;
};

namespace easgd_detail {
inline void shuffle(std::vector<std::size_t>& order, std::uint64_t seed) {
  detail::splitmix64 rng{seed};
  for (std::size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.next() % i]);
}
inline std::uint64_t hash(std::span<const float> p) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  const auto* b = reinterpret_cast<const unsigned char*>(p.data());
  for (std::size_t i = 0; i < p.size_bytes(); ++i) h = (h ^ b[i]) * 0x100000001b3ULL;
  return h;
}
/// Test loss sum and hits of `model` over test samples [begin, end).
inline batch_result evaluate(mlp& model, const dataset& test, std::size_t begin, std::size_t end,
                             std::size_t chunk) {
  batch_result out;
  for (std::size_t c = begin; c < end; c += chunk) {
    const std::size_t n = std::min(chunk, end - c);
    const auto r = model.evaluate(test.pixels.data() + c * mnist_pixels, test.labels.data() + c, n);
    out.loss_sum += r.loss_sum;
    out.correct += r.correct;
  }
  return out;
}
constexpr int records_tag = 900; ///< client leader -> server: the epoch records

/// Writes a run's JSON: the config (with `mode`), `server` (a JSON object's text, or empty
/// for none) and every client's epoch records (`easgd_epoch::fields` per epoch; empty for a
/// dropped client).
inline void write_json(const std::string& path, const easgd_config& c, const char* mode, int ranks,
                       double alpha, const std::string& server,
                       const std::vector<int>& client_sizes,
                       const std::vector<std::vector<double>>& records) {
  constexpr auto fields = easgd_epoch::fields;
  std::ofstream out(path);
  out.precision(9);
  out << "{\n  \"config\": {\"scheme\": \"easgd\", \"mode\": \"" << mode
      << "\", \"ranks\": " << ranks << ", \"clients\": " << c.clients
      << ", \"interval\": " << c.interval << ", \"alpha\": " << alpha
      << ", \"epochs\": " << c.epochs << ", \"global_batch\": " << c.global_batch
      << ", \"seed\": " << c.seed << ", \"learning_rate\": " << c.sgd.learning_rate << "},";
  if (!server.empty()) out << "\n  \"server\": " << server << ",";
  out << "\n  \"clients\": [";
  for (std::size_t k = 0; k < records.size(); ++k) {
    out << (k ? ",\n" : "\n") << "    {\"client\": " << k << ", \"ranks\": " << client_sizes[k]
        << ", \"epochs\": [";
    const auto& r = records[k];
    for (std::size_t e = 0; e * fields < r.size(); ++e) {
      const double* f = r.data() + e * fields;
      out << (e ? ", " : "") << "{\"epoch\": " << f[0] << ", \"test_accuracy\": " << f[1]
          << ", \"test_loss\": " << f[2] << ", \"train_loss\": " << f[3]
          << ", \"seconds\": " << f[4] << ", \"exchanges\": " << f[5]
          << ", \"bytes_in_client\": " << f[6] << "}";
    }
    out << "]}";
  }
  out << "\n  ]\n}\n";
}
} // namespace easgd_detail

/// Runs `--scheme easgd` on rank `t.rank()` of `t`; returns 0, or 3 when a client's
/// replicas differ. Rank t.size()-1 is the server.
template <class Transport>
int run_easgd(Transport& t, const easgd_config& c, const train_test_split& data,
              const std::vector<std::size_t>& subset) {
  using clock = std::chrono::steady_clock;
  namespace el = tcoll::elastic;
  const auto start = clock::now();
  el::options eo;
  eo.clients = c.clients;
  eo.interval = c.interval;
  if (c.alpha > 0) eo.alpha = c.alpha;
  eo.server_rank = t.size() - 1;
  if (c.synchronous) eo.variant = el::mode::synchronous;
  mlp model(mlp_config{c.widths, c.seed});
  const std::size_t count = model.parameters().size();
  const std::size_t test_size = data.test.size();
  const auto fields = easgd_epoch::fields;

  if (!c.synchronous && t.rank() == eo.server_rank) {
    el::server<Transport> server(t, std::span<const float>(model.parameters()), eo);
    // a job epoch's worth of pushes: every client's exchanges in one of its epochs (the
    // clients' partitions and batches as below). A client pushes at its iterations 0,
    // interval, 2 interval...: after p pushes in all, the center has seen about
    // (p / clients - 1) * interval iterations of each client.
    const double client_steps =
        std::ceil(double(subset.size()) / double(c.clients) /
                  double(std::max<std::size_t>(1, c.global_batch / std::size_t(c.clients))));
    const double pushes_per_epoch =
        std::max(1e-9, double(c.clients) * client_steps / double(c.interval));
    auto trained_epochs = [&](std::uint64_t pushes) {
      return std::max(0.0, double(pushes) / double(c.clients) - 1) * double(c.interval) /
             std::max(1.0, client_steps);
    };
    struct snapshot {
      std::uint64_t pushes = 0;
      double seconds = 0;
      std::vector<float> center;
    };
    std::vector<snapshot> snapshots;
    const auto report = server.serve([&](int, std::uint64_t pushes, std::span<const float> center) {
      if (double(pushes) < pushes_per_epoch * double(snapshots.size() + 1)) return;
      snapshots.push_back({pushes, std::chrono::duration<double>(clock::now() - start).count(),
                           std::vector<float>(center.begin(), center.end())});
    });
    if (snapshots.empty() || snapshots.back().pushes != report.pushes)
      snapshots.push_back({report.pushes,
                           std::chrono::duration<double>(clock::now() - start).count(),
                           std::vector<float>(server.center().begin(), server.center().end())});
    std::ostringstream curve;
    curve.precision(9);
    double center_accuracy = 0;
    for (std::size_t k = 0; k < snapshots.size(); ++k) {
      const auto& snap = snapshots[k];
      std::copy(snap.center.begin(), snap.center.end(), model.parameters().begin());
      const auto e = easgd_detail::evaluate(model, data.test, 0, test_size, c.eval_chunk);
      center_accuracy = test_size ? double(e.correct) / double(test_size) : 0;
      const double loss = test_size ? e.loss_sum / double(test_size) : 0;
      curve << (k ? ", " : "") << "{\"pushes\": " << snap.pushes
            << ", \"epochs\": " << trained_epochs(snap.pushes) << ", \"seconds\": " << snap.seconds
            << ", \"test_accuracy\": " << center_accuracy << ", \"test_loss\": " << loss << "}";
      std::printf("easgd server: center after %llu pushes (%.2f epochs of training) at %.2f s: "
                  "test_accuracy %.2f%%\n",
                  static_cast<unsigned long long>(snap.pushes), trained_epochs(snap.pushes),
                  snap.seconds, 100 * center_accuracy);
    }
    std::printf("easgd server: %llu pushes served in %.2f s; center test_accuracy %.2f%%; "
                "dropped clients: %zu\n",
                static_cast<unsigned long long>(report.pushes), report.seconds,
                100 * center_accuracy, report.dropped().size());
    // gather the clients' records
    std::vector<std::vector<double>> records(static_cast<std::size_t>(c.clients));
    for (int k = 0; k < c.clients; ++k) {
      if (report.clients[static_cast<std::size_t>(k)].dropped) continue;
      auto& r = records[static_cast<std::size_t>(k)];
      r.resize(fields * static_cast<std::size_t>(c.epochs));
      auto req = t.irecv(report.clients[static_cast<std::size_t>(k)].leader, r.data(),
                         r.size() * sizeof(double), easgd_detail::records_tag);
      t.wait(req, tcoll::clock::now() + t.timeout());
    }
    if (!c.json_path.empty()) {
      std::ostringstream server_json;
      server_json.precision(9);
      server_json << "{\"pushes\": " << report.pushes << ", \"seconds\": " << report.seconds
                  << ", \"center_test_accuracy\": " << center_accuracy << ", \"center_curve\": ["
                  << curve.str() << "]}";
      easgd_detail::write_json(c.json_path, c, "async", t.size(), el::alpha_of(eo),
                               server_json.str(), server.layout().client_sizes, records);
    }
    return 0;
  }

  el::client<Transport> client(t, count, eo);
  auto& group = client.group();
  tcoll::counting<tcoll::subgroup<Transport>> counted(group);
  sgd_momentum optimiser(count, c.sgd);
  const int me = group.rank(), size = group.size(), id = client.id();
  // this client's partition of the training samples
  std::vector<std::size_t> dealt = subset;
  easgd_detail::shuffle(dealt, c.seed * 0x9e3779b97f4a7c15ULL + 17);
  const std::size_t S = dealt.size(), C = static_cast<std::size_t>(c.clients);
  std::vector<std::size_t> part(dealt.begin() + static_cast<std::ptrdiff_t>(S * id / C),
                                dealt.begin() + static_cast<std::ptrdiff_t>(S * (id + 1) / C));
  const std::size_t batch = std::max<std::size_t>(1, c.global_batch / C);
  const std::size_t steps = (part.size() + batch - 1) / batch;
  std::vector<float> pixels;
  std::vector<std::uint8_t> labels;
  std::vector<double> records;
  int code = 0;
  for (int epoch = 1; epoch <= c.epochs; ++epoch) {
    counted.reset();
    easgd_detail::shuffle(part, c.seed + static_cast<std::uint64_t>(epoch) +
                                    7919ULL * static_cast<std::uint64_t>(id + 1));
    double loss = 0;
    for (std::size_t step = 0; step < steps; ++step) {
      const std::size_t begin = step * batch, n = std::min(batch, part.size() - begin);
      const std::size_t lo = begin + n * me / size, hi = begin + n * (me + 1) / size;
      pixels.clear();
      labels.clear();
      for (std::size_t k = lo; k < hi; ++k) {
        const float* image = data.train.pixels.data() + part[k] * mnist_pixels;
        pixels.insert(pixels.end(), image, image + mnist_pixels);
        labels.push_back(data.train.labels[part[k]]);
      }
      const float scale = static_cast<float>(size) / static_cast<float>(n);
      loss += model.forward_backward(pixels.data(), labels.data(), labels.size(), scale).loss_sum;
      tcoll::allreduce(counted, model.gradients(), tcoll::avg_op{}, tcoll::automatic{});
      client.step(model.parameters()); // Fig. 8: elastic step before the SGD update
      optimiser.step(model.parameters(), model.gradients());
    }
    const std::size_t tb = test_size * me / size, te = test_size * (me + 1) / size;
    const auto test = easgd_detail::evaluate(model, data.test, tb, te, c.eval_chunk);
    std::vector<double> stats{loss, test.loss_sum, double(test.correct),
                              double(counted.counts().bytes_sent)};
    tcoll::allreduce(group, std::span<double>(stats), tcoll::sum_op{}, tcoll::automatic{});
    std::uint64_t hmin = easgd_detail::hash(model.parameters()), hmax = hmin;
    tcoll::allreduce(group, std::span<std::uint64_t>(&hmin, 1), tcoll::min_op{},
                     tcoll::automatic{});
    tcoll::allreduce(group, std::span<std::uint64_t>(&hmax, 1), tcoll::max_op{},
                     tcoll::automatic{});
    if (hmin != hmax) code = 3;
    const easgd_epoch rec{double(epoch),
                          test_size ? stats[2] / double(test_size) : 0,
                          test_size ? stats[1] / double(test_size) : 0,
                          part.empty() ? 0 : stats[0] / double(part.size()),
                          std::chrono::duration<double>(clock::now() - start).count(),
                          double(client.exchanges()),
                          stats[3] / size};
    records.insert(records.end(), {rec.epoch, rec.test_accuracy, rec.test_loss, rec.train_loss,
                                   rec.seconds, rec.exchanges, rec.bytes_in_client});
    if (client.leader()) {
      std::printf("client %d epoch %d  train_loss %.4f  test_loss %.4f  test_accuracy %.2f%%  "
                  "exchanges %llu  at %.2f s%s\n",
                  id, epoch, rec.train_loss, rec.test_loss, 100 * rec.test_accuracy,
                  static_cast<unsigned long long>(client.exchanges()), rec.seconds,
                  hmin == hmax ? "" : "  REPLICAS DIFFER");
      std::fflush(stdout);
    }
  }
  client.finish();
  if (c.synchronous) { // client 0's leader gathers the records and writes the JSON
    const auto& layout = client.layout();
    if (client.leader() && id != 0) {
      auto req = t.isend(layout.leaders[0], records.data(), records.size() * sizeof(double),
                         easgd_detail::records_tag);
      t.wait(req, tcoll::clock::now() + t.timeout());
    }
    if (client.leader() && id == 0) {
      std::vector<std::vector<double>> all(static_cast<std::size_t>(c.clients), records);
      for (int k = 1; k < c.clients; ++k) {
        auto& r = all[static_cast<std::size_t>(k)];
        auto req = t.irecv(layout.leaders[static_cast<std::size_t>(k)], r.data(),
                           r.size() * sizeof(double), easgd_detail::records_tag);
        t.wait(req, tcoll::clock::now() + t.timeout());
      }
      if (!c.json_path.empty())
        easgd_detail::write_json(c.json_path, c, "sync", t.size(), el::alpha_of(eo), {},
                                 layout.client_sizes, all);
    }
    return code;
  }
  if (client.leader()) {
    auto req = t.isend(eo.server_rank, records.data(), records.size() * sizeof(double),
                       easgd_detail::records_tag);
    t.wait(req, tcoll::clock::now() + t.timeout());
  }
  return code;
}

} // namespace train
