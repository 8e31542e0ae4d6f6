#include "freezeframe/backends/metadata_builder.h"

#include <algorithm>
#include <cstring>

#include "freezeframe/backends/backend.h"
#include "freezeframe/core/block_size.h"
#include "freezeframe/core/cuda_check.h"
#include "freezeframe/core/device.h"

namespace freezeframe {

namespace {

constexpr std::size_t kAlign = 256;
std::size_t align_up(std::size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

/// Throws when one of request `request`'s block ids lies outside a pool of `num_blocks`.
void check_block_ids(int request, std::span<const std::int32_t> ids, std::int32_t num_blocks) {
  if (num_blocks <= 0) return;
  // Branch-free (vectorisable) over the row; the message needs a second pass.
  int outside = 0;
  for (const std::int32_t id : ids) outside |= (id < 0) | (id >= num_blocks);
  if (outside == 0) return;
  for (std::size_t b = 0; b < ids.size(); ++b) {
    FF_CHECK(ids[b] >= 0 && ids[b] < num_blocks, ErrorCode::kInvalidArgument, "request ", request,
             ": block_ids[", b, "] = ", ids[b], " is outside the KV cache's ", num_blocks,
             " blocks");
  }
}

}  // namespace

MetadataLayout MetadataLayout::of(const BatchLimits& limits) {
  FF_CHECK(limits.max_num_reqs > 0 && limits.max_num_tokens > 0 && limits.max_blocks_per_req > 0,
           ErrorCode::kInvalidArgument,
           "BatchLimits needs positive max_num_reqs, max_num_tokens and max_blocks_per_req (got ",
           limits.max_num_reqs, ", ", limits.max_num_tokens, ", ", limits.max_blocks_per_req, ")");
  const auto reqs = static_cast<std::size_t>(limits.max_num_reqs);
  MetadataLayout l;
  std::size_t at = 0;
  l.table_shape = at;
  at = align_up(at + 2 * sizeof(std::int32_t));
  l.query_start_loc = at;
  at = align_up(at + (reqs + 1) * sizeof(std::int32_t));
  l.seq_lens = at;
  at = align_up(at + reqs * sizeof(std::int32_t));
  l.seq_start_loc = at;
  at = align_up(at + (reqs + 1) * sizeof(std::int32_t));
  l.slot_mapping = at;
  at = align_up(at + static_cast<std::size_t>(limits.max_num_tokens) * sizeof(std::int64_t));
  l.head_bytes = at;
  l.table_stride = limits.max_blocks_per_req;
  l.table_bytes = align_up(reqs * static_cast<std::size_t>(l.table_stride) * sizeof(std::int32_t));
  return l;
}

void validate_metadata(const CommonAttentionMetadata& c, const BatchLimits& limits) {
  const BlockSize block_size(limits.block_size > 0 ? limits.block_size : 1);
  using E = ErrorCode;
  FF_CHECK(!c.query_start_loc.empty(), E::kInvalidArgument,
           "query_start_loc needs num_reqs + 1 entries, got none");
  const int num_reqs = static_cast<int>(c.query_start_loc.size()) - 1;
  FF_CHECK(num_reqs <= limits.max_num_reqs, E::kInvalidArgument, "batch has ", num_reqs,
           " requests, more than max_num_reqs ", limits.max_num_reqs);
  FF_CHECK(static_cast<int>(c.seq_lens.size()) == num_reqs, E::kInvalidArgument, "seq_lens has ",
           c.seq_lens.size(), " entries, expected num_reqs = ", num_reqs);
  FF_CHECK(c.query_start_loc[0] == 0, E::kInvalidArgument, "query_start_loc[0] must be 0, got ",
           c.query_start_loc[0]);
  FF_CHECK(c.num_tokens >= c.query_start_loc[num_reqs] && c.num_tokens <= limits.max_num_tokens,
           E::kInvalidArgument, "num_tokens ", c.num_tokens, " must be in [",
           c.query_start_loc[num_reqs], ", max_num_tokens ", limits.max_num_tokens, "]");
  FF_CHECK(static_cast<int>(c.slot_mapping.size()) <= limits.max_num_tokens, E::kInvalidArgument,
           "slot_mapping has ", c.slot_mapping.size(), " entries, more than max_num_tokens ",
           limits.max_num_tokens);
  FF_CHECK(c.block_table_stride > 0 && c.block_table_stride <= limits.max_blocks_per_req,
           E::kInvalidArgument, "block_table_stride ", c.block_table_stride,
           " must be in [1, max_blocks_per_req ", limits.max_blocks_per_req, "]");
  const bool rows = !c.block_table_rows.empty();
  if (rows) {
    FF_CHECK(c.block_table.empty(), E::kInvalidArgument,
             "give the block table either flat (block_table) or by rows (block_table_rows), "
             "not both");
    FF_CHECK(static_cast<int>(c.block_table_rows.size()) == num_reqs, E::kInvalidArgument,
             "block_table_rows has ", c.block_table_rows.size(),
             " rows, expected num_reqs = ", num_reqs);
    FF_CHECK(limits.block_size > 0, E::kInvalidArgument,
             "block_table_rows needs BatchLimits::block_size to know how many ids a row needs");
  } else {
    FF_CHECK(c.block_table.size() >= static_cast<std::size_t>(num_reqs) * c.block_table_stride,
             E::kInvalidArgument, "block_table has ", c.block_table.size(), " entries, needs ",
             num_reqs, " × ", c.block_table_stride);
  }
  FF_CHECK(c.num_decodes >= 0 && c.num_decodes <= num_reqs, E::kInvalidArgument, "num_decodes ",
           c.num_decodes, " must be in [0, ", num_reqs, "]");
  // Under DCP a request's keys are a shard, which may hold fewer than its new tokens.
  const bool sharded = !c.dcp_context_lens.empty();
  FF_CHECK(!sharded || static_cast<int>(c.dcp_context_lens.size()) >= num_reqs, E::kInvalidArgument,
           "dcp_context_lens has ", c.dcp_context_lens.size(),
           " entries, fewer than num_reqs = ", num_reqs);
  for (int r = 0; r < num_reqs; ++r) {
    const int query_len = c.query_start_loc[r + 1] - c.query_start_loc[r];
    FF_CHECK(query_len >= 0, E::kInvalidArgument, "query_start_loc decreases at request ", r);
    if (sharded) {
      FF_CHECK(c.dcp_context_lens[r] >= 0 && c.seq_lens[r] >= 0 &&
                   c.seq_lens[r] <= std::int64_t(c.dcp_context_lens[r]) + query_len,
               E::kInvalidArgument, "request ", r, ": a shard of ", c.seq_lens[r],
               " keys of a sequence of ", std::int64_t(c.dcp_context_lens[r]) + query_len,
               " (dcp_context_lens ", c.dcp_context_lens[r], " + ", query_len, " new tokens)");
    } else {
      FF_CHECK(c.seq_lens[r] >= query_len, E::kInvalidArgument, "request ", r, ": seq_len ",
               c.seq_lens[r], " is shorter than its ", query_len, " new tokens");
    }
    if (r < c.num_decodes) {
      FF_CHECK(query_len == 1, E::kInvalidArgument, "request ", r,
               " is counted as a decode but has ", query_len,
               " new tokens (decodes come first, one token each)");
    }
    if (limits.block_size > 0) {
      const std::int64_t blocks = block_size.blocks(c.seq_lens[r]);
      FF_CHECK(blocks <= c.block_table_stride, E::kInvalidArgument, "request ", r, ": seq_len ",
               c.seq_lens[r], " needs ", blocks, " blocks of ", limits.block_size,
               ", the block table row holds ", c.block_table_stride);
      if (rows) {
        FF_CHECK(static_cast<std::int64_t>(c.block_table_rows[r].size()) >= blocks,
                 E::kInvalidArgument, "request ", r, ": seq_len ", c.seq_lens[r], " needs ", blocks,
                 " blocks of ", limits.block_size, ", its block_table_rows entry has ",
                 c.block_table_rows[r].size());
      }
    }
  }
}

std::size_t stage_metadata(const CommonAttentionMetadata& c, const BatchLimits& limits,
                           const MetadataLayout& layout, std::byte* head, std::int32_t* table) {
  const int num_reqs = static_cast<int>(c.query_start_loc.size()) - 1;
  const int width = c.block_table_stride;  // the step's rows, back to back
  const BlockSize block_size(limits.block_size > 0 ? limits.block_size : 1);
  auto used_ids = [&](int r) {
    return limits.block_size > 0 ? block_size.blocks(c.seq_lens[r]) : width;
  };

  if (!c.block_table_rows.empty()) {
    // Each row's ids, zeros after (never read; deterministic). A row the image already holds
    // is left alone: the image is pinned memory the device copied out of a step ago, where a
    // write costs about 1.6 times a write into memory it has not read (staging_probe). Only
    // rows written need their ids checked: the table holds nothing else (it starts zeroed,
    // and block 0 is in any pool).
    for (int r = 0; r < num_reqs; ++r) {
      const int blocks = used_ids(r);
      std::int32_t* row = table + static_cast<std::size_t>(r) * width;
      const std::int32_t* ids = c.block_table_rows[r].data();
      const std::size_t id_bytes = static_cast<std::size_t>(blocks) * sizeof(std::int32_t);
      const bool held =
          (blocks == 0 || std::memcmp(row, ids, id_bytes) == 0) &&
          std::all_of(row + blocks, row + width, [](std::int32_t v) { return v == 0; });
      if (held) continue;
      check_block_ids(r, {ids, static_cast<std::size_t>(blocks)}, limits.num_blocks);
      if (blocks > 0) std::memcpy(row, ids, id_bytes);
      std::fill(row + blocks, row + width, 0);
    }
  } else {
    // Only the ids a row uses are ids: its entries past them may hold anything.
    for (int r = 0; r < num_reqs; ++r) {
      check_block_ids(r, c.block_table.subspan(static_cast<std::size_t>(r) * width, used_ids(r)),
                      limits.num_blocks);
    }
    std::memcpy(table, c.block_table.data(),
                static_cast<std::size_t>(num_reqs) * width * sizeof(std::int32_t));
  }
  // The rest after the table, whose ids may be refused: a refused step changes no more of the
  // image than rows of valid ids.
  auto* shape = reinterpret_cast<std::int32_t*>(head + layout.table_shape);
  shape[0] = num_reqs;
  shape[1] = width;
  std::memcpy(head + layout.query_start_loc, c.query_start_loc.data(),
              (num_reqs + 1) * sizeof(std::int32_t));
  std::memcpy(head + layout.seq_lens, c.seq_lens.data(), num_reqs * sizeof(std::int32_t));
  auto* seq_start = reinterpret_cast<std::int32_t*>(head + layout.seq_start_loc);
  seq_start[0] = 0;
  for (int r = 0; r < num_reqs; ++r) seq_start[r + 1] = seq_start[r] + c.seq_lens[r];
  std::memcpy(head + layout.slot_mapping, c.slot_mapping.data(),
              c.slot_mapping.size() * sizeof(std::int64_t));
  return static_cast<std::size_t>(num_reqs) * width * sizeof(std::int32_t);
}

AttentionMetadata metadata_view(const CommonAttentionMetadata& c, const MetadataLayout& layout,
                                const std::byte* head, const std::byte* device_head,
                                const std::int32_t* device_table) {
  const int num_reqs = static_cast<int>(c.query_start_loc.size()) - 1;
  AttentionMetadata m;
  m.query_start_loc = reinterpret_cast<const std::int32_t*>(device_head + layout.query_start_loc);
  m.seq_lens = reinterpret_cast<const std::int32_t*>(device_head + layout.seq_lens);
  m.seq_start_loc = reinterpret_cast<const std::int32_t*>(device_head + layout.seq_start_loc);
  m.block_table = device_table;
  m.block_table_stride = layout.table_stride;
  m.slot_mapping = reinterpret_cast<const std::int64_t*>(device_head + layout.slot_mapping);
  m.num_slots = static_cast<int>(c.slot_mapping.size());
  m.num_reqs = num_reqs;
  m.num_tokens = c.num_tokens;
  m.num_decodes = c.num_decodes;
  m.num_decode_tokens = c.query_start_loc[c.num_decodes];
  // The host copies are the image's own (valid until the next stage into it).
  m.query_start_loc_host = {reinterpret_cast<const std::int32_t*>(head + layout.query_start_loc),
                            static_cast<std::size_t>(num_reqs) + 1};
  m.seq_lens_host = {reinterpret_cast<const std::int32_t*>(head + layout.seq_lens),
                     static_cast<std::size_t>(num_reqs)};
  return m;
}

std::size_t MetadataBuilder::device_bytes(const BatchLimits& limits) {
  const MetadataLayout l = MetadataLayout::of(limits);
  return l.head_bytes + l.table_bytes;
}

namespace {

std::size_t planned_bytes(const AttentionBackend* planner, const BatchLimits& limits) {
  if (planner == nullptr) return 0;
  return planner->plan_bytes(limits,
                             has_gpu() ? current_device_properties() : DeviceProperties::h200());
}

}  // namespace

MetadataBuilder::MetadataBuilder(const BatchLimits& limits, GraphSupport support,
                                 void* device_memory, const AttentionBackend* planner)
    : limits_(limits),
      support_(support),
      layout_(MetadataLayout::of(limits)),
      staging_(layout_.head_bytes + layout_.table_bytes + planned_bytes(planner, limits)),
      staging_free_(false),
      planner_(planner),
      plan_bytes_(planned_bytes(planner, limits)) {
  if (plan_bytes_ > 0) plan_device_ = DeviceBuffer(plan_bytes_);
  if (device_memory == nullptr) {
    owned_ = DeviceBuffer(image_bytes());
    device_memory = owned_.data();
  }
  device_ = static_cast<std::byte*>(device_memory);
}

std::size_t MetadataBuilder::stage(const CommonAttentionMetadata& c, std::byte* image) {
  validate_metadata(c, limits_);
  const std::size_t table = stage_metadata(
      c, limits_, layout_, image, reinterpret_cast<std::int32_t*>(image + layout_.head_bytes));
  metadata_ = metadata_view(c, layout_, image, device_,
                            reinterpret_cast<const std::int32_t*>(device_ + layout_.head_bytes));
  return layout_.head_bytes + table;
}

const AttentionMetadata& MetadataBuilder::build(const CommonAttentionMetadata& c,
                                                cudaStream_t stream) {
  // The staging buffer may still be feeding the previous step's copy.
  if (staging_in_flight_) staging_free_.synchronize();
  staging_in_flight_ = false;
  auto* image = static_cast<std::byte*>(staging_.data());
  (void)stage(c, image);
  FF_CUDA_CHECK(
      cudaMemcpyAsync(device_, image, layout_.head_bytes, cudaMemcpyHostToDevice, stream));
  const auto* shape = reinterpret_cast<const std::int32_t*>(image + layout_.table_shape);
  const std::size_t row_bytes = static_cast<std::size_t>(shape[1]) * sizeof(std::int32_t);
  if (shape[0] > 0 && row_bytes > 0) {
    FF_CUDA_CHECK(
        cudaMemcpy2DAsync(device_ + layout_.head_bytes,
                          static_cast<std::size_t>(layout_.table_stride) * sizeof(std::int32_t),
                          image + layout_.head_bytes, row_bytes, row_bytes,
                          static_cast<std::size_t>(shape[0]), cudaMemcpyHostToDevice, stream));
  }
  if (plan_bytes_ > 0) {
    std::byte* plan = image + image_bytes();
    planner_->plan(c, {plan, plan_bytes_});
    FF_CUDA_CHECK(
        cudaMemcpyAsync(plan_device_.data(), plan, plan_bytes_, cudaMemcpyHostToDevice, stream));
    metadata_.plan = plan_device_.data();
  }
  staging_free_.record(stream);
  staging_in_flight_ = true;
  return metadata_;
}

}  // namespace freezeframe
