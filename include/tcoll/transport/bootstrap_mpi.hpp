#pragma once
/// \file
/// `mpi_bootstrap`: the `bootstrap` of the processes of an MPI communicator.
#include <mpi.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "../core/error.hpp"
#include "../detail/mpi_error.hpp"
#include "bootstrap.hpp"

namespace tcoll {

/// A bootstrap over a private duplicate of `comm` (collective to construct: every rank of
/// `comm`). Memory is shared with the ranks `MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)`
/// puts with this one. The duplicate is freed on destruction unless MPI is finalized.
class mpi_bootstrap final : public bootstrap {
public:
  explicit mpi_bootstrap(MPI_Comm comm) {
    int world_rank = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    check(MPI_Comm_rank(comm, &rank_), "MPI_Comm_rank", world_rank);
    check(MPI_Comm_size(comm, &size_), "MPI_Comm_size", world_rank);
    check(MPI_Comm_dup(comm, &comm_), "MPI_Comm_dup", rank_);
  }
  mpi_bootstrap(const mpi_bootstrap&) = delete;
  mpi_bootstrap& operator=(const mpi_bootstrap&) = delete;
  ~mpi_bootstrap() override {
    int finalized = 1;
    MPI_Finalized(&finalized);
    if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::vector<std::uint8_t> allgather(std::span<const std::uint8_t> mine) override {
    std::vector<std::uint8_t> all(mine.size() * static_cast<std::size_t>(size_));
    check(MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_BYTE, all.data(),
                        static_cast<int>(mine.size()), MPI_BYTE, comm_),
          "MPI_Allgather", rank_);
    return all;
  }
  int ranks_sharing_memory() override {
    MPI_Comm node = MPI_COMM_NULL;
    check(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node),
          "MPI_Comm_split_type", rank_);
    int node_size = 0;
    MPI_Comm_size(node, &node_size);
    MPI_Comm_free(&node);
    return node_size;
  }

private:
  static void check(int code, const char* what, int rank) {
    detail::mpi::check(code, std::string("mpi_bootstrap: ") + what, rank);
  }
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
};

namespace detail {
template <>
struct bootstrap_for<MPI_Comm> {
  using type = mpi_bootstrap;
};
} // namespace detail

} // namespace tcoll
