// The on-device sampler: one CTA of 1024 threads per
// request, over its logits row (up to a vocabulary of ~152k). Every token has a distinct 64-bit
// rank (its value's order key, then the lower id), each cut is the rank of the last token it keeps,
// and every sum is a 64-bit integer, so the order the threads add in never changes the token and
// sample_reference (a sort and a walk) gives the same one.
//
// One SM reads the whole row each pass, so the passes are few and cheap:
//   1. The best rank (greedy's answer, and the max the weights are taken against) and, when
//      sampling, how many tokens fall in each of 4096 buckets: the top 12 bits of the order key
//      (sign, exponent, 3 bits of mantissa), so a bucket is an eighth of an octave of values and
//      the buckets are in rank order. Then one warp finds the lowest key that still weighs
//      something (weight is 0 about 22 nats below the max). Nothing drawn depends on tokens
//      that weigh 0 or on tokens below the k-th best, so only the buckets from the higher of
//      those two bounds up matter.
//   2. When the tokens of those buckets fit in shared memory (top-k's few dozen; a peaked row's
//      few hundred within 22 nats of its max), a second pass gathers their ranks and the rest
//      works on that list: the top-k and top-p cuts by radix selection over the ranks, and the
//      draw by the same selection over the ids (the lowest id first) weighing each kept token.
//   3. Otherwise (a flat row without a small top-k) the k-th best is selected within its bucket
//      (gathered alone), one pass weighs every kept token and sums each bucket's weight, the
//      top-p cut is selected within the bucket that holds the nucleus target, and the draw
//      selects over ids: its first pass reads the row, the later ones the 1/256 of it left. A
//      bucket too full to gather (thousands of equal values) is selected over the whole row.
// A radix selection takes 8 bits a pass, from the highest bit in which its candidates can
// differ, and stops as soon as every candidate under the prefix so far is needed.
// Histogram bins are shared-memory atomics. Many lanes of a warp often hit one bin (a bucket,
// a digit), and same-address atomics serialise, so the lanes that share a bin add their amounts
// first (__match_any_sync) and one of them issues the atomic.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <limits>
#include <mutex>
#include <set>

#include "freezeframe/core/cuda_check.h"
#include "runtime/sampler_block.cuh"
#include "runtime/sampler_kernel.h"
#include "runtime/sampling_math.h"

