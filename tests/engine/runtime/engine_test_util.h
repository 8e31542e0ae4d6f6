#pragma once
// Helpers for engine tests: small specs and batches whose requests own shuffled KV blocks.

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "freezeframe/engine/runtime/step_batch.h"

namespace freezeframe::testing {

/// A tiny Llama-style model (2 layers, GQA 4/2, head 64) on `backend`, with a 256 MiB budget;
/// `extra` is appended to the model section, `graphs` replaces the cuda_graphs section.
/// A long `max_len` makes block-table rows long enough for the compact upload.
inline std::string tiny_spec(const std::string& backend, const std::string& graphs,
                             const std::string& extra = "", int max_len = 1024) {
  return "model:\n"
         "  name: tiny\n"
         "  num_layers: 2\n"
         "  hidden_size: 256\n"
         "  num_heads: 4\n"
         "  num_kv_heads: 2\n"
         "  head_size: 64\n"
         "  intermediate_size: 512\n"
         "  vocab_size: 1000\n"
         "  dtype: bf16\n"
         "  max_position_embeddings: " +
         std::to_string(max_len) +
         "\n"
         "  attention:\n"
         "    backend: " +
         backend + "\n" + extra +
         "cache:\n"
         "  block_size: 16\n"
         "  memory_budget: 256MiB\n"
         "scheduler:\n"
         "  max_num_seqs: 64\n"
         "  max_num_batched_tokens: 512\n"
         "cuda_graphs:\n" +
         graphs;
}

/// A step's requests with their own blocks, drawn from a shuffled pool, and token ids.
class TestBatch {
 public:
  /// `shape`: (query_len, seq_len) per request, decodes first.
  TestBatch(const std::vector<std::pair<int, int>>& shape, int block_size, int num_blocks,
            std::mt19937& rng, int vocab = 1000) {
    std::vector<std::int32_t> pool(num_blocks);
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), rng);
    std::size_t next = 0;
    blocks_.resize(shape.size());
    std::uniform_int_distribution<std::int32_t> token(0, vocab - 1);
    for (std::size_t i = 0; i < shape.size(); ++i) {
      const int blocks = (shape[i].second + block_size - 1) / block_size;
      blocks_[i].assign(pool.begin() + next, pool.begin() + next + blocks);
      next += blocks;
      for (int t = 0; t < shape[i].first; ++t) tokens_.push_back(token(rng));
    }
    for (std::size_t i = 0; i < shape.size(); ++i) {
      batch_.requests.push_back({shape[i].first, shape[i].second, blocks_[i]});
    }
    batch_.token_ids = tokens_;
  }
  TestBatch(const TestBatch&) = delete;
  TestBatch& operator=(const TestBatch&) = delete;

  [[nodiscard]] const StepBatch& batch() const { return batch_; }

 private:
  std::vector<std::vector<std::int32_t>> blocks_;
  std::vector<std::int32_t> tokens_;
  StepBatch batch_;
};

/// `decodes` single-token decodes with random contexts, then `prefills` chunks.
inline std::vector<std::pair<int, int>> random_shape(int decodes, int prefills, int max_chunk,
                                                     int max_len, std::mt19937& rng) {
  std::vector<std::pair<int, int>> shape;
  std::uniform_int_distribution<int> len(1, max_len);
  for (int i = 0; i < decodes; ++i) shape.emplace_back(1, len(rng));
  std::uniform_int_distribution<int> chunk(2, std::max(2, max_chunk));
  for (int i = 0; i < prefills; ++i) {
    const int q = chunk(rng);
    shape.emplace_back(q, std::max(q, std::min(max_len, q + len(rng) / 2)));
  }
  return shape;
}

}  // namespace freezeframe::testing
