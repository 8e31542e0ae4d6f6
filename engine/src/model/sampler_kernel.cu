// The on-device sampler: one CTA of 1024 threads per request, over its logits row (up to a
// vocabulary of ~152k), in passes that each read the row:
//   1. the best token by rank (value, then the lower id): greedy's answer, and the largest value
//      the weights are taken against;
//   2. top-k: the k-th best rank by radix selection, 8 bits at a time from the top, counting
//      the tokens under each digit (CUB's BlockScan finds the digit); it stops as soon as every
//      token under the prefix so far is kept, usually after 3 or 4 digits;
//   3. top-p: the same selection weighing each token by its integer weight (sampling_math.h)
//      instead of counting it, to the nucleus target;
//   4. the draw: a block-wide scan of the kept weights in id order, tile by tile, until the
//      running sum passes the drawn point.
// Every sum is a 64-bit integer, so the order the threads add in does not change the token,
// and sample_reference (a sort and a walk) gives the same one.

#include <cstdint>
#include <cstdlib>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <string_view>

#include "freezeframe/core/error.h"
#include "model/sampler_kernel.h"
#include "model/sampling_math.h"

namespace freezeframe::model_kernels {
namespace {

namespace s = sampling;
constexpr int kThreads = s::kThreads;

using BlockReduce = cub::BlockReduce<std::uint64_t, kThreads>;
using BlockScan = cub::BlockScan<std::uint64_t, kThreads>;

struct SampleParams {
  const float* logits;
  std::int64_t row_stride;
  int vocab;
  const SampleRow* rows;
  std::int32_t* token_ids;
};

struct Shared {
  union {
    typename BlockReduce::TempStorage reduce;
    typename BlockScan::TempStorage scan;
  } cub;
  std::uint64_t hist[256];
  std::uint64_t value;  // a block-wide result handed to every thread
  std::uint64_t bucket_need, bucket_amount;
  int bucket;
  std::int32_t token;
};

struct Max {
  __device__ std::uint64_t operator()(std::uint64_t a, std::uint64_t b) const {
    return a > b ? a : b;
  }
};

// A threshold on ranks: a token is kept when the top `bits` bits of its rank are at least
// `prefix` (bits 0 keeps every token).
struct RankCut {
  std::uint64_t prefix = 0;
  int bits = 0;
  __device__ bool keeps(std::uint64_t rank) const {
    return bits == 0 || (rank >> (64 - bits)) >= prefix;
  }
  __device__ bool under(std::uint64_t rank) const {
    return bits == 0 || (rank >> (64 - bits)) == prefix;
  }
};

// The block's maximum or sum of one value per thread, in every thread.
__device__ std::uint64_t broadcast(std::uint64_t v, Shared& sh) {
  if (threadIdx.x == 0) sh.value = v;  // the reductions leave their result in thread 0
  __syncthreads();
  v = sh.value;
  __syncthreads();  // the storage and sh.value may be reused
  return v;
}
__device__ std::uint64_t block_max(std::uint64_t v, Shared& sh) {
  return broadcast(BlockReduce(sh.cub.reduce).Reduce(v, Max{}), sh);
}
__device__ std::uint64_t block_sum(std::uint64_t v, Shared& sh) {
  return broadcast(BlockReduce(sh.cub.reduce).Sum(v), sh);
}

// The cut keeping the fewest best tokens whose amounts reach `need` (≥ 1, at most the total
// amount): radix selection over the 64-bit ranks, best digit first. `amount(rank)` is a token's
// count or weight; `rank_of(v)` the rank of token v.
template <typename RankOf, typename Amount>
__device__ RankCut select_cut(int vocab, std::uint64_t need, RankOf rank_of, Amount amount,
                              Shared& sh) {
  RankCut cut;
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += kThreads) sh.hist[i] = 0;
    __syncthreads();
    for (int v = threadIdx.x; v < vocab; v += kThreads) {
      const std::uint64_t rank = rank_of(v);
      if (!cut.under(rank)) continue;
      const std::uint64_t a = amount(rank);
      if (a != 0) {
        atomicAdd(reinterpret_cast<unsigned long long*>(&sh.hist[(rank >> shift) & 255]),
                  static_cast<unsigned long long>(a));
      }
    }
    __syncthreads();
    // Digits best first: thread t holds digit 255 − t. Exactly one digit with an amount has
    // the need inside its span of the running sum.
    const std::uint64_t mine = threadIdx.x < 256 ? sh.hist[255 - threadIdx.x] : 0;
    std::uint64_t before = 0;
    BlockScan(sh.cub.scan).ExclusiveSum(mine, before);
    if (threadIdx.x < 256 && before < need && need <= before + mine) {
      sh.bucket = 255 - static_cast<int>(threadIdx.x);
      sh.bucket_need = need - before;
      sh.bucket_amount = mine;
    }
    __syncthreads();
    cut.prefix = (cut.prefix << 8) | static_cast<std::uint64_t>(sh.bucket);
    cut.bits += 8;
    need = sh.bucket_need;
    // Every token under the prefix is needed: the prefix is the cut.
    const bool whole = sh.bucket_amount == need;
    __syncthreads();  // every thread has read the digit before the next pass writes it
    if (whole) break;
  }
  return cut;
}

