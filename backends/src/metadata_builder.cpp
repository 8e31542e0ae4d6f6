#include "freezeframe/backends/metadata_builder.h"

#include <algorithm>
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
  l.compact_width = at;
  at = align_up(at + sizeof(std::int32_t));
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
  // Last: everything before it is copied in one piece (up to the rows the step uses).
  l.block_table = at;
  at = align_up(at + table_bytes);
  l.total = at;
  return l;
}

std::size_t MetadataBuilder::device_bytes(const BatchLimits& limits) {
  return layout_for(limits).total;
}

MetadataBuilder::MetadataBuilder(const BatchLimits& limits, GraphSupport support,
                                 void* device_memory)
    : limits_(limits),
      block_size_(limits.block_size),
      support_(support),
      layout_(layout_for(limits)),
      staging_(image_bytes()),
      staging_free_(false) {
  if (device_memory == nullptr) {
    owned_ = DeviceBuffer(layout_.total);
    device_memory = owned_.data();
  }
  device_ = static_cast<std::byte*>(device_memory);
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
  const bool rows = !c.block_table_rows.empty();
  if (rows) {
    FF_CHECK(c.block_table.empty(), E::kInvalidArgument,
             "give the block table either flat (block_table) or by rows (block_table_rows), "
             "not both");
    FF_CHECK(static_cast<int>(c.block_table_rows.size()) == num_reqs, E::kInvalidArgument,
             "block_table_rows has ", c.block_table_rows.size(), " rows, expected num_reqs = ",
             num_reqs);
    FF_CHECK(limits_.block_size > 0, E::kInvalidArgument,
             "block_table_rows needs BatchLimits::block_size to know how many ids a row needs");
  } else {
    FF_CHECK(c.block_table.size() >= static_cast<std::size_t>(num_reqs) * c.block_table_stride,
             E::kInvalidArgument, "block_table has ", c.block_table.size(), " entries, needs ",
             num_reqs, " × ", c.block_table_stride);
  }
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
      const std::int64_t blocks = block_size_.blocks(c.seq_lens[r]);
      FF_CHECK(blocks <= c.block_table_stride, E::kInvalidArgument, "request ", r, ": seq_len ",
               c.seq_lens[r], " needs ", blocks, " blocks of ", limits_.block_size,
               ", the block table row holds ", c.block_table_stride);
      if (rows) {
        FF_CHECK(static_cast<std::int64_t>(c.block_table_rows[r].size()) >= blocks,
                 E::kInvalidArgument, "request ", r, ": seq_len ", c.seq_lens[r], " needs ", blocks,
                 " blocks of ", limits_.block_size, ", its block_table_rows entry has ",
                 c.block_table_rows[r].size());
      }
    }
  }
}

void MetadataBuilder::check_block_ids(int request, std::span<const std::int32_t> ids) const {
  const std::int32_t n = limits_.num_blocks;
  if (n <= 0) return;
  // Branch-free (vectorisable) over the row; the message needs a second pass.
  int outside = 0;
  for (const std::int32_t id : ids) outside |= (id < 0) | (id >= n);
  if (outside == 0) return;
  for (std::size_t b = 0; b < ids.size(); ++b) {
    FF_CHECK(ids[b] >= 0 && ids[b] < n, ErrorCode::kInvalidArgument, "request ", request,
             ": block_ids[", b, "] = ", ids[b], " is outside the KV cache's ", n, " blocks");
  }
}

std::span<const std::int32_t> MetadataBuilder::flat_row_ids(const CommonAttentionMetadata& c,
                                                           int request) const {
  // The ids the kernels follow: a row's entries past them may hold anything.
  const int width = c.block_table_stride;
  const int used = limits_.block_size > 0 ? block_size_.blocks(c.seq_lens[request]) : width;
  return c.block_table.subspan(static_cast<std::size_t>(request) * width, used);
}

