#include "freezeframe/backends/host_reference.h"
#include "freezeframe/core/element_value.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <thread>
#include <vector>

#include "freezeframe/base/error.h"

namespace freezeframe::host_reference {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

/// Element of a host view at a multi-index, as double.
double at(const TensorView& t, std::initializer_list<std::int64_t> index) {
  std::int64_t offset = 0;
  int d = 0;
  for (std::int64_t i : index) offset += i * t.stride(d++);
  return load_as_float(static_cast<const std::uint8_t*>(t.data()) + offset * size_of(t.dtype()),
                       t.dtype());
}

void store(const TensorView& t, std::initializer_list<std::int64_t> index, float value) {
  std::int64_t offset = 0;
  int d = 0;
  for (std::int64_t i : index) offset += i * t.stride(d++);
  store_from_float(static_cast<std::uint8_t*>(t.data()) + offset * size_of(t.dtype()), t.dtype(),
                   value);
}

void check_host(const TensorView& t, const char* what) {
  FF_CHECK(t.defined() && !t.is_cuda(), ErrorCode::kInvalidArgument, "host reference: ", what,
           " must be a host tensor");
}

/// One query row's attention over keys/values given as callbacks; online-free, two passes.
struct RowAttention {
  template <typename Score, typename Value>
  static void run(int first, int last, int head_size_v, Score score, Value value, double* out,
                  double* lse) {
    double m = kNegInf;
    std::vector<double> s;
    for (int j = first; j <= last; ++j) {
      s.push_back(score(j));
      m = std::max(m, s.back());
    }
    std::fill(out, out + head_size_v, 0.0);
    if (s.empty()) {
      *lse = kNegInf;
      return;
    }
    double l = 0.0;
    for (int j = first; j <= last; ++j) {
      const double p = std::exp(s[j - first] - m);
      l += p;
      for (int d = 0; d < head_size_v; ++d) out[d] += p * value(j, d);
    }
    for (int d = 0; d < head_size_v; ++d) out[d] /= l;
    *lse = m + std::log(l);
  }
};

/// The request of each query row (−1 for padding) and its position.
struct RowPlace {
  int req = -1;
  int pos = 0;
};
RowPlace place_row(const CommonAttentionMetadata& md, int row) {
  const int num_reqs = static_cast<int>(md.query_start_loc.size()) - 1;
  for (int r = 0; r < num_reqs; ++r) {
    if (row >= md.query_start_loc[r] && row < md.query_start_loc[r + 1]) {
      const int query_len = md.query_start_loc[r + 1] - md.query_start_loc[r];
      return {r, md.seq_lens[r] - query_len + (row - md.query_start_loc[r])};
    }
  }
  return {};
}

/// (block, offset) of position `pos` of request `req`.
std::pair<std::int64_t, std::int64_t> locate(const CommonAttentionMetadata& md, int req, int pos,
                                             int block_size) {
  const std::int64_t block =
      md.block_table[static_cast<std::size_t>(req) * md.block_table_stride + pos / block_size];
  return {block, pos % block_size};
}

}  // namespace

void reshape_and_cache(const TensorView& key, const TensorView& value, const TensorView& kv_cache,
                       std::span<const std::int64_t> slot_mapping, float k_scale, float v_scale) {
  check_host(key, "key");
  check_host(value, "value");
  check_host(kv_cache, "kv_cache");
  const std::int64_t block_size = kv_cache.size(2);
  const float inv_k = 1.0f / k_scale, inv_v = 1.0f / v_scale;  // as the kernel rounds
  for (std::size_t t = 0; t < slot_mapping.size(); ++t) {
    const std::int64_t slot = slot_mapping[t];
    if (slot < 0) continue;
    const std::int64_t block = slot / block_size, offset = slot % block_size;
    for (std::int64_t h = 0; h < key.size(1); ++h) {
      for (std::int64_t d = 0; d < key.size(2); ++d) {
        const std::int64_t row = static_cast<std::int64_t>(t);
        store(kv_cache, {0, block, offset, h, d}, static_cast<float>(at(key, {row, h, d})) * inv_k);
        store(kv_cache, {1, block, offset, h, d},
              static_cast<float>(at(value, {row, h, d})) * inv_v);
      }
    }
  }
}

