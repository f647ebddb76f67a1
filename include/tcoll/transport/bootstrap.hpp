#pragma once
/// \file
/// `bootstrap`: what a transport needs from the job that starts it to set itself up, and
/// nothing more: this process's rank, the team's size, and an allgather of short byte
/// strings (segment names, agreement flags, node identities). Two sources provide it:
///  - an MPI communicator (`mpi_bootstrap`, transport/bootstrap_mpi.hpp), and
///  - a key-value store that every process of the team reaches (`store_bootstrap` over any
///    type with `set(key, bytes)` and a blocking `get(key)`: PyTorch's `c10d::Store`, or
///    `file_store` below for C++ programs without MPI or PyTorch).
/// A transport built from a bootstrap keeps it for its later collective set-up calls
/// (`shm_transport::allocate`). Bootstrap calls are slow (milliseconds): never on a hot path.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <span>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "../core/error.hpp"

namespace tcoll {

/// The set-up channel of a team of processes (see the file comment). Collective calls are
/// made by every rank in the same order.
class bootstrap {
public:
  virtual ~bootstrap() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// Collective: every rank passes `mine` of the same length; returns every rank's, in
  /// rank order (size() * mine.size() bytes).
  virtual std::vector<std::uint8_t> allgather(std::span<const std::uint8_t> mine) = 0;
  /// Collective: how many ranks of the team (this one included) share memory with this
  /// one. By default: those with this rank's `node_identity()`.
  virtual int ranks_sharing_memory() {
    const std::vector<std::string> all = node_identities();
    return static_cast<int>(
        std::count(all.begin(), all.end(), all[static_cast<std::size_t>(rank())]));
  }

  /// Collective: every rank's `node_identity()`, in rank order (at most 319 bytes each).
  std::vector<std::string> node_identities() {
    std::string mine = node_identity();
    mine.resize(identity_bytes, '\0');
    const std::vector<std::uint8_t> all =
        allgather({reinterpret_cast<const std::uint8_t*>(mine.data()), identity_bytes});
    std::vector<std::string> ids(static_cast<std::size_t>(size()));
    for (std::size_t q = 0; q < ids.size(); ++q) {
      const char* at = reinterpret_cast<const char*>(all.data()) + q * identity_bytes;
      ids[q].assign(at, std::find(at, at + identity_bytes - 1, '\0'));
    }
    return ids;
  }

