// The device-side scheduling pass of the BALANCED schedule: it reads the
// run's lengths on the device and writes the work partition there, so that
// a captured graph stays right when the lengths change between replays.
#ifndef FMHA_SPLITK_BACKENDS_GPU_SCHEDULE_DEVICE_CUH_
#define FMHA_SPLITK_BACKENDS_GPU_SCHEDULE_DEVICE_CUH_

#include <cstddef>
#include <cstdint>

#include "backends/gpu/kernels/forward_params.cuh"
#include "backends/gpu/vendor.h"
#include "core/backend_api.h"

namespace fmha::gpu {

// Scheduling metadata in the workspace at plan.ws_meta_offset: a
// ScheduleMeta header, the pieces, then range_first[num_ranges + 1].
struct ScheduleLayout {
  size_t pieces_offset;
  size_t range_first_offset;
  size_t bytes;
};

constexpr ScheduleLayout schedule_layout(int64_t max_pieces, int64_t num_ranges) {
  static_assert(sizeof(ScheduleMeta) % alignof(Piece) == 0, "pieces follow the header");
  return ScheduleLayout{sizeof(ScheduleMeta), sizeof(ScheduleMeta) + sizeof(Piece) * static_cast<size_t>(max_pieces),
                        sizeof(ScheduleMeta) + sizeof(Piece) * static_cast<size_t>(max_pieces) +
                            sizeof(int32_t) * static_cast<size_t>(num_ranges + 1)};
}

// Launches one CTA that writes fmha::core::partition()'s BALANCED pieces
// (same pieces, same slots, same order) for at most `num_ranges` ranges of
// at least `min_piece_keys` keys, the piece and range counts, and for each
// range its first piece (a piece belongs to the range holding its first
// key; an empty sequence's piece to the range at its position).
fmha_status launch_balanced_schedule(const SeqLayout &seq, int32_t num_ranges, int32_t min_piece_keys,
                                     ScheduleMeta *meta, Piece *pieces, int32_t *range_first, Stream stream,
                                     fmha_msg msg);

}  // namespace fmha::gpu

#endif  // FMHA_SPLITK_BACKENDS_GPU_SCHEDULE_DEVICE_CUH_