AttentionResult attention(const AttentionParams& p, const TensorView& query, const TensorView& key,
                          const TensorView& value, const TensorView& kv_cache,
                          const CommonAttentionMetadata& md, float k_scale, float v_scale) {
  check_host(query, "query");
  const bool paged = uses_kv_cache(p.attn_type);
  if (paged)
    check_host(kv_cache, "kv_cache");
  else {
    check_host(key, "key");
    check_host(value, "value");
  }
  const bool causal = p.attn_type == AttentionType::kDecoder;
  const int group = p.num_heads / p.num_kv_heads;
  const double ks = is_fp8(kv_cache.defined() ? kv_cache.dtype() : DType::kBF16) ? k_scale : 1.0;
  const double vs = is_fp8(kv_cache.defined() ? kv_cache.dtype() : DType::kBF16) ? v_scale : 1.0;

  AttentionResult result;
  result.num_tokens = md.num_tokens;
  result.num_heads = p.num_heads;
  result.head_size_v = p.head_size;
  result.out.assign(static_cast<std::size_t>(md.num_tokens) * p.num_heads * p.head_size, 0.0);
  result.lse_ln.assign(static_cast<std::size_t>(md.num_tokens) * p.num_heads, kNegInf);

  // Rows are independent: spread them over the host's threads (a long prefill has millions
  // of query-key pairs per head).
  auto attend_row = [&](int row) {
    const RowPlace place = place_row(md, row);
    if (place.req < 0) return;
    const int r = place.req, pos = place.pos, kv_len = md.seq_lens[r];
    int first = 0, last = causal ? pos : kv_len - 1;
    if (p.sliding_window) {
      first = std::max(0, pos - *p.sliding_window + 1);
      if (!causal) last = std::min(last, pos + *p.sliding_window - 1);
    }
    std::vector<double> q(p.head_size);
    for (int h = 0; h < p.num_heads; ++h) {
      const int kvh = h / group;
      const double slope = p.alibi_slopes.empty() ? 0.0 : p.alibi_slopes[h];
      for (int d = 0; d < p.head_size; ++d) q[d] = at(query, {row, h, d});
      // Where key/value j lives, found once per j rather than once per element.
      int located = -1;
      std::pair<std::int64_t, std::int64_t> where{0, 0};
      auto find = [&](int j) {
        if (paged && j != located) {
          where = locate(md, r, j, static_cast<int>(kv_cache.size(2)));
          located = j;
        }
      };
      auto key_at = [&](int j, int d) {
        if (paged) {
          find(j);
          return at(kv_cache, {0, where.first, where.second, kvh, d}) * ks;
        }
        return at(key, {md.query_start_loc[r] + j, kvh, d});
      };
      auto value_at = [&](int j, int d) {
        if (paged) {
          find(j);
          return at(kv_cache, {1, where.first, where.second, kvh, d}) * vs;
        }
        return at(value, {md.query_start_loc[r] + j, kvh, d});
      };
      auto score = [&](int j) {
        double dot = 0.0;
        for (int d = 0; d < p.head_size; ++d) dot += q[d] * key_at(j, d);
        double s = dot * p.scale;
        if (p.logits_soft_cap > 0) s = p.logits_soft_cap * std::tanh(s / p.logits_soft_cap);
        return s + slope * (j - pos);
      };
      const std::size_t idx = static_cast<std::size_t>(row) * p.num_heads + h;
      RowAttention::run(first, last, p.head_size, score, value_at,
                        result.out.data() + idx * p.head_size, &result.lse_ln[idx]);
    }
  };
  std::atomic<int> next{0};
  auto worker = [&] {
    for (int row = next++; row < md.num_tokens; row = next++) attend_row(row);
  };
  const unsigned threads = std::clamp(std::thread::hardware_concurrency(), 1u, 32u);
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();
  return result;
}

