#include "freezeframe/backends/metadata_builder.h"

#include <cstring>

#include "freezeframe/core/error.h"
#include "metadata_expand.h"

namespace freezeframe {

namespace {
constexpr std::size_t kAlign = 256;
/// Up to this size the block table is copied at its fixed stride, unused columns and all;
/// larger tables go compact and are spread on the device (expand_block_table).
constexpr std::size_t kSingleCopyBytes = std::size_t(256) << 10;
std::size_t align_up(std::size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
}  // namespace

MetadataBuilder::Layout MetadataBuilder::layout_for(const BatchLimits& limits) {
  FF_CHECK(limits.max_num_reqs > 0 && limits.max_num_tokens > 0 && limits.max_blocks_per_req > 0,
           ErrorCode::kInvalidArgument,
           "BatchLimits needs positive max_num_reqs, max_num_tokens and max_blocks_per_req (got ",
           limits.max_num_reqs, ", ", limits.max_num_tokens, ", ", limits.max_blocks_per_req, ")");
  const auto reqs = static_cast<std::size_t>(limits.max_num_reqs);
  Layout l{};
  std::size_t at = 0;
  l.query_start_loc = at;
  at = align_up(at + (reqs + 1) * sizeof(std::int32_t));
  l.seq_lens = at;
  at = align_up(at + reqs * sizeof(std::int32_t));
  l.seq_start_loc = at;
  at = align_up(at + (reqs + 1) * sizeof(std::int32_t));
  l.slot_mapping = at;
  at = align_up(at + static_cast<std::size_t>(limits.max_num_tokens) * sizeof(std::int64_t));
  const std::size_t table_bytes =
      reqs * static_cast<std::size_t>(limits.max_blocks_per_req) * sizeof(std::int32_t);
  l.compact_table = at;
  if (table_bytes > kSingleCopyBytes) at = align_up(at + table_bytes);
  // Last: the rest is copied in one piece before it.
  l.block_table = at;
  at = align_up(at + reqs * static_cast<std::size_t>(limits.max_blocks_per_req) *
                         sizeof(std::int32_t));
  l.total = at;
  return l;
}

std::size_t MetadataBuilder::device_bytes(const BatchLimits& limits) {
  return layout_for(limits).total;
}

MetadataBuilder::MetadataBuilder(const BatchLimits& limits, GraphSupport support,
                                 void* device_memory)
    : limits_(limits),
      support_(support),
      layout_(layout_for(limits)),
      staging_(layout_.total),
      staging_free_(false) {
  if (device_memory == nullptr) {
    owned_ = DeviceBuffer(layout_.total);
    device_memory = owned_.data();
  }
  device_ = static_cast<std::byte*>(device_memory);
  query_start_loc_host_.reserve(limits.max_num_reqs + 1);
  seq_lens_host_.reserve(limits.max_num_reqs);
}

void MetadataBuilder::validate(const CommonAttentionMetadata& c) const {
  using E = ErrorCode;
  FF_CHECK(!c.query_start_loc.empty(), E::kInvalidArgument,
           "query_start_loc needs num_reqs + 1 entries, got none");
  const int num_reqs = static_cast<int>(c.query_start_loc.size()) - 1;
  FF_CHECK(num_reqs <= limits_.max_num_reqs, E::kInvalidArgument, "batch has ", num_reqs,
           " requests, more than max_num_reqs ", limits_.max_num_reqs);
  FF_CHECK(static_cast<int>(c.seq_lens.size()) == num_reqs, E::kInvalidArgument, "seq_lens has ",
           c.seq_lens.size(), " entries, expected num_reqs = ", num_reqs);
  FF_CHECK(c.query_start_loc[0] == 0, E::kInvalidArgument, "query_start_loc[0] must be 0, got ",
           c.query_start_loc[0]);
  FF_CHECK(c.num_tokens >= c.query_start_loc[num_reqs] && c.num_tokens <= limits_.max_num_tokens,
           E::kInvalidArgument, "num_tokens ", c.num_tokens, " must be in [",
           c.query_start_loc[num_reqs], ", max_num_tokens ", limits_.max_num_tokens, "]");
  FF_CHECK(static_cast<int>(c.slot_mapping.size()) <= limits_.max_num_tokens, E::kInvalidArgument,
           "slot_mapping has ", c.slot_mapping.size(), " entries, more than max_num_tokens ",
           limits_.max_num_tokens);
  FF_CHECK(c.block_table_stride > 0 && c.block_table_stride <= limits_.max_blocks_per_req,
           E::kInvalidArgument, "block_table_stride ", c.block_table_stride,
           " must be in [1, max_blocks_per_req ", limits_.max_blocks_per_req, "]");
  FF_CHECK(c.block_table.size() >= static_cast<std::size_t>(num_reqs) * c.block_table_stride,
           E::kInvalidArgument, "block_table has ", c.block_table.size(), " entries, needs ",
           num_reqs, " × ", c.block_table_stride);
  FF_CHECK(c.num_decodes >= 0 && c.num_decodes <= num_reqs, E::kInvalidArgument, "num_decodes ",
           c.num_decodes, " must be in [0, ", num_reqs, "]");
  for (int r = 0; r < num_reqs; ++r) {
    const int query_len = c.query_start_loc[r + 1] - c.query_start_loc[r];
    FF_CHECK(query_len >= 0, E::kInvalidArgument, "query_start_loc decreases at request ", r);
    FF_CHECK(c.seq_lens[r] >= query_len, E::kInvalidArgument, "request ", r, ": seq_len ",
             c.seq_lens[r], " is shorter than its ", query_len, " new tokens");
    if (r < c.num_decodes) {
      FF_CHECK(query_len == 1, E::kInvalidArgument, "request ", r,
               " is counted as a decode but has ", query_len,
               " new tokens (decodes come first, one token each)");
    }
    if (limits_.block_size > 0) {
      const std::int64_t blocks = (c.seq_lens[r] + limits_.block_size - 1) / limits_.block_size;
      FF_CHECK(blocks <= c.block_table_stride, E::kInvalidArgument, "request ", r, ": seq_len ",
               c.seq_lens[r], " needs ", blocks, " blocks of ", limits_.block_size,
               ", the block table row holds ", c.block_table_stride);
    }
  }
}

const AttentionMetadata& MetadataBuilder::build(const CommonAttentionMetadata& c,
                                                cudaStream_t stream) {
  validate(c);
  const int num_reqs = static_cast<int>(c.query_start_loc.size()) - 1;
  const int stride = limits_.max_blocks_per_req;  // device rows keep a fixed stride

  // The staging buffer may still be feeding the previous step's copy.
  if (staging_in_flight_) staging_free_.synchronize();

  auto* host = static_cast<std::byte*>(staging_.data());
  auto* qsl = reinterpret_cast<std::int32_t*>(host + layout_.query_start_loc);
  auto* seq_lens = reinterpret_cast<std::int32_t*>(host + layout_.seq_lens);
  auto* seq_start = reinterpret_cast<std::int32_t*>(host + layout_.seq_start_loc);
  auto* slots = reinterpret_cast<std::int64_t*>(host + layout_.slot_mapping);
  const bool compact = layout_.compact_table != layout_.block_table;
  auto* table = reinterpret_cast<std::int32_t*>(host + (compact ? layout_.compact_table : layout_.block_table));
  const int host_stride = compact ? c.block_table_stride : stride;

  std::memcpy(qsl, c.query_start_loc.data(), (num_reqs + 1) * sizeof(std::int32_t));
  std::memcpy(seq_lens, c.seq_lens.data(), num_reqs * sizeof(std::int32_t));
  seq_start[0] = 0;
  for (int r = 0; r < num_reqs; ++r) seq_start[r + 1] = seq_start[r] + c.seq_lens[r];
  std::memcpy(slots, c.slot_mapping.data(), c.slot_mapping.size() * sizeof(std::int64_t));
  if (host_stride == c.block_table_stride) {
    std::memcpy(table, c.block_table.data(),
                static_cast<std::size_t>(num_reqs) * host_stride * sizeof(std::int32_t));
  } else {
    for (int r = 0; r < num_reqs; ++r) {
      std::memcpy(table + static_cast<std::size_t>(r) * host_stride,
                  c.block_table.data() + static_cast<std::size_t>(r) * c.block_table_stride,
                  c.block_table_stride * sizeof(std::int32_t));
    }
  }

  if (layout_.compact_table == layout_.block_table) {
    // A small table: one copy up to the last row the step uses, at the fixed stride.
    const std::size_t bytes = layout_.block_table + num_reqs * static_cast<std::size_t>(stride) * sizeof(std::int32_t);
    FF_CUDA_CHECK(cudaMemcpyAsync(device_, host, bytes, cudaMemcpyHostToDevice, stream));
  } else {
    // Long rows (a 128k-token deployment has 8,192 blocks a row, of which a step may use a
    // few): one copy with the rows back to back, then a kernel spreads them to the stride.
    const std::size_t bytes = layout_.compact_table +
                              static_cast<std::size_t>(num_reqs) * c.block_table_stride * sizeof(std::int32_t);
    FF_CUDA_CHECK(cudaMemcpyAsync(device_, host, bytes, cudaMemcpyHostToDevice, stream));
    expand_block_table(reinterpret_cast<const std::int32_t*>(device_ + layout_.compact_table),
                       reinterpret_cast<std::int32_t*>(device_ + layout_.block_table), num_reqs,
                       c.block_table_stride, stride, stream);
  }
  staging_free_.record(stream);
  staging_in_flight_ = true;

  query_start_loc_host_.assign(c.query_start_loc.begin(), c.query_start_loc.end());
  seq_lens_host_.assign(c.seq_lens.begin(), c.seq_lens.end());

  AttentionMetadata& m = metadata_;
  m.query_start_loc = reinterpret_cast<const std::int32_t*>(device_ + layout_.query_start_loc);
  m.seq_lens = reinterpret_cast<const std::int32_t*>(device_ + layout_.seq_lens);
  m.seq_start_loc = reinterpret_cast<const std::int32_t*>(device_ + layout_.seq_start_loc);
  m.block_table = reinterpret_cast<const std::int32_t*>(device_ + layout_.block_table);
  m.block_table_stride = stride;
  m.slot_mapping = reinterpret_cast<const std::int64_t*>(device_ + layout_.slot_mapping);
  m.num_slots = static_cast<int>(c.slot_mapping.size());
  m.num_reqs = num_reqs;
  m.num_tokens = c.num_tokens;
  m.num_decodes = c.num_decodes;
  m.num_decode_tokens = c.query_start_loc[c.num_decodes];
  m.query_start_loc_host = query_start_loc_host_;
  m.seq_lens_host = seq_lens_host_;
  return m;
}

}  // namespace freezeframe
