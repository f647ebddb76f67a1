#pragma once
/// \file
/// Agreement across ranks, written once for the overlap scheduler and every adaptor: a
/// fingerprint of what every rank must share (a plan, a pool's shape, options), the small
/// sum-allreduce that exchanges such words, and the check that names the first rank whose
/// fingerprint differs from rank 0's.
#include <bit>
#include <concepts>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "../collectives.hpp"
#include "../communicator.hpp"
#include "../core/error.hpp"

namespace tcoll::detail {

/// FNV-1a over 64-bit words (each fed byte by byte, low byte first): the same value on
/// every rank for the same words, whatever the host.
class fingerprint {
public:
  /// Adds an integer word.
  fingerprint& add(std::uint64_t v) noexcept {
    for (int i = 0; i < 8; ++i) h_ = (h_ ^ ((v >> (8 * i)) & 0xff)) * prime;
    return *this;
  }
  /// Adds the bit pattern of a float or double (1.0 and 1.0 + ulp differ).
  template <std::floating_point F>
  requires(sizeof(F) == 4 || sizeof(F) == 8) fingerprint& add_bits(F x) noexcept {
    if constexpr (sizeof(F) == 4)
      return add(std::bit_cast<std::uint32_t>(x));
    else
      return add(std::bit_cast<std::uint64_t>(x));
  }
  std::uint64_t value() const noexcept { return h_; }

private:
  static constexpr std::uint64_t offset = 1469598103934665603ull;
  static constexpr std::uint64_t prime = 1099511628211ull;
  std::uint64_t h_ = offset;
};

/// Blocking sum-allreduce of a few uint64 on communicator `comm` (its default algorithm)
/// through reducer `red`, for plan checks and plan broadcasts: the values go through the
/// reducer's memory, so device-only transports work too.
template <communicator Comm, class R>
void sum_over_ranks(Comm& comm, R& red, std::vector<std::uint64_t>& v) {
  if (v.empty()) return;
  auto buf = red.template allocate<std::uint64_t>(v.size());
  if constexpr (host_device_copies<R>) // a device reducer's copy may not read host memory
    red.copy_from_host(buf.data(), v.data(), v.size());
  else
    red.copy(buf.data(), v.data(), v.size());
  red.synchronize();
  tcoll::allreduce(comm, buf.data(), buf.data(), v.size(), sum_op{}, default_algorithm_t<Comm>{},
                   red);
  if constexpr (host_device_copies<R>)
    red.copy_to_host(v.data(), static_cast<const std::uint64_t*>(buf.data()), v.size());
  else
    red.copy(v.data(), buf.data(), v.size());
  red.synchronize();
}

/// Collective: throws `invalid_argument` on every rank when some rank's fingerprint `mine`
/// differs from rank 0's, naming the first such rank: "<who>: rank q <differs> than rank 0
/// (hash a vs b); every rank must <rule>". `sum(words)` is the exchange, a sum over ranks
/// in place (`sum_over_ranks`, or an adaptor's own copy policy around it).
template <communicator Comm, class Sum>
void check_same_everywhere(Comm& comm, std::uint64_t mine, Sum&& sum, const char* who,
                           const char* differs, const char* rule) {
  const int P = comm.size(), r = comm.rank();
  std::vector<std::uint64_t> all(static_cast<std::size_t>(P), 0);
  all[static_cast<std::size_t>(r)] = mine;
  sum(all);
  for (int q = 1; q < P; ++q)
    if (all[static_cast<std::size_t>(q)] != all[0])
      throw invalid_argument(std::string(who) + ": rank " + std::to_string(q) + " " + differs +
                                 " than rank 0 (hash " +
                                 std::to_string(all[static_cast<std::size_t>(q)]) + " vs " +
                                 std::to_string(all[0]) + "); every rank must " + rule,
                             r, q);
}

} // namespace tcoll::detail