void merge_attention_states(std::span<const double> partial_out,
                            std::span<const double> partial_lse_ln, int parts, int tokens,
                            int heads, int head_size, std::vector<double>& out,
                            std::vector<double>& out_lse_ln) {
  const std::size_t th = static_cast<std::size_t>(tokens) * heads;
  FF_CHECK(partial_out.size() == parts * th * head_size && partial_lse_ln.size() == parts * th,
           ErrorCode::kInvalidArgument, "host merge: partial sizes do not match the dimensions");
  out.assign(th * head_size, 0.0);
  out_lse_ln.assign(th, kNegInf);
  for (std::size_t i = 0; i < th; ++i) {
    double m = kNegInf;
    for (int r = 0; r < parts; ++r) m = std::max(m, partial_lse_ln[r * th + i]);
    if (m == kNegInf) continue;
    double sum = 0.0;
    for (int r = 0; r < parts; ++r) sum += std::exp(partial_lse_ln[r * th + i] - m);
    for (int r = 0; r < parts; ++r) {
      const double w = std::exp(partial_lse_ln[r * th + i] - m) / sum;
      for (int d = 0; d < head_size; ++d) {
        out[i * head_size + d] += w * partial_out[(r * th + i) * head_size + d];
      }
    }
    out_lse_ln[i] = m + std::log(sum);
  }
}

