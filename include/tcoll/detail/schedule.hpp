#pragma once
/// \file
/// The step vocabulary algorithms describe themselves in. An algorithm is a function
/// `describe(sink, layout)` that calls `sink.round_begin()`, step calls, `sink.round_end()`.
/// The executor (detail/executor.hpp) runs the steps on a transport and a reducer as they
/// are described; `step_recorder` stores them, so tests can count messages and bytes and
/// run the schedule symbolically without any transport.
///
/// Round semantics: all transfers of a round are posted together and have completed when
/// the round ends; local steps (copy, reduce_local, finalize) run after the transfers of
/// their round, in the order described.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace tcoll::detail {

/// The three buffers a step may touch. `input` is never written.
enum class buffer_id : std::uint8_t { input, output, scratch };

/// `count` elements starting at element `offset` of buffer `buf`.
struct region {
  buffer_id buf = buffer_id::output;
  std::size_t offset = 0;
  std::size_t count = 0;
  friend constexpr bool operator==(const region&, const region&) = default;
};

enum class step_kind : std::uint8_t {
  send,         ///< send `src` to `peer`
  recv,         ///< receive from `peer` into `dst`
  recv_reduce,  ///< dst = op(src, incoming), or op(incoming, src) if `remote_first`
  copy,         ///< dst = src (local)
  reduce_local, ///< dst = op(src, src2) (local)
  finalize,     ///< dst = finalize(dst) (avg: divide by the rank count)
};

/// One step of one rank.
struct step {
  step_kind kind{};
  int peer = -1;
  region dst{};
  region src{};
  region src2{};
  bool remote_first = false;
};

/// What an algorithm needs to know to describe its steps.
struct layout {
  int rank = 0;
  int size = 1;
  std::size_t count = 0;      ///< elements per rank (allreduce), or per block (collectives)
  std::size_t elem_bytes = 1; ///< sizeof(T), for byte-valued tuning knobs
  int root = 0;               ///< for rooted collectives
  bool in_place = false;      ///< input and output are the same memory
  /// Blocks of their own sizes (reduce_scatterv, allgatherv): block q of a P-block buffer
  /// has `block_counts[q]` elements at element `block_displs[q]`. Null: every block has
  /// `count` elements at q * count.
  const std::size_t* block_counts = nullptr;
  const std::size_t* block_displs = nullptr;

  /// Block q of the P-block buffer `b`.
  constexpr region block(buffer_id b, int q) const {
    const auto i = static_cast<std::size_t>(q);
    if (block_counts) return {b, block_displs[i], block_counts[i]};
    return {b, i * count, count};
  }
  /// The elements of block q.
  constexpr std::size_t block_count(int q) const {
    return block_counts ? block_counts[static_cast<std::size_t>(q)] : count;
  }
};

/// The common part of every sink: step constructors in terms of `add(step)`.
template <class Derived>
struct sink_base {
  void send(int peer, region src) {
    if (src.count) self().add({step_kind::send, peer, {}, src, {}, false});
  }
  void recv(int peer, region dst) {
    if (dst.count) self().add({step_kind::recv, peer, dst, {}, {}, false});
  }
  void recv_reduce(int peer, region dst, region local, bool remote_first) {
    if (dst.count) self().add({step_kind::recv_reduce, peer, dst, local, {}, remote_first});
  }
  void copy(region dst, region src) {
    if (dst.count && !(dst == src)) self().add({step_kind::copy, -1, dst, src, {}, false});
  }
  void reduce_local(region dst, region a, region b) {
    if (dst.count) self().add({step_kind::reduce_local, -1, dst, a, b, false});
  }
  void finalize(region dst) {
    if (dst.count) self().add({step_kind::finalize, -1, dst, {}, {}, false});
  }

private:
  Derived& self() { return static_cast<Derived&>(*this); }
};

/// Records the steps of one rank, round by round.
struct step_recorder : sink_base<step_recorder> {
  std::vector<std::vector<step>> rounds;
  std::size_t scratch_count = 0;
  std::size_t staging_count = 0;

  void reserve(std::size_t scratch, std::size_t staging) {
    scratch_count = scratch;
    staging_count = staging;
  }
  void round_begin() { rounds.emplace_back(); }
  void round_end() {
    if (!rounds.empty() && rounds.back().empty()) rounds.pop_back();
  }
  void add(const step& s) { rounds.back().push_back(s); }
};

/// The whole allreduce when there is nothing to exchange (one rank, or no elements):
/// output = finalize(input).
template <class Sink>
void local_allreduce(Sink& s, std::size_t n) {
  s.reserve(0, 0);
  s.round_begin();
  s.copy({buffer_id::output, 0, n}, {buffer_id::input, 0, n});
  s.finalize({buffer_id::output, 0, n});
  s.round_end();
}

/// Elements of chunk `c` when `n` elements are split into `parts` nearly equal chunks
/// (the first n % parts chunks are one larger).
constexpr std::size_t chunk_begin(std::size_t n, int parts, int c) {
  const std::size_t base = n / parts, extra = n % parts, cc = static_cast<std::size_t>(c);
  return cc * base + (cc < extra ? cc : extra);
}
constexpr std::size_t chunk_size(std::size_t n, int parts, int c) {
  return chunk_begin(n, parts, c + 1) - chunk_begin(n, parts, c);
}

/// Largest power of two <= n (n >= 1).
constexpr int floor_pow2(int n) {
  int p = 1;
  while (p * 2 <= n) p *= 2;
  return p;
}

/// ((a % n) + n) % n
constexpr int mod(int a, int n) {
  return ((a % n) + n) % n;
}

} // namespace tcoll::detail
