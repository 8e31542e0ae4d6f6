#include "freezeframe/backends/synthetic_batch.h"

#include <algorithm>
#include <numeric>
#include <random>

#include "freezeframe/base/error.h"

namespace freezeframe {

SyntheticBatch make_synthetic_batch(const SyntheticBatchSpec& spec) {
  FF_CHECK(spec.block_size > 0, ErrorCode::kInvalidArgument, "block_size must be positive");
  struct Req {
    int seq_len, query_len;
  };
  std::vector<Req> reqs;
  for (int len : spec.decode_seq_lens) reqs.push_back({len, 1});
  for (const auto& p : spec.prefills) reqs.push_back({p.seq_len, p.query_len});

  SyntheticBatch b;
  b.block_size = spec.block_size;
  b.num_decodes = static_cast<int>(spec.decode_seq_lens.size());
  int blocks_needed = 0, widest = 1;
  for (const Req& r : reqs) {
    FF_CHECK(r.query_len >= 0 && r.seq_len >= r.query_len, ErrorCode::kInvalidArgument,
             "a request needs 0 <= query_len <= seq_len, got ", r.query_len, " and ", r.seq_len);
    const int blocks = (r.seq_len + spec.block_size - 1) / spec.block_size;
    blocks_needed += blocks;
    widest = std::max(widest, blocks);
  }
  b.num_blocks = blocks_needed + spec.spare_blocks;
  FF_CHECK(spec.block_table_stride >= 0, ErrorCode::kInvalidArgument,
           "a block table stride cannot be negative, got ", spec.block_table_stride);
  widest = std::max(widest, spec.block_table_stride);
  b.block_table_stride = widest;

  std::vector<std::int32_t> pool(b.num_blocks);
  std::iota(pool.begin(), pool.end(), 0);
  std::mt19937_64 rng(spec.seed);
  std::shuffle(pool.begin(), pool.end(), rng);

  b.block_table.assign(reqs.size() * widest, 0);
  b.query_start_loc.push_back(0);
  std::size_t next = 0;
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    const Req& r = reqs[i];
    const int blocks = (r.seq_len + spec.block_size - 1) / spec.block_size;
    for (int k = 0; k < blocks; ++k) b.block_table[i * widest + k] = pool[next++];
    auto slot = [&](int pos) {
      return std::int64_t(b.block_table[i * widest + pos / spec.block_size]) * spec.block_size +
             pos % spec.block_size;
    };
    const int context = r.seq_len - r.query_len;
    for (int pos = 0; pos < context; ++pos) b.context_slot_mapping.push_back(slot(pos));
    for (int pos = context; pos < r.seq_len; ++pos) b.slot_mapping.push_back(slot(pos));
    b.seq_lens.push_back(r.seq_len);
    b.query_start_loc.push_back(b.query_start_loc.back() + r.query_len);
  }
  for (int i = 0; i < spec.padding_rows; ++i) b.slot_mapping.push_back(-1);
  b.num_tokens = b.query_start_loc.back() + spec.padding_rows;
  return b;
}

CommonAttentionMetadata SyntheticBatch::metadata() const {
  CommonAttentionMetadata m;
  m.query_start_loc = query_start_loc;
  m.seq_lens = seq_lens;
  m.block_table = block_table;
  m.block_table_stride = block_table_stride;
  m.slot_mapping = slot_mapping;
  m.num_tokens = num_tokens;
  m.num_decodes = num_decodes;
  return m;
}

BatchLimits SyntheticBatch::limits() const {
  BatchLimits l;
  l.max_num_reqs = std::max(1, num_reqs());
  l.max_num_tokens = std::max(1, num_tokens);
  l.max_blocks_per_req = block_table_stride;
  l.block_size = block_size;
  return l;
}

}  // namespace freezeframe