AttentionResult mla_forward(const MlaParams& p, const MlaWeights& w, const TensorView& cq,
                            const TensorView& kv_c, const TensorView& k_pe,
                            const TensorView& kv_cache, const CommonAttentionMetadata& md,
                            float kv_cache_scale) {
  for (auto [t, what] : {std::pair{&w.q_proj, "q_proj"},
                         {&w.kv_b_proj, "kv_b_proj"},
                         {&cq, "hidden_states_or_cq"},
                         {&kv_c, "kv_c_normed"},
                         {&k_pe, "k_pe"},
                         {&kv_cache, "kv_cache"}}) {
    check_host(*t, what);
  }
  const int h_count = p.num_heads, nope = p.qk_nope_head_dim, rope = p.qk_rope_head_dim;
  const int rank = p.kv_lora_rank, v_dim = p.v_head_dim, qk = nope + rope;
  const int block_size = static_cast<int>(kv_cache.size(1));
  auto angle = [&](int pos, int pair) {
    return pos * (p.rope_inv_freq.empty()
                      ? std::pow(static_cast<double>(p.rope_theta), -2.0 * pair / rope)
                      : static_cast<double>(p.rope_inv_freq[static_cast<std::size_t>(pair)]));
  };
  const double rope_scale = p.rope_scale;
  // An fp8 cache holds values divided by its scale; a 16-bit one the values.
  const double cache_scale = kv_cache.dtype() == DType::kFp8E4M3 ? kv_cache_scale : 1.0;

  // Queries (rotated) of every real row, and the cache write of every row with a slot.
  std::vector<double> q(static_cast<std::size_t>(md.num_tokens) * h_count * qk, 0.0);
  std::vector<RowPlace> places(md.num_tokens);
  for (int row = 0; row < md.num_tokens; ++row) {
    places[row] = place_row(md, row);
    if (places[row].req < 0) continue;
    const int pos = places[row].pos;
    for (int n = 0; n < h_count * qk; ++n) {
      double acc = 0.0;
      for (int k = 0; k < p.q_lora_rank; ++k) acc += at(cq, {row, k}) * at(w.q_proj, {n, k});
      q[static_cast<std::size_t>(row) * h_count * qk + n] = acc;
    }
    for (int h = 0; h < h_count; ++h) {
      double* pe = &q[(static_cast<std::size_t>(row) * h_count + h) * qk + nope];
      for (int i = 0; i < rope / 2; ++i) {
        const double a = angle(pos, i), x0 = pe[2 * i], x1 = pe[2 * i + 1];
        pe[2 * i] = (x0 * std::cos(a) - x1 * std::sin(a)) * rope_scale;
        pe[2 * i + 1] = (x0 * std::sin(a) + x1 * std::cos(a)) * rope_scale;
      }
    }
    const std::int64_t slot =
        row < static_cast<int>(md.slot_mapping.size()) ? md.slot_mapping[row] : -1;
    if (slot < 0) continue;
    const std::int64_t block = slot / block_size, offset = slot % block_size;
    for (int c = 0; c < rank; ++c)
      store(kv_cache, {block, offset, c}, static_cast<float>(at(kv_c, {row, c}) / cache_scale));
    for (int i = 0; i < rope / 2; ++i) {
      const double a = angle(pos, i), x0 = at(k_pe, {row, 2 * i}), x1 = at(k_pe, {row, 2 * i + 1});
      store(kv_cache, {block, offset, rank + 2 * i},
            static_cast<float>((x0 * std::cos(a) - x1 * std::sin(a)) * rope_scale / cache_scale));
      store(kv_cache, {block, offset, rank + 2 * i + 1},
            static_cast<float>((x0 * std::sin(a) + x1 * std::cos(a)) * rope_scale / cache_scale));
    }
  }

  AttentionResult result;
  result.num_tokens = md.num_tokens;
  result.num_heads = h_count;
  result.head_size_v = v_dim;
  result.out.assign(static_cast<std::size_t>(md.num_tokens) * h_count * v_dim, 0.0);
  result.lse_ln.assign(static_cast<std::size_t>(md.num_tokens) * h_count, kNegInf);

  // Expanded keys and values per request, then causal attention of each row.
  const int num_reqs = static_cast<int>(md.query_start_loc.size()) - 1;
  for (int r = 0; r < num_reqs; ++r) {
    const int len = md.seq_lens[r];
    std::vector<double> keys(static_cast<std::size_t>(len) * h_count * qk);
    std::vector<double> values(static_cast<std::size_t>(len) * h_count * v_dim);
    for (int j = 0; j < len; ++j) {
      const auto [block, offset] = locate(md, r, j, block_size);
      std::vector<double> latent(rank + rope);
      for (int c = 0; c < rank + rope; ++c) {
        latent[c] = at(kv_cache, {block, offset, c}) * cache_scale;
      }
      for (int h = 0; h < h_count; ++h) {
        for (int n = 0; n < nope + v_dim; ++n) {
          double acc = 0.0;
          for (int c = 0; c < rank; ++c)
            acc += at(w.kv_b_proj, {h * (nope + v_dim) + n, c}) * latent[c];
          if (n < nope)
            keys[(static_cast<std::size_t>(j) * h_count + h) * qk + n] = acc;
          else
            values[(static_cast<std::size_t>(j) * h_count + h) * v_dim + (n - nope)] = acc;
        }
        for (int i = 0; i < rope; ++i)
          keys[(static_cast<std::size_t>(j) * h_count + h) * qk + nope + i] = latent[rank + i];
      }
    }
    for (int row = md.query_start_loc[r]; row < md.query_start_loc[r + 1]; ++row) {
      const int pos = places[row].pos;
      for (int h = 0; h < h_count; ++h) {
        const double* qrow = &q[(static_cast<std::size_t>(row) * h_count + h) * qk];
        auto score = [&](int j) {
          double dot = 0.0;
          for (int d = 0; d < qk; ++d)
            dot += qrow[d] * keys[(static_cast<std::size_t>(j) * h_count + h) * qk + d];
          return dot * p.scale;
        };
        auto value_at = [&](int j, int d) {
          return values[(static_cast<std::size_t>(j) * h_count + h) * v_dim + d];
        };
        const std::size_t idx = static_cast<std::size_t>(row) * h_count + h;
        RowAttention::run(0, pos, v_dim, score, value_at, result.out.data() + idx * v_dim,
                          &result.lse_ln[idx]);
      }
    }
  }
  return result;
}

}  // namespace freezeframe::host_reference