std::size_t MetadataBuilder::stage(const CommonAttentionMetadata& c, std::byte* image) {
  validate(c);
  const int num_reqs = static_cast<int>(c.query_start_loc.size()) - 1;
  const int stride = limits_.max_blocks_per_req;  // device rows keep a fixed stride
  const int width = c.block_table_stride;
  auto* qsl = reinterpret_cast<std::int32_t*>(image + layout_.query_start_loc);
  auto* seq_lens = reinterpret_cast<std::int32_t*>(image + layout_.seq_lens);
  auto* seq_start = reinterpret_cast<std::int32_t*>(image + layout_.seq_start_loc);
  auto* slots = reinterpret_cast<std::int64_t*>(image + layout_.slot_mapping);
  // A compact table holds this step's rows back to back; a short one is copied whole, so
  // its rows sit at the fixed stride already.
  const std::size_t table_offset = compact() ? layout_.compact_table : layout_.block_table;
  auto* table = reinterpret_cast<std::int32_t*>(image + table_offset);
  const int row_stride = compact() ? width : stride;

  if (!c.block_table_rows.empty()) {
    // Each row's ids where the kernels read them, zeros after (never read; deterministic).
    // A row the image already holds is left alone: the image is pinned memory the device
    // copied out of a step ago, where a write costs about 1.6 times a write into memory it
    // has not read (staging_probe), and a decode step changes about one row in block_size.
    // Only rows written need their ids checked: the image holds nothing else (it starts
    // zeroed, and block 0 is in any pool).
    for (int r = 0; r < num_reqs; ++r) {
      const int blocks = block_size_.blocks(c.seq_lens[r]);
      std::int32_t* row = table + static_cast<std::size_t>(r) * row_stride;
      const std::int32_t* ids = c.block_table_rows[r].data();
      const std::size_t id_bytes = static_cast<std::size_t>(blocks) * sizeof(std::int32_t);
      const bool held = (blocks == 0 || std::memcmp(row, ids, id_bytes) == 0) &&
                        std::all_of(row + blocks, row + width, [](std::int32_t v) { return v == 0; });
      if (held) continue;
      check_block_ids(r, {ids, static_cast<std::size_t>(blocks)});
      if (blocks > 0) std::memcpy(row, ids, id_bytes);
      std::fill(row + blocks, row + width, 0);
    }
  } else if (row_stride == width) {
    for (int r = 0; r < num_reqs; ++r) check_block_ids(r, flat_row_ids(c, r));
    std::memcpy(table, c.block_table.data(),
                static_cast<std::size_t>(num_reqs) * width * sizeof(std::int32_t));
  } else {
    for (int r = 0; r < num_reqs; ++r) {
      check_block_ids(r, flat_row_ids(c, r));
      std::memcpy(table + static_cast<std::size_t>(r) * row_stride,
                  c.block_table.data() + static_cast<std::size_t>(r) * width,
                  width * sizeof(std::int32_t));
    }
  }
  // The rest after the table, whose ids may be refused: a refused step changes no more of the
  // image than rows of valid ids.
  *reinterpret_cast<std::int32_t*>(image + layout_.compact_width) = width;
  std::memcpy(qsl, c.query_start_loc.data(), (num_reqs + 1) * sizeof(std::int32_t));
  std::memcpy(seq_lens, c.seq_lens.data(), num_reqs * sizeof(std::int32_t));
  seq_start[0] = 0;
  for (int r = 0; r < num_reqs; ++r) seq_start[r + 1] = seq_start[r] + c.seq_lens[r];
  std::memcpy(slots, c.slot_mapping.data(), c.slot_mapping.size() * sizeof(std::int64_t));

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
  // The host copies are the image's own (valid until the next stage into it).
  m.query_start_loc_host = {qsl, static_cast<std::size_t>(num_reqs) + 1};
  m.seq_lens_host = {seq_lens, static_cast<std::size_t>(num_reqs)};
  return table_offset + static_cast<std::size_t>(num_reqs) * row_stride * sizeof(std::int32_t);
}

const AttentionMetadata& MetadataBuilder::upload(const CommonAttentionMetadata& c,
                                                 cudaStream_t stream) {
  // The staging buffer may still be feeding the previous step's copy.
  if (staging_in_flight_) staging_free_.synchronize();
  staging_in_flight_ = false;
  auto* image = static_cast<std::byte*>(staging_.data());
  const std::size_t bytes = stage(c, image);
  FF_CUDA_CHECK(cudaMemcpyAsync(device_, image, bytes, cudaMemcpyHostToDevice, stream));
  staging_free_.record(stream);
  staging_in_flight_ = true;
  return metadata_;
}

void MetadataBuilder::finish(cudaStream_t stream) const {
  if (!compact()) return;
  expand_block_table(reinterpret_cast<const std::int32_t*>(device_ + layout_.compact_width),
                     reinterpret_cast<const std::int32_t*>(device_ + layout_.compact_table),
                     reinterpret_cast<std::int32_t*>(device_ + layout_.block_table),
                     metadata_.num_reqs, limits_.max_blocks_per_req, stream);
}

const AttentionMetadata& MetadataBuilder::build(const CommonAttentionMetadata& c,
                                                cudaStream_t stream) {
  upload(c, stream);
  finish(stream);
  return metadata_;
}

}  // namespace freezeframe