__global__ void __launch_bounds__(kThreads) sample_kernel(const __grid_constant__ SampleParams p) {
  __shared__ Shared sh;
  const SampleRow row = p.rows[blockIdx.x];
  if (row.active == 0) {
    if (threadIdx.x == 0) p.token_ids[blockIdx.x] = -1;
    return;
  }
  const float* logits = p.logits + static_cast<std::int64_t>(blockIdx.x) * p.row_stride;
  const int vocab = p.vocab;
  const float temperature = row.temperature;
  const auto rank_of = [&](int v) {
    const float l = logits[v];
    const float x = temperature == 0.0f ? s::canonical(l) : s::scaled(l, temperature);
    return s::rank_key(x, v);
  };

  // 1. The best token.
  std::uint64_t best = 0;
  for (int v = threadIdx.x; v < vocab; v += kThreads) best = Max{}(best, rank_of(v));
  best = block_max(best, sh);
  if (temperature == 0.0f || row.top_k == 1) {
    if (threadIdx.x == 0) p.token_ids[blockIdx.x] = s::rank_id(best);
    return;
  }
  const float max = s::key_value(static_cast<std::uint32_t>(best >> 32));

  // 2. top-k.
  RankCut top_k;
  if (row.top_k > 0 && row.top_k < vocab) {
    top_k = select_cut(
        vocab, static_cast<std::uint64_t>(row.top_k), rank_of,
        [](std::uint64_t) { return std::uint64_t(1); }, sh);
  }
  const auto weight_in = [&](std::uint64_t rank, const RankCut& nucleus) -> std::uint64_t {
    if (!top_k.keeps(rank) || !nucleus.keeps(rank)) return 0;
    return s::weight(s::key_value(static_cast<std::uint32_t>(rank >> 32)), max);
  };

  // 3. top-p, over the top-k tokens' weights.
  RankCut nucleus;
  if (row.top_p < 1.0f) {
    std::uint64_t total = 0;
    for (int v = threadIdx.x; v < vocab; v += kThreads) total += weight_in(rank_of(v), RankCut{});
    total = block_sum(total, sh);
    nucleus = select_cut(
        vocab, s::nucleus_target(total, row.top_p), rank_of,
        [&](std::uint64_t rank) { return weight_in(rank, RankCut{}); }, sh);
  }

  // 4. The draw, in id order over the kept weights.
  std::uint64_t total = 0;
  for (int v = threadIdx.x; v < vocab; v += kThreads) total += weight_in(rank_of(v), nucleus);
  total = block_sum(total, sh);
  const std::uint64_t u = s::draw_point(s::draw_bits(row.seed, row.position), total);
  if (threadIdx.x == 0) sh.token = s::rank_id(best);  // the walk always finds one
  __syncthreads();
  std::uint64_t carry = 0;  // the kept weight of the tiles before this one
  for (int base = 0; base < vocab; base += kThreads) {
    const int v = base + static_cast<int>(threadIdx.x);
    const std::uint64_t w = v < vocab ? weight_in(rank_of(v), nucleus) : 0;
    std::uint64_t before = 0, tile = 0;
    BlockScan(sh.cub.scan).ExclusiveSum(w, before, tile);
    if (w != 0 && carry + before <= u && u < carry + before + w) sh.token = v;
    carry += tile;
    __syncthreads();  // the scan's storage is reused by the next tile
    if (carry > u) break;
  }
  if (threadIdx.x == 0) p.token_ids[blockIdx.x] = sh.token;
}

}  // namespace

SamplerKernel parse_sampler_kernel(std::string_view name) {
  FF_CHECK(name == "radix" || name == "buckets", ErrorCode::kInvalidArgument,
           "FREEZEFRAME_SAMPLER_KERNEL=", name, ": the sampler kernels are radix and buckets");
  return name == "buckets" ? SamplerKernel::kBuckets : SamplerKernel::kRadix;
}

SamplerKernel sampler_kernel_from_environment() {
  static const SamplerKernel kernel = [] {
    const char* v = std::getenv("FREEZEFRAME_SAMPLER_KERNEL");
    return parse_sampler_kernel(v == nullptr ? "radix" : v);
  }();
  return kernel;
}

void sample(const TensorView& logits, const SampleRow* rows, int reqs, std::int32_t* token_ids,
            cudaStream_t stream, SamplerKernel kernel) {
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
  if (kernel == SamplerKernel::kBuckets) {
    detail::launch_bucket_sampler(logits, rows, reqs, token_ids, stream);
    return;
  }
  SampleParams p;
  p.logits = logits.data_as<const float>();
  p.row_stride = logits.stride(0);
  p.vocab = static_cast<int>(logits.size(1));
  p.rows = rows;
  p.token_ids = token_ids;
  sample_kernel<<<static_cast<unsigned>(reqs), kThreads, 0, stream>>>(p);
  FF_CHECK_LAUNCH();
}

}  // namespace freezeframe::model_kernels
