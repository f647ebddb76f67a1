#pragma once
/// \file
/// The tcoll error hierarchy. Every message names the argument, the rank and,
/// where one is involved, the peer, so a failure on rank 5 of 64 can be read off the log.
#include <stdexcept>
#include <string>

namespace tcoll {

/// Base of every exception tcoll throws.
class error : public std::runtime_error {
public:
  explicit error(const std::string& what, int rank = -1, int peer = -1)
      : std::runtime_error(decorate(what, rank, peer)), rank_(rank), peer_(peer), message_(what) {}
  /// Rank that detected the error (-1 if not known).
  int rank() const noexcept { return rank_; }
  /// Peer involved in the failing operation (-1 if none).
  int peer() const noexcept { return peer_; }
  /// The message without the "tcoll [rank r] [peer p]: " prefix that `what()` adds.
  const std::string& message() const noexcept { return message_; }

private:
  static std::string decorate(const std::string& what, int rank, int peer) {
    std::string s = "tcoll";
    if (rank >= 0) s += " [rank " + std::to_string(rank) + "]";
    if (peer >= 0) s += " [peer " + std::to_string(peer) + "]";
    return s + ": " + what;
  }
  int rank_;
  int peer_;
  std::string message_;
};

/// An argument failed validation (null pointer, overlap, overflow, bad root, ...).
class invalid_argument : public error {
public:
  using error::error;
};

/// A blocking wait exceeded its configured timeout.
class timeout_error : public error {
public:
  using error::error;
};

/// The underlying transport (MPI, NCCL, CUDA) reported a failure.
class transport_error : public error {
public:
  using error::error;
};

/// The operation was aborted because another rank failed.
class aborted_error : public error {
public:
  using error::error;
};

/// The symbolic check found an element that received a contribution twice.
class duplicate_contribution : public error {
public:
  using error::error;
};

namespace detail {

/// Throws an error of the same class as `e` (one of the classes above) with message `what`,
/// `rank` and `peer`: a layer that re-words a lower layer's error keeps what callers catch.
[[noreturn]] inline void throw_like(const error& e, const std::string& what, int rank, int peer) {
  if (dynamic_cast<const timeout_error*>(&e)) throw timeout_error(what, rank, peer);
  if (dynamic_cast<const aborted_error*>(&e)) throw aborted_error(what, rank, peer);
  if (dynamic_cast<const transport_error*>(&e)) throw transport_error(what, rank, peer);
  if (dynamic_cast<const invalid_argument*>(&e)) throw invalid_argument(what, rank, peer);
  if (dynamic_cast<const duplicate_contribution*>(&e))
    throw duplicate_contribution(what, rank, peer);
  throw error(what, rank, peer);
}

} // namespace detail

} // namespace tcoll
