#pragma once
/// \file
/// The vocabulary of the cost formulas: what one rank sends, receives and reduces in one
/// collective (`rank_traffic`) and what a link charges for it (`link_params`, alpha-beta-
/// gamma, MG-WFBP Table I). Each algorithm states its own formula next to its steps (a
/// `static constexpr rank_traffic traffic(collective, bytes, ranks)` member of its object);
/// the planner prices them (plan/cost_model.hpp), and the counting transport checks them
/// against the real steps (tests/plan/test_cost_counts.cpp).
#include <cstdint>

namespace tcoll {

/// Point-to-point parameters of one link class (MG-WFBP Table I).
struct link_params {
  double alpha_us = 0.0;          ///< latency (startup time) of one message
  double beta_us_per_byte = 0.0;  ///< transfer time per byte
  double gamma_us_per_byte = 0.0; ///< time to reduce one byte of received data into a buffer
};

/// The traffic a flat algorithm's cost formula assumes on its busiest rank. A round in which
/// the rank sends and receives at once (full duplex) costs one alpha and its received bytes
/// once: `duplex_rounds` and `duplex_bytes` say how much of the traffic overlaps that way.
/// Sizes in bytes; exact when the ring's chunks (p | n) and the halving's ranges (p' | n)
/// divide evenly and every chunk is one segment.
struct rank_traffic {
  double messages_sent = 0, messages_received = 0;
  double bytes_sent = 0, bytes_received = 0;
  double bytes_reduced = 0; ///< received bytes combined into a buffer (the gamma term)
  double duplex_rounds = 0; ///< rounds that send and receive at once
  double duplex_bytes = 0;  ///< bytes received in those rounds

  /// alpha (messages - duplex rounds) + beta (bytes - duplex bytes) + gamma reduced.
  constexpr double us(link_params l) const noexcept {
    return (messages_sent + messages_received - duplex_rounds) * l.alpha_us +
           (bytes_sent + bytes_received - duplex_bytes) * l.beta_us_per_byte +
           bytes_reduced * l.gamma_us_per_byte;
  }
  /// The same traffic with sending and receiving swapped (a collective's mirror image:
  /// scatter of gather, say).
  constexpr rank_traffic mirrored() const noexcept {
    return {messages_received, messages_sent, bytes_received, bytes_sent,
            bytes_reduced,     duplex_rounds, duplex_bytes};
  }
  /// Field by field: the traffic of two phases one after the other.
  friend constexpr rank_traffic operator+(rank_traffic a, const rank_traffic& b) noexcept {
    a.messages_sent += b.messages_sent;
    a.messages_received += b.messages_received;
    a.bytes_sent += b.bytes_sent;
    a.bytes_received += b.bytes_received;
    a.bytes_reduced += b.bytes_reduced;
    a.duplex_rounds += b.duplex_rounds;
    a.duplex_bytes += b.duplex_bytes;
    return a;
  }
};

namespace detail {
/// floor(log2(n)) for n >= 1.
constexpr int floor_log2(std::uint64_t n) noexcept {
  int result = 0;
  while (n > 1) {
    n >>= 1;
    ++result;
  }
  return result;
}

/// ceil(log2(n)) for n >= 1: the number of rounds of a binomial tree over n ranks.
constexpr int ceil_log2(std::uint64_t n) noexcept {
  int result = floor_log2(n);
  if ((std::uint64_t{1} << result) < n) ++result;
  return result;
}

constexpr bool is_power_of_two(std::uint64_t n) noexcept {
  return n != 0 && (n & (n - 1)) == 0;
}
} // namespace detail

} // namespace tcoll
