#pragma once
/// \file
/// Which message tags belong to whom, on every transport: the one map of tcoll's tag space.
/// Headers that use a range take it from here.
///
/// - 0 .. 1023: the user's own point-to-point messages (`isend`/`irecv` on a transport),
///   the elastic adaptor's pushes among them (`elastic_push` and the next one by default).
/// - 0 on `mpi_transport`'s control communicator: its failure announcements (nothing else
///   travels there).
/// - 1024 .. 17407: the collectives' message spaces (`collective_context`:
///   `first_tag + sequence % count`).
/// - 7001: every collective on a user transport without a `collective_context`.
/// - `intra_offset` + the above: the same on the intra-group view of a transport cut into
///   groups (`subgroup`); `inter_offset` + the above: on the inter-group view.
/// - `composed_offset` + 1024 onwards: a `composed` transport's own collectives.
/// - `user_high_first` onwards: user tags of 1024 and above, for integrations whose host
///   allows any tag (the PyTorch backend maps tag t >= 1024 to user_high_first + t - 1024
///   between nodes).
/// - Negative tags: never used by tcoll. The PyTorch backend maps tag t >= 1024 to
///   INT_MIN + t - 1024 on shared memory, so every non-negative int has a place there.
///
/// MPI guarantees tags up to 32767 only (`MPI_TAG_UB`); `mpi_transport` shrinks its
/// collectives' range to fit. The offsets of the group views need MPI_TAG_UB of at least
/// 3 * 65536 + 17407 (Open MPI 4.1 gives 2147483647).
namespace tcoll::tags {

/// `mpi_transport`'s failure announcements.
inline constexpr int announce = 0;
/// Default tag of the elastic adaptor's pushes (replies use the next one).
inline constexpr int elastic_push = 700;
/// The first tag of collectives' message spaces; the user owns the tags below it.
inline constexpr int collectives_first = 1024;
/// How many message spaces a transport cycles through.
inline constexpr int collectives_count = 1 << 14;
/// Tag of every collective on a transport without a `collective_context`.
inline constexpr int single_collective = 7001;
/// Offsets that keep the two levels of a transport cut into groups apart from each other
/// and from the parent's own messages.
inline constexpr int intra_offset = 1 << 16;
inline constexpr int inter_offset = 2 << 16;
/// Offset of a `composed` transport's own collectives (above both levels' spaces).
inline constexpr int composed_offset = 3 << 16;

/// Where user tags of 1024 and above go (above every range of the collectives).
inline constexpr int user_high_first = 4 << 16;

static_assert(collectives_first + collectives_count <= intra_offset,
              "the collectives' range must stay below the first group offset");
static_assert(elastic_push + 1 < collectives_first, "elastic pushes are user tags");
static_assert(composed_offset + collectives_first + collectives_count <= user_high_first,
              "high user tags must stay above the composed transport's collectives");

} // namespace tcoll::tags
