#include "reference/positions_plan.h"

#include <cstring>

#include "freezeframe/base/error.h"

namespace freezeframe::reference {

std::size_t positions_plan_bytes(const BatchLimits& limits) {
  return sizeof(std::int32_t) * static_cast<std::size_t>(limits.max_num_reqs);
}

void write_positions_plan(const CommonAttentionMetadata& common, std::span<std::byte> slice) {
  const std::size_t num_reqs = common.seq_lens.size();
  FF_CHECK(num_reqs * sizeof(std::int32_t) <= slice.size(), ErrorCode::kInternal,
           "the positions plan of ", num_reqs, " requests does not fit its slice of ", slice.size(),
           " bytes");
  const bool sharded = !common.dcp_context_lens.empty();
  FF_CHECK(!sharded || common.dcp_context_lens.size() >= num_reqs, ErrorCode::kInternal,
           "the step's DCP context lengths cover ", common.dcp_context_lens.size(), " of its ",
           num_reqs, " requests");
  for (std::size_t r = 0; r < num_reqs; ++r) {
    const std::int32_t position =
        sharded ? common.dcp_context_lens[r]
                : common.seq_lens[r] - (common.query_start_loc[r + 1] - common.query_start_loc[r]);
    std::memcpy(slice.data() + r * sizeof position, &position, sizeof position);
  }
}

}  // namespace freezeframe::reference