namespace freezeframe::model_kernels {
namespace {

using namespace sampler_block;  // NOLINT: the kernel's own parts

__global__ void __launch_bounds__(kThreads) sample_kernel(const __grid_constant__ SampleParams p) {
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  Shared& sh = *reinterpret_cast<Shared*>(shared_bytes);
  const SampleRow row = p.rows[blockIdx.x];
  if (row.active == 0) {
    if (threadIdx.x == 0) p.token_ids[blockIdx.x] = -1;
    return;
  }
  const float* logits = p.logits + static_cast<std::int64_t>(blockIdx.x) * p.row_stride;
  const int vocab = p.vocab;
  const float temperature = row.temperature;
  const auto rank_of = [&](int v, float logit) {
    const float x = temperature == 0.0f ? s::canonical(logit) : s::scaled(logit, temperature);
    return s::rank_key(x, v);
  };
  const auto bucket_of = [](std::uint64_t rank) {
    return static_cast<std::uint32_t>(rank >> kRankBucketShift);
  };

  // 1. The best token, and the tokens in each bucket.
  const bool greedy = temperature == 0.0f || row.top_k == 1;
  if (!greedy) {
    for (int i = threadIdx.x; i < kBuckets; i += kThreads) sh.bucket_count[i] = 0;
    __syncthreads();
  }
  std::uint64_t best = 0;
  for_each_token(logits, 0, vocab, [&](int v, float logit, bool valid) {
    const std::uint64_t rank = valid ? rank_of(v, logit) : 0;
    best = Max{}(best, rank);
    if (!greedy) count_in_bin(sh.bucket_count, bucket_of(rank), valid);
  });
  best = block_max(best, sh);  // its syncs also complete the counts
  if (greedy) {
    if (threadIdx.x == 0) p.token_ids[blockIdx.x] = s::rank_id(best);
    return;
  }
  const float max = s::key_value(static_cast<std::uint32_t>(best >> 32));
  if (threadIdx.x < 32) {
    const std::uint32_t key = lowest_weighing_key(max);
    if (threadIdx.x == 0) sh.weighing_key = key;
  }
  __syncthreads();
  const std::uint32_t weighing_key = sh.weighing_key;
  const auto weight_of = [&](std::uint64_t rank) -> std::uint32_t {
    const auto key = static_cast<std::uint32_t>(rank >> 32);
    return key < weighing_key ? 0u : s::weight(s::key_value(key), max);
  };
  const int top_k = row.top_k;
  const bool top_k_cuts = top_k > 0 && top_k < vocab;
  const bool top_p_cuts = row.top_p < 1.0f;

  // The buckets that matter: from the k-th best's and the lowest weighing key's up.
  const int weighing_bucket = static_cast<int>(weighing_key >> (kRankBucketShift - 32));
  Pick kth{0, 0, 0};
  int lowest_bucket = weighing_bucket;
  if (top_k_cuts) {
    kth = pick_from_top(sh.bucket_count, kBuckets, static_cast<std::uint64_t>(top_k), sh);
    if (kth.bin > lowest_bucket) lowest_bucket = kth.bin;
  }
  std::uint64_t counted = 0;
  for (int b = threadIdx.x; b < kBuckets; b += kThreads) {
    if (b >= lowest_bucket) counted += sh.bucket_count[b];
  }
  counted = block_sum(counted, sh);

  // Gathers the tokens of the buckets from `first` to `last` into the list; their count.
  const auto gather = [&](int first, int last) {
    if (threadIdx.x == 0) sh.listed = 0;
    __syncthreads();
    for_each_token(logits, 0, vocab, [&](int v, float logit, bool valid) {
      const std::uint64_t rank = valid ? rank_of(v, logit) : 0;
      const auto bucket = static_cast<int>(bucket_of(rank));
      append_to_list(rank, valid && bucket >= first && bucket <= last, sh);
    });
    __syncthreads();
    return sh.listed;
  };
  // A visit (for select_key) of the listed tokens, keyed and weighed as asked.
  const auto list_visit = [&](int listed, auto key_of, auto amount_of) {
    return [&sh, listed, key_of, amount_of](std::uint64_t lo, std::uint64_t hi, auto add) {
      for (int base = 0; base < listed; base += kThreads) {
        const int i = base + static_cast<int>(threadIdx.x);
        const bool valid = i < listed;
        const std::uint64_t key = valid ? key_of(i) : 0;
        add(key, valid && key >= lo && key <= hi ? amount_of(i) : 0u);
      }
    };
  };
  // The draw's key: the lowest id is the best.
  const auto id_key = [vocab](int v) { return static_cast<std::uint64_t>(vocab - 1 - v); };

  std::uint64_t cut = 0;  // the kept tokens: rank ≥ cut (and weighing more than 0)
  std::uint64_t total = 0;
  const std::uint64_t draw_bits = s::draw_bits(row.seed, row.position);
  std::int32_t token = 0;
  if (counted <= static_cast<std::uint64_t>(kListCapacity)) {
    // 2. Every token that can be kept fits: the rest works on the list.
    const int listed = gather(lowest_bucket, kBuckets - 1);
    const std::uint64_t list_lo = static_cast<std::uint64_t>(lowest_bucket) << kRankBucketShift;
    const auto rank_at = [&sh](int i) { return sh.list.rank[i]; };
    const auto weight_at = [&sh](int i) { return sh.list.weight[i]; };
    if (top_k_cuts && listed > top_k) {  // else every listed token is among the k best
      const auto one = [](int) { return 1u; };
      cut = select_key(list_visit(listed, rank_at, one), static_cast<std::uint64_t>(top_k), list_lo,
                       best, sh)
                .key;
    }
    for (int i = threadIdx.x; i < listed; i += kThreads) {
      const std::uint64_t rank = sh.list.rank[i];
      const std::uint32_t w = rank >= cut ? weight_of(rank) : 0u;
      sh.list.weight[i] = w;
      total += w;
    }
    total = block_sum(total, sh);  // its syncs also publish the weights
    if (top_p_cuts) {
      const Selected nucleus = select_key(list_visit(listed, rank_at, weight_at),
                                          s::nucleus_target(total, row.top_p), list_lo, best, sh);
      cut = nucleus.key;
      total = nucleus.through;
    }
    const std::uint64_t u = s::draw_point(draw_bits, total);
    const auto listed_id_key = [&sh, id_key](int i) { return id_key(s::rank_id(sh.list.rank[i])); };
    const auto kept_weight = [&sh, cut](int i) {
      return sh.list.rank[i] >= cut ? sh.list.weight[i] : 0u;
    };
    const Selected drawn = select_key(list_visit(listed, listed_id_key, kept_weight), u + 1, 0,
                                      static_cast<std::uint64_t>(vocab - 1), sh);
    token = vocab - 1 - static_cast<std::int32_t>(drawn.key);
  } else {
    // 3. Over the row. Selects within bucket b, from its gathered tokens when they fit.
    const auto select_in_bucket = [&](int b, std::uint64_t need, auto amount_of) {
      const std::uint64_t lo = static_cast<std::uint64_t>(b) << kRankBucketShift;
      const std::uint64_t hi = Min{}(best, lo | low_mask(kRankBucketShift));
      if (sh.bucket_count[b] <= static_cast<std::uint32_t>(kListCapacity)) {
        const int listed = gather(b, b);
        const auto rank_at = [&sh](int i) { return sh.list.rank[i]; };
        const auto amount_at = [&sh, amount_of](int i) { return amount_of(sh.list.rank[i]); };
        return select_key(list_visit(listed, rank_at, amount_at), need, lo, hi, sh);
      }
      const auto row_visit = [&](std::uint64_t key_lo, std::uint64_t key_hi, auto add) {
        for_each_token(logits, 0, vocab, [&](int v, float logit, bool valid) {
          const std::uint64_t rank = valid ? rank_of(v, logit) : 0;
          add(rank, valid && rank >= key_lo && rank <= key_hi ? amount_of(rank) : 0u);
        });
      };
      return select_key(row_visit, need, lo, hi, sh);
    };

    if (top_k_cuts && kth.bin >= weighing_bucket) {
      // (Below the lowest weighing bucket the k-th best weighs 0, as does every token it cuts.)
      cut = select_in_bucket(kth.bin, kth.need, [](std::uint64_t) { return 1u; }).key;
    }
    const std::uint64_t cut_k = cut;
    if (top_p_cuts) {
      for (int i = threadIdx.x; i < kBuckets; i += kThreads) sh.bucket_weight[i] = 0;
      __syncthreads();
    }
    for_each_token(logits, 0, vocab, [&](int v, float logit, bool valid) {
      const std::uint64_t rank = valid ? rank_of(v, logit) : 0;
      const std::uint32_t w = valid && rank >= cut_k ? weight_of(rank) : 0u;
      total += w;
      if (top_p_cuts) add_to_bin(sh.bucket_weight, bucket_of(rank), w, w != 0);
    });
    total = block_sum(total, sh);  // its syncs also complete the bucket weights
    if (top_p_cuts) {
      const std::uint64_t target = s::nucleus_target(total, row.top_p);
      const Pick nucleus_bucket = pick_from_top(sh.bucket_weight, kBuckets, target, sh);
      const Selected nucleus = select_in_bucket(
          nucleus_bucket.bin, nucleus_bucket.need,
          [&](std::uint64_t rank) { return rank >= cut_k ? weight_of(rank) : 0u; });
      cut = nucleus.key;
      // The buckets above, and the nucleus bucket's tokens down to the cut.
      total = target - nucleus_bucket.need + nucleus.through;
    }
    const std::uint64_t u = s::draw_point(draw_bits, total);
    // Keys lo..hi are the ids vocab − 1 − hi .. vocab − 1 − lo.
    const auto id_visit = [&](std::uint64_t lo, std::uint64_t hi, auto add) {
      const std::uint64_t last_key = static_cast<std::uint64_t>(vocab - 1);
      if (lo > last_key) return;
      const int begin = vocab - 1 - static_cast<int>(hi < last_key ? hi : last_key);
      const int end = vocab - static_cast<int>(lo);
      for_each_token(logits, begin, end, [&](int v, float logit, bool valid) {
        std::uint32_t w = 0;
        if (valid) {
          const std::uint64_t rank = rank_of(v, logit);
          if (rank >= cut) w = weight_of(rank);
        }
        add(id_key(v), w);
      });
    };
    const Selected drawn =
        select_key(id_visit, u + 1, 0, static_cast<std::uint64_t>(vocab - 1), sh);
    token = vocab - 1 - static_cast<std::int32_t>(drawn.key);
  }
  if (threadIdx.x == 0) p.token_ids[blockIdx.x] = token;
}

/// Lets the kernel have its shared memory, once a device.
void allow_shared_memory() {
  int device = 0;
  FF_CUDA_CHECK(cudaGetDevice(&device));
  static std::mutex mutex;
  static std::set<int> done;
  const std::lock_guard<std::mutex> lock(mutex);
  if (done.contains(device)) return;
  FF_CUDA_CHECK(cudaFuncSetAttribute(sample_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     kSharedBytes));
  done.insert(device);
}

}  // namespace

void sample(const TensorView& logits, const SampleRow* rows, int reqs, std::int32_t* token_ids,
            cudaStream_t stream) {
  using E = ErrorCode;
  constexpr const char* fn = "sample";
  FF_CHECK(logits.defined() && logits.is_cuda() && logits.dim() == 2 &&
               logits.dtype() == DType::kF32 && logits.stride(1) == 1,
           E::kInvalidArgument, fn, ": logits must be a 2-d f32 device tensor with unit column ",
           "stride, got ", logits.defined() ? logits.describe() : "nothing");
  FF_CHECK(logits.size(1) >= 1 && logits.size(1) < (std::int64_t(1) << 21), E::kInvalidArgument, fn,
           ": a vocabulary of ", logits.size(1), " tokens; the sampler takes 1 to 2^21 − 1");
  FF_CHECK(reqs >= 0 && reqs <= logits.size(0), E::kInvalidArgument, fn, ": ", reqs,
           " requests for logits ", logits.describe());
  FF_CHECK(reqs == 0 || (rows != nullptr && token_ids != nullptr), E::kInvalidArgument, fn,
           ": the rows or the token ids are null");
  if (reqs == 0) return;
  allow_shared_memory();
  SampleParams p;
  p.logits = logits.data_as<const float>();
  p.row_stride = logits.stride(0);
  p.vocab = static_cast<int>(logits.size(1));
  p.rows = rows;
  p.token_ids = token_ids;
  sample_kernel<<<static_cast<unsigned>(reqs), kThreads, kSharedBytes, stream>>>(p);
  FF_CHECK_LAUNCH();
}

}  // namespace freezeframe::model_kernels