  /// What identifies this machine's memory: the host name and the kernel's boot id, so two
  /// containers or virtual machines that share a host name are still told apart, and the
  /// device of /dev/shm, where shared segments live: processes on one kernel with separate
  /// /dev/shm mounts (containers with host networking) cannot share a segment.
  static std::string node_identity() {
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    std::string boot;
    std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
    std::string id = std::string(host) + "/" + boot;
    struct stat shm {};
    if (stat("/dev/shm", &shm) == 0) id += "/shm" + std::to_string(shm.st_dev);
    return id;
  }

protected:
  static constexpr std::size_t identity_bytes = 320;
};

namespace detail::bootstrap {

/// The value rank `root` passed, on every rank (an allgather: bootstrap data is short).
inline std::vector<std::uint8_t> broadcast(tcoll::bootstrap& b, std::span<const std::uint8_t> mine,
                                           int root) {
  const std::vector<std::uint8_t> all = b.allgather(mine);
  const auto begin = all.begin() + static_cast<std::ptrdiff_t>(root * mine.size());
  return {begin, begin + static_cast<std::ptrdiff_t>(mine.size())};
}

/// True on every rank when `ok` is true on every rank.
inline bool all_of(tcoll::bootstrap& b, bool ok) {
  const std::uint8_t mine = ok ? 1 : 0;
  for (std::uint8_t v : b.allgather({&mine, 1}))
    if (!v) return false;
  return true;
}

inline void barrier(tcoll::bootstrap& b) {
  const std::uint8_t nothing = 0;
  (void)b.allgather({&nothing, 1});
}

} // namespace detail::bootstrap

namespace detail {
/// The bootstrap class built from a communicator handle `C`: none here; bootstrap_mpi.hpp
/// adds `MPI_Comm`. A trait rather than an `#ifdef`, so that every class constructible from
/// a communicator (`shm_transport`) has one definition whether or not a translation unit
/// sees MPI.
template <class C>
struct bootstrap_for {};
} // namespace detail

/// A key-value store every process of a team reaches: `set` publishes a value, `get` waits
/// for a key to appear (bounded by the store's own timeout, throwing when it passes).
/// PyTorch's `c10d::Store` satisfies it as it is.
template <class S>
concept key_value_store = requires(S& s, const std::string& key,
                                   const std::vector<std::uint8_t>& value) {
  s.set(key, value);
  { s.get(key) } -> std::convertible_to<std::vector<std::uint8_t>>;
};

/// A bootstrap over a key-value store: round k of the allgather publishes
/// `<prefix>/<k>/<rank>` and reads every other rank's key of round k. The store must
/// outlive the bootstrap; several teams may share a store under different prefixes.
template <key_value_store Store>
class store_bootstrap final : public bootstrap {
public:
  store_bootstrap(Store& store, int rank, int size, std::string prefix = "tcoll")
      : store_(store), rank_(rank), size_(size), prefix_(std::move(prefix)) {
    if (size < 1)
      throw invalid_argument("store_bootstrap: size " + std::to_string(size) + " < 1", rank);
    if (rank < 0 || rank >= size)
      throw invalid_argument("store_bootstrap: rank " + std::to_string(rank) +
                                 " is not in [0, size " + std::to_string(size) + ")",
                             rank);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::vector<std::uint8_t> allgather(std::span<const std::uint8_t> mine) override {
    const std::string round = prefix_ + "/" + std::to_string(round_++) + "/";
    store_.set(round + std::to_string(rank_), std::vector<std::uint8_t>(mine.begin(), mine.end()));
    std::vector<std::uint8_t> all;
    all.reserve(mine.size() * static_cast<std::size_t>(size_));
    for (int q = 0; q < size_; ++q) {
      if (q == rank_) {
        all.insert(all.end(), mine.begin(), mine.end());
        continue;
      }
      std::vector<std::uint8_t> theirs = store_.get(round + std::to_string(q));
      if (theirs.size() != mine.size())
        throw invalid_argument("store_bootstrap: rank " + std::to_string(q) + " passed " +
                                   std::to_string(theirs.size()) + " bytes to set-up round " +
                                   round + ", this rank " + std::to_string(mine.size()) +
                                   " (ranks disagree on the transport's set-up)",
                               rank_, q);
      all.insert(all.end(), theirs.begin(), theirs.end());
    }
    return all;
  }

private:
  Store& store_;
  int rank_, size_;
  std::string prefix_;
  std::uint64_t round_ = 0;
};

/// A key-value store in a directory every process can see (a local or shared file
/// system): `set` writes a file and renames it into place, `get` polls for it until
/// `timeout` passes, then throws `timeout_error`. For C++ programs that start their
/// processes themselves (fork, a job script) and have neither MPI nor PyTorch.
class file_store {
public:
  explicit file_store(std::filesystem::path directory,
                      std::chrono::milliseconds timeout = std::chrono::seconds(60))
      : directory_(std::move(directory)), timeout_(timeout) {
    std::error_code ec;
    std::filesystem::create_directories(directory_, ec);
    if (ec && !std::filesystem::is_directory(directory_))
      throw invalid_argument("file_store: cannot create directory " + directory_.string() + ": " +
                             ec.message());
  }
  void set(const std::string& key, const std::vector<std::uint8_t>& value) {
    const std::filesystem::path target = path_of(key);
    const std::filesystem::path temporary =
        target.string() + ".tmp." + std::to_string(getpid()) + "." +
        std::to_string(std::hash<std::thread::id>{}(std::this_thread::get_id()));
    {
      std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
      out.write(reinterpret_cast<const char*>(value.data()),
                static_cast<std::streamsize>(value.size()));
      if (!out) throw transport_error("file_store: cannot write " + temporary.string());
    }
    std::error_code ec;
    std::filesystem::rename(temporary, target, ec); // atomic: a reader sees all or nothing
    if (ec)
      throw transport_error("file_store: cannot publish " + target.string() + ": " + ec.message());
  }
  std::vector<std::uint8_t> get(const std::string& key) {
    const std::filesystem::path target = path_of(key);
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    for (auto pause = std::chrono::microseconds(50);;
         pause = std::min(pause * 2, std::chrono::microseconds(20000))) {
      std::ifstream in(target, std::ios::binary);
      if (in) return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
      if (std::chrono::steady_clock::now() > deadline)
        throw timeout_error("file_store: key '" + key + "' did not appear in " +
                            directory_.string() + " within " + std::to_string(timeout_.count()) +
                            " ms (a process of the team did not start or failed)");
      std::this_thread::sleep_for(pause);
    }
  }

private:
  std::filesystem::path path_of(const std::string& key) const {
    std::string name;
    for (char c : key) name += (c == '/' ? '.' : c); // one flat directory
    return directory_ / name;
  }
  std::filesystem::path directory_;
  std::chrono::milliseconds timeout_;
};

static_assert(key_value_store<file_store>);

} // namespace tcoll
