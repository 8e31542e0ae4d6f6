#include "freezeframe/engine/runtime/step_batch.h"

#include "freezeframe/backends/dcp_shard.h"

#include <algorithm>
#include <cfloat>
#include <cstdint>
#include <string>

#include "freezeframe/base/error.h"
#include "freezeframe/core/block_size.h"

namespace freezeframe {
namespace {

using E = ErrorCode;

/// Cache slot of position `pos` of request `r`.
std::int64_t slot_of(const StepRequest& r, std::int32_t pos, const BlockSize& block_size) {
  return std::int64_t(r.block_ids[block_size.block_of(pos)]) * block_size.size() +
         block_size.offset_in_block(pos);
}

}  // namespace

StepShape validate_step(const StepBatch& batch, const DeploymentLimits& limits,
                        bool check_block_ids) {
  return validate_step(batch, limits, DcpSharding{1, 1, limits.block_size}, check_block_ids);
}

StepShape validate_step(const StepBatch& batch, const DeploymentLimits& limits,
                        const DcpSharding& dcp, bool check_block_ids) {
  FF_CHECK(dcp.world_size >= 1 && dcp.interleave_size >= 1 && dcp.block_size == limits.block_size &&
               dcp.block_size % dcp.interleave_size == 0,
           E::kInvalidArgument, "DCP layout of ", dcp.world_size, " ranks, interleave ",
           dcp.interleave_size, ", blocks of ", dcp.block_size, " does not fit cache.block_size ",
           limits.block_size);
  FF_CHECK(dcp.world_size == 1 || batch.slot_mapping.empty(), E::kInvalidArgument,
           "a step under decode context parallelism (", dcp.world_size,
           " ranks) cannot give a slot mapping: each rank derives its own");
  const int num_reqs = static_cast<int>(batch.requests.size());
  FF_CHECK(num_reqs >= 1 && num_reqs <= limits.max_num_seqs, E::kInvalidArgument, "a step has ",
           num_reqs, " requests; it needs 1 to max_num_seqs = ", limits.max_num_seqs);
  const BlockSize block_size(limits.block_size);
  const std::int64_t virtual_block = dcp.virtual_block_size();
  StepShape shape;
  shape.num_reqs = num_reqs;
  bool decodes_over = false;
  for (int i = 0; i < num_reqs; ++i) {
    const StepRequest& r = batch.requests[i];
    FF_CHECK(r.query_len >= 1 && r.query_len <= r.seq_len, E::kInvalidArgument, "request ", i,
             ": query_len ", r.query_len, " must be in [1, seq_len = ", r.seq_len, "]");
    FF_CHECK(r.seq_len <= limits.max_model_len, E::kInvalidArgument, "request ", i, ": seq_len ",
             r.seq_len, " exceeds max_model_len ", limits.max_model_len);
    if (r.query_len == 1) {
      FF_CHECK(!decodes_over, E::kInvalidArgument, "request ", i,
               " is a single-token decode after a prefill; decodes come first");
      ++shape.num_decodes;
    } else {
      decodes_over = true;
    }
    const int needed = static_cast<int>((r.seq_len + virtual_block - 1) / virtual_block);
    FF_CHECK(static_cast<std::int64_t>(r.block_ids.size()) >= needed, E::kInvalidArgument,
             "request ", i, ": seq_len ", r.seq_len, " needs ", needed, " blocks of ",
             virtual_block, dcp.world_size > 1 ? " (virtual blocks of the DCP ranks)" : "",
             ", its block table has ", r.block_ids.size());
    // One branch-free (vectorisable) pass over the ids, as this runs every step; the message
    // needs a second.
    int outside = 0;
    const std::int32_t* ids = r.block_ids.data();
    for (int b = 0; check_block_ids && b < needed; ++b) {
      outside |= (ids[b] < 0) | (ids[b] >= limits.num_blocks);
    }
    const bool inside = outside == 0;
    for (int b = 0; !inside && b < needed; ++b) {
      FF_CHECK(r.block_ids[b] >= 0 && r.block_ids[b] < limits.num_blocks, E::kInvalidArgument,
               "request ", i, ": block_ids[", b, "] = ", r.block_ids[b],
               " is outside the KV cache's ", limits.num_blocks, " blocks");
    }
    shape.num_tokens += r.query_len;
    FF_CHECK(shape.num_tokens <= limits.max_num_batched_tokens, E::kInvalidArgument,
             "the step's new tokens exceed max_num_batched_tokens = ",
             limits.max_num_batched_tokens, " at request ", i);
  }
  if (!batch.slot_mapping.empty()) {
    FF_CHECK(static_cast<int>(batch.slot_mapping.size()) == shape.num_tokens, E::kInvalidArgument,
             "slot_mapping has ", batch.slot_mapping.size(), " entries for ", shape.num_tokens,
             " new tokens");
    int row = 0;
    for (int i = 0; i < num_reqs; ++i) {
      const StepRequest& r = batch.requests[i];
      for (std::int64_t pos = r.seq_len - r.query_len; pos < r.seq_len; ++pos, ++row) {
        const std::int64_t want = slot_of(r, pos, block_size);
        FF_CHECK(batch.slot_mapping[row] == want, E::kInvalidArgument, "slot_mapping[", row,
                 "] = ", batch.slot_mapping[row], " but request ", i,
                 "'s block table puts position ", pos, " in slot ", want);
      }
    }
  }
  if (!batch.token_ids.empty()) {
    FF_CHECK(static_cast<int>(batch.token_ids.size()) == shape.num_tokens, E::kInvalidArgument,
             "token_ids has ", batch.token_ids.size(), " entries for ", shape.num_tokens,
             " new tokens");
    const std::int32_t vocab = limits.vocab_size > 0 ? limits.vocab_size : INT32_MAX;
    int outside = 0;
    for (const std::int32_t id : batch.token_ids) outside |= (id < 0) | (id >= vocab);
    const bool inside = outside == 0;
    for (int t = 0; !inside && t < shape.num_tokens; ++t) {
      FF_CHECK(batch.token_ids[t] >= 0 && batch.token_ids[t] < vocab, E::kInvalidArgument,
               "token_ids[", t, "] = ", batch.token_ids[t], " is outside the vocabulary of ",
               limits.vocab_size, " tokens");
    }
  }
  if (!batch.sampling.empty()) {
    FF_CHECK(static_cast<int>(batch.sampling.size()) == num_reqs, E::kInvalidArgument,
             "sampling has ", batch.sampling.size(), " entries for ", num_reqs, " requests");
    // A cheap pass every step; the message (which allocates) only for a refusal.
    for (int i = 0; i < num_reqs; ++i) {
      const SamplingParams& p = batch.sampling[i];
      const bool fine = p.temperature >= 0.0f && p.temperature <= FLT_MAX && p.top_k >= 0 &&
                        p.top_p > 0.0f && p.top_p <= 1.0f;
      if (!fine) check_sampling(p, "request " + std::to_string(i) + ": sampling");
    }
  }
  shape.uniform_decode = shape.num_decodes == num_reqs;
  return shape;
}

void StepMetadata::assign(const StepBatch& batch, const StepShape& shape, int block_size_tokens,
                          int padded_tokens, int padded_reqs) {
  assign(batch, shape, DcpSharding{1, 1, block_size_tokens}, 0, padded_tokens, padded_reqs);
}

void StepMetadata::assign(const StepBatch& batch, const StepShape& shape, const DcpSharding& dcp,
                          int dcp_rank, int padded_tokens, int padded_reqs) {
  const int num_reqs = shape.num_reqs;
  FF_CHECK(dcp_rank >= 0 && dcp_rank < dcp.world_size, E::kInvalidArgument, "DCP rank ", dcp_rank,
           " of ", dcp.world_size);
  FF_CHECK(padded_tokens >= shape.num_tokens && padded_reqs >= num_reqs, E::kInvalidArgument,
           "cannot pad a step of ", shape.num_tokens, " tokens and ", num_reqs, " requests to ",
           padded_tokens, " tokens and ", padded_reqs, " requests");
  const std::int64_t virtual_block = dcp.virtual_block_size();
  int stride = 1;
  for (const StepRequest& r : batch.requests) {
    stride = std::max(stride, static_cast<int>((r.seq_len + virtual_block - 1) / virtual_block));
  }
  reset(shape, stride, padded_tokens, padded_reqs);
  if (dcp.world_size > 1) dcp_context_lens_.assign(padded_reqs, 0);
  int row = 0;
  for (int i = 0; i < num_reqs; ++i) {
    const StepRequest& r = batch.requests[i];
    seq_lens_[i] = static_cast<std::int32_t>(
        dcp_shard_tokens<std::int64_t>(r.seq_len, dcp.world_size, dcp.interleave_size, dcp_rank));
    if (dcp.world_size > 1) dcp_context_lens_[i] = r.seq_len - r.query_len;
    query_start_loc_[i + 1] = query_start_loc_[i] + r.query_len;
    rows_[i] = r.block_ids;
    for (std::int32_t pos = r.seq_len - r.query_len; pos < r.seq_len; ++pos, ++row) {
      slot_mapping_[row] = batch.slot_mapping.empty() ? dcp.slot(r.block_ids.data(), pos, dcp_rank)
                                                      : batch.slot_mapping[row];
    }
  }
  pad_requests(num_reqs);
}

void StepMetadata::reset(const StepShape& shape, int stride, int padded_tokens, int padded_reqs) {
  block_table_stride_ = stride;
  num_tokens_ = padded_tokens;
  num_decodes_ = shape.num_decodes;
  query_start_loc_.assign(padded_reqs + 1, 0);
  seq_lens_.assign(padded_reqs, 0);
  rows_.assign(padded_reqs, {});
  slot_mapping_.assign(padded_tokens, -1);
  dcp_context_lens_.clear();
}

void StepMetadata::pad_requests(int num_reqs) {
  // Padded requests have no new tokens: query_start_loc stays flat past the real ones.
  for (std::size_t i = num_reqs; i + 1 < query_start_loc_.size(); ++i) {
    query_start_loc_[i + 1] = query_start_loc_[i];
  }
}

CommonAttentionMetadata StepMetadata::common() const {
  CommonAttentionMetadata m;
  m.query_start_loc = query_start_loc_;
  m.seq_lens = seq_lens_;
  m.block_table_rows = rows_;
  m.block_table_stride = block_table_stride_;
  m.slot_mapping = slot_mapping_;
  m.num_tokens = num_tokens_;
  m.num_decodes = num_decodes_;
  m.dcp_context_lens = dcp_context_lens_;
  return m;
}

}  // namespace freezeframe
