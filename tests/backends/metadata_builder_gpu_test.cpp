// MetadataBuilder on the GPU: the block table given flat or by rows lands the same on the
// device, staging over the last step's image equals staging afresh, and block ids outside the
// pool are refused before their rows are written.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "freezeframe/backends/metadata_builder.h"
#include "freezeframe/core/cuda_check.h"
#include "freezeframe/core/cuda_handles.h"
#include "support/gpu.h"

namespace freezeframe {
namespace {

/// A step of single-token decodes, one per request, its block table given by rows.
CommonAttentionMetadata decodes_by_rows(std::span<const std::int32_t> qsl,
                                        std::span<const std::int32_t> seq_lens, int width,
                                        std::span<const std::span<const std::int32_t>> rows,
                                        std::span<const std::int64_t> slots) {
  CommonAttentionMetadata c;
  c.query_start_loc = qsl;
  c.seq_lens = seq_lens;
  c.block_table_stride = width;
  c.block_table_rows = rows;
  c.slot_mapping = slots;
  c.num_tokens = static_cast<int>(seq_lens.size());
  c.num_decodes = c.num_tokens;
  return c;
}

// The block table given flat or by rows lands the same on the device, for a short table and a
// long one (staged compact, spread to its stride by the copy).
TEST(MetadataBuilder, BlockTableByRowsEqualsFlat) {
  FF_REQUIRE_GPU();
  for (const int max_blocks : {64, 16384}) {
    SCOPED_TRACE("max_blocks_per_req " + std::to_string(max_blocks));
    BatchLimits limits{.max_num_reqs = 8,
                       .max_num_tokens = 64,
                       .max_blocks_per_req = max_blocks,
                       .block_size = 16};
    DeviceBuffer memory(MetadataBuilder::device_bytes(limits));
    MetadataBuilder builder(limits, GraphSupport::kAlways, memory.data());
    Stream stream = Stream::create();
    std::mt19937 rng(max_blocks);
    const std::vector<std::int32_t> seq_lens = {1, 700, 16, 17, 333};
    const std::vector<std::int32_t> qsl = {0, 1, 2, 3, 4, 5};
    const std::vector<std::int64_t> slots(5, -1);
    int width = 0;
    std::vector<std::vector<std::int32_t>> rows;
    for (const int len : seq_lens) {
      const int blocks = (len + 15) / 16;
      width = std::max(width, blocks);
      std::vector<std::int32_t> row(blocks + rng() % 5);  // some rows longer than needed
      for (auto& id : row) id = static_cast<std::int32_t>(rng() % 100000);
      rows.push_back(std::move(row));
    }
    std::vector<std::int32_t> flat(rows.size() * width, 0);
    for (std::size_t r = 0; r < rows.size(); ++r) {
      const int blocks = (seq_lens[r] + 15) / 16;
      std::copy_n(rows[r].begin(), blocks, flat.begin() + r * width);
    }
    std::vector<std::span<const std::int32_t>> row_spans(rows.begin(), rows.end());
    CommonAttentionMetadata by_rows = decodes_by_rows(qsl, seq_lens, width, row_spans, slots);
    CommonAttentionMetadata by_flat = by_rows;
    by_flat.block_table_rows = {};
    by_flat.block_table = flat;
    for (const CommonAttentionMetadata* c : {&by_flat, &by_rows}) {
      // Poisoned on the builder's stream: a plain cudaMemset runs on the legacy stream,
      // which a non-blocking stream does not wait for.
      FF_CUDA_CHECK(cudaMemsetAsync(memory.data(), 0xFF, memory.bytes(), stream.get()));
      const AttentionMetadata& md = builder.build(*c, stream.get());
      stream.synchronize();
      for (std::size_t r = 0; r < rows.size(); ++r) {
        const int blocks = (seq_lens[r] + 15) / 16;
        std::vector<std::int32_t> got(blocks);
        FF_CUDA_CHECK(cudaMemcpy(got.data(), md.block_table + r * md.block_table_stride,
                                 blocks * sizeof(std::int32_t), cudaMemcpyDeviceToHost));
        EXPECT_TRUE(std::equal(got.begin(), got.end(), rows[r].begin()))
            << (c == &by_rows ? "rows" : "flat") << ", request " << r;
      }
    }
    // A row shorter than its sequence needs is refused.
    rows[1].resize(10);
    row_spans[1] = rows[1];
    EXPECT_THROW((void)builder.build(by_rows, stream.get()), Error);
  }
}

// stage() leaves the block-table rows an image already holds alone: staging step after step
// into one image still leaves every row's ids followed by zeros up to the step's width, while
// requests grow, finish and come, and the table's width changes.
TEST(MetadataBuilder, StagingOverTheLastStepEqualsStagingAfresh) {
  FF_REQUIRE_GPU();
  for (const int max_blocks : {64, 16384}) {
    SCOPED_TRACE("max_blocks_per_req " + std::to_string(max_blocks));
    const BatchLimits limits{.max_num_reqs = 8,
                             .max_num_tokens = 64,
                             .max_blocks_per_req = max_blocks,
                             .block_size = 16};
    MetadataBuilder builder(limits, GraphSupport::kAlways, nullptr);
    std::mt19937 rng(max_blocks);
    const int max_len = std::min(max_blocks * 16, 1000);
    struct Request {
      std::int32_t seq_len;
      std::vector<std::int32_t> ids;
    };
    auto new_request = [&] {
      Request r{static_cast<std::int32_t>(1 + rng() % (max_len / 2)), {}};
      r.ids.resize((r.seq_len + 15) / 16);
      for (auto& id : r.ids) id = static_cast<std::int32_t>(rng() % 100000);
      return r;
    };
    std::vector<Request> requests(8);
    for (auto& r : requests) r = new_request();
    // Poisoned, but for the table, which starts zeroed (as every image's does).
    std::vector<std::byte> image(builder.image_bytes(), std::byte{0});
    std::fill_n(image.begin(), builder.layout().head_bytes, std::byte{0xAB});
    for (int step = 0; step < 300; ++step) {
      SCOPED_TRACE("step " + std::to_string(step));
      for (auto& r : requests) {  // each decodes one token; some finish and are replaced
        if (r.seq_len > 40 && rng() % 12 == 0) {
          // One that shares the finished one's leading blocks (a prefix-cache hit): its row
          // starts like the image's and must still get zeros after its own ids.
          r.seq_len = 1 + static_cast<std::int32_t>(rng() % (r.seq_len - 33));
          r.ids.resize((r.seq_len + 15) / 16);
        } else if (r.seq_len + 1 >= max_len || rng() % 12 == 0) {
          r = new_request();
        }
        ++r.seq_len;
        if ((r.seq_len + 15) / 16 > static_cast<int>(r.ids.size())) {
          r.ids.push_back(static_cast<std::int32_t>(rng() % 100000));
        }
      }
      const int num_reqs = 1 + static_cast<int>(rng() % 8);
      std::vector<std::int32_t> qsl(num_reqs + 1), seq_lens(num_reqs);
      std::vector<std::int64_t> slots(num_reqs, -1);
      std::vector<std::span<const std::int32_t>> rows;
      int width = 1;
      for (int i = 0; i < num_reqs; ++i) {
        qsl[i + 1] = i + 1;
        seq_lens[i] = requests[i].seq_len;
        rows.emplace_back(requests[i].ids);
        width = std::max(width, (seq_lens[i] + 15) / 16);
      }
      const CommonAttentionMetadata c = decodes_by_rows(qsl, seq_lens, width, rows, slots);
      // The table's rows lie back to back at the step's width, its last ending where the
      // step's bytes do.
      const std::size_t used = builder.stage(c, image.data());
      const std::size_t row_stride = width;
      ASSERT_EQ(used, builder.layout().head_bytes + num_reqs * row_stride * sizeof(std::int32_t));
      const auto* table = reinterpret_cast<const std::int32_t*>(
          image.data() + used - num_reqs * row_stride * sizeof(std::int32_t));
      for (int i = 0; i < num_reqs; ++i) {
        const int blocks = (seq_lens[i] + 15) / 16;
        const std::int32_t* row = table + i * row_stride;
        for (int b = 0; b < width; ++b) {
          ASSERT_EQ(row[b], b < blocks ? requests[i].ids[b] : 0) << "request " << i << ", id " << b;
        }
      }
    }
  }
}

// With the pool's size in its limits, stage() refuses a block id outside the pool in a row it
// writes, naming request and id; the image keeps only valid ids, so the next step staged over
// it equals that step staged afresh. A flat table's entries past a row's blocks are not ids.
TEST(MetadataBuilder, BlockIdsOutsideThePoolAreRefused) {
  FF_REQUIRE_GPU();
  for (const int max_blocks : {64, 16384}) {
    SCOPED_TRACE("max_blocks_per_req " + std::to_string(max_blocks));
    const BatchLimits limits{.max_num_reqs = 8,
                             .max_num_tokens = 64,
                             .max_blocks_per_req = max_blocks,
                             .block_size = 16,
                             .num_blocks = 1000};
    MetadataBuilder builder(limits, GraphSupport::kAlways, nullptr);
    std::mt19937 rng(max_blocks + 1);
    const std::vector<std::int32_t> qsl = {0, 1, 2, 3, 4};
    const std::vector<std::int32_t> seq_lens = {40, 17, 64, 5};
    const std::vector<std::int64_t> slots(4, -1);
    auto random_rows = [&] {
      std::vector<std::vector<std::int32_t>> rows;
      for (const int len : seq_lens) {
        std::vector<std::int32_t> row((len + 15) / 16);
        for (auto& id : row) id = static_cast<std::int32_t>(rng() % 1000);
        rows.push_back(std::move(row));
      }
      return rows;
    };
    using Rows = std::vector<std::vector<std::int32_t>>;
    auto stage = [&](const Rows& rows, std::vector<std::byte>& image) {
      const std::vector<std::span<const std::int32_t>> spans(rows.begin(), rows.end());
      return builder.stage(decodes_by_rows(qsl, seq_lens, 4, spans, slots), image.data());
    };
    std::vector<std::byte> image(builder.image_bytes(), std::byte{0});
    (void)stage(random_rows(), image);

    const std::vector<std::vector<std::int32_t>> next = random_rows();
    for (const std::int32_t bad : {1000, -1}) {
      std::vector<std::vector<std::int32_t>> rows = next;  // rows 0 and 1 change and are valid
      rows[2][1] = bad;
      try {
        (void)stage(rows, image);
        ADD_FAILURE() << "block id " << bad << " was staged";
      } catch (const Error& e) {
        EXPECT_NE(e.message().find("request 2: block_ids[1] = " + std::to_string(bad) +
                                   " is outside the KV cache's 1000 blocks"),
                  std::string::npos)
            << e.message();
      }
    }
    std::vector<std::byte> fresh(builder.image_bytes(), std::byte{0});
    const std::size_t used = stage(next, image);
    ASSERT_EQ(stage(next, fresh), used);
    EXPECT_EQ(std::memcmp(image.data(), fresh.data(), used), 0);

    // Flat: the same check over the ids each row uses, and only those.
    std::vector<std::int32_t> flat(4 * 4, -7);
    for (int r = 0; r < 4; ++r) std::copy(next[r].begin(), next[r].end(), flat.begin() + r * 4);
    CommonAttentionMetadata c = decodes_by_rows(qsl, seq_lens, 4, {}, slots);
    c.block_table = flat;
    EXPECT_NO_THROW((void)builder.stage(c, fresh.data()));
    flat[3 * 4] = 1000;
    try {
      (void)builder.stage(c, fresh.data());
      ADD_FAILURE() << "a flat table's block id 1000 was staged";
    } catch (const Error& e) {
      EXPECT_NE(e.message().find("request 3: block_ids[0] = 1000 is outside"), std::string::npos)
          << e.message();
    }
  }
}

}  // namespace
}  // namespace freezeframe
