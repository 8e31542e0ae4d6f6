#pragma once
// The Hopper prefill attention kernel (sm_90a; FlashAttention-3's design): the same tiles,
// masks and outputs as the mma.sync kernel (prefill_kernel.cuh), with
//   - warp specialisation: warpgroup 0 produces (one warp issues the tensor memory
//     accelerator's copies of K and V tiles into a ring of Cfg::kStages stages, each lane the
//     copies of its own box; it hands its registers to the consumers), warpgroups 1 and 2
//     consume, each owning 64 of the CTA tile's 128 query rows;
//   - an mbarrier pipeline: per stage a "full" barrier for K and one for V (the copies'
//     transaction bytes complete them) and "empty" barriers the consumers arrive on once they
//     have read a stage, so later tiles land while tile n is multiplied;
//   - wgmma: S = Q·Kᵀ with both operands in shared memory (128-byte-swizzled, as TMA writes
//     them), then O += P·V with P from the registers S's accumulators became and V read
//     N-major ("transposed") from the same tile layout;
//   - with kOverlap (head sizes 128 and 256, where the producer keeps up) a consumer issues S
//     of tile n + 1 and P·V of tile n together and computes the softmax of tile n + 1 while
//     P·V runs. The two consumer warpgroups also interleave freely, one's softmax beside the
//     other's matrix products;
//   - CTAs take the plan's items (longest first) in a snake, and each item's epilogue writes O
//     into the warpgroup's rows of the Q tile, then out as whole 16-byte-per-thread rows;
//   - with Cfg::kAsyncIo (head size 128) an item's Q and O are off the consumers' path: the
//     producer brings Q by TMA once both consumers' last S of the item before has read the
//     tile, and the epilogue writes O to a buffer of its own that the producer warpgroup's
//     warps 1-3 store while the consumers start the next item.
// Keys come page by page from the paged cache (one box per page and 64-column block) or, for
// encoder attention, from the step's own rows. V rows past a sequence's end are zeroed by the
// producer before the consumers see the stage: P is 0 there, but 0 · NaN is not.

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "freezeframe/backends/dcp_shard.h"
#include "freezeframe/core/convert.cuh"
#include "kernels/mma.cuh"
#include "kernels/sm90.cuh"
#include "kernels/wgmma_ops.cuh"
#include "prefill/prefill_params.h"
#include "prefill/sm90/prefill_sm90_params.h"

namespace freezeframe::prefill {

template <typename T, int D, bool kOverlap>
__global__ void __launch_bounds__(384, 1)
    prefill_sm90_kernel(const __grid_constant__ Sm90Params params) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Cfg = Sm90Config<D, kOverlap>;
  namespace hw = kernels::sm90;
  constexpr int kBlockN = Cfg::kBlockN, kBlockM = Cfg::kBlockM, kStages = Cfg::kStages;
  constexpr int kSTiles = kBlockN / 8;  // n8 blocks of S per thread
  constexpr int kOTiles = D / 8;        // n8 blocks of O per thread
  const PrefillParams& p = params.p;

  extern __shared__ std::uint8_t smem_raw[];
  const std::uint32_t smem_base = (kernels::shared_address(smem_raw) + 1023) & ~1023u;
  std::uint8_t* smem = smem_raw + (smem_base - kernels::shared_address(smem_raw));
  const std::uint32_t s_q = smem_base;
  const std::uint32_t s_k = s_q + Cfg::kQBytes + Cfg::kOBytes;  // O (kAsyncIo) after Q
  const std::uint32_t s_v = s_k + kStages * Cfg::kTileBytes;
  const std::uint32_t bars = s_v + kStages * Cfg::kTileBytes;
  // Barriers: k_full[s], v_full[s], k_empty[s], v_empty[s], v_landed; with kAsyncIo, Q's
  // full (the producer's copy landed) and empty (both consumers' last S of the item read it),
  // O's full (both consumers wrote it) and empty (the storing warps have stored it).
  auto k_full = [&](int s) { return bars + 8 * s; };
  auto v_full = [&](int s) { return bars + 8 * (kStages + s); };
  auto k_empty = [&](int s) { return bars + 8 * (2 * kStages + s); };
  auto v_empty = [&](int s) { return bars + 8 * (3 * kStages + s); };
  const std::uint32_t v_landed = bars + 8 * (4 * kStages);
  const std::uint32_t q_full = v_landed + 8, q_empty = v_landed + 16;
  const std::uint32_t o_full = v_landed + 24, o_empty = v_landed + 32;
  constexpr int kStorers = 96;  // the producer warpgroup's warps 1-3

  const int tid = threadIdx.x;
  const int warpgroup = tid / 128;
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      hw::mbarrier_init(k_full(s), 1);
      hw::mbarrier_init(v_full(s), 1);
      hw::mbarrier_init(k_empty(s), 256);
      hw::mbarrier_init(v_empty(s), 256);
    }
    hw::mbarrier_init(v_landed, 1);
    if constexpr (Cfg::kAsyncIo) {
      hw::mbarrier_init(q_full, 1);
      hw::mbarrier_init(q_empty, 256);
      hw::mbarrier_init(o_full, 256);
      hw::mbarrier_init(o_empty, kStorers);
    }
    hw::fence_barrier_init();
    hw::prefetch_tensor_map(&params.k_map);
    hw::prefetch_tensor_map(&params.v_map);
    if constexpr (Cfg::kAsyncIo) hw::prefetch_tensor_map(&params.q_map);
  }

  const auto* plan = static_cast<const std::uint8_t*>(p.plan);
  const PlanHeader header = *reinterpret_cast<const PlanHeader*>(plan);
  const auto* tiles = reinterpret_cast<const PlanTile*>(plan + sizeof(PlanHeader));

  // Padding rows: output 0, LSE −inf.
  {
    const std::int64_t elems =
        std::int64_t(header.padding_end - header.padding_begin) * p.num_heads * D;
    for (std::int64_t i = blockIdx.x * std::int64_t(Cfg::kThreads) + tid; i < elems;
         i += std::int64_t(gridDim.x) * Cfg::kThreads) {
      const std::int64_t row = header.padding_begin + i / (std::int64_t(p.num_heads) * D);
      const int head = static_cast<int>(i / D % p.num_heads), d = static_cast<int>(i % D);
      static_cast<T*>(p.out)[row * p.out_stride_token + head * p.out_stride_head + d] =
          kernels::from_float<T>(0.0f);
      if (d == 0 && p.lse != nullptr) p.lse[row * p.lse_stride_token + head] = -INFINITY;
    }
  }
  __syncthreads();  // the barriers are initialised

  const int hp_shift = p.heads_per_tile_shift;
  const int tile_tokens = kBlockM >> hp_shift;
  const int subtiles = kPlanTileTokens / tile_tokens;
  const int head_groups = p.num_heads >> hp_shift;
  const int group_size = p.num_heads / p.num_kv_heads;
  const int planned = header.num_tiles + (p.single_token_rows ? header.num_single_tiles : 0);
  const int items = planned * subtiles * head_groups;
  const bool paged = p.block_table != nullptr;

  // The CTA's item in each round of gridDim.x items: the plan lists them longest first, and
  // taking them in a snake (forward, then backward) evens out what the rounds give each CTA.
  auto item_of = [&](int round) {
    const int b = round & 1 ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
    return round * int(gridDim.x) + b;
  };
  // One CTA tile: its request, tokens, heads and the K/V tiles it walks.
  struct Work {
    int req, q_first, q_len, tok0, tok_end, kv_len, context, head0, kv_head;
    int kv_begin, kv_end, num_kv_tiles, always_first, always_last;
  };
  auto first_key = [&](const Work& w, int tok) {
    return p.sliding_window > 0 ? max(0, w.context + tok - p.sliding_window + 1) : 0;
  };
  auto last_key = [&](const Work& w, int tok) {  // under DCP: of the rank's shard
    const int pos = w.context + tok;
    if (p.causal) {
      return p.dcp_world > 1
                 ? dcp_shard_tokens(pos + 1, p.dcp_world, p.dcp_interleave_size, p.dcp_rank) - 1
                 : pos;
    }
    return p.sliding_window > 0 ? min(w.kv_len - 1, pos + p.sliding_window - 1) : w.kv_len - 1;
  };
  auto work_of = [&](int item, Work& w) {  // false: an empty CTA tile (past the tokens)
    const int head_group = item % head_groups;
    const int rest = item / head_groups;
    const PlanTile tile = tiles[rest / subtiles];
    w.req = tile.req;
    w.q_first = p.query_start_loc[w.req];
    w.q_len = p.query_start_loc[w.req + 1] - w.q_first;
    w.tok0 = tile.token_begin + (rest % subtiles) * tile_tokens;
    if (w.tok0 >= w.q_len) return false;
    w.tok_end = min(w.q_len, w.tok0 + tile_tokens);
    w.kv_len = p.seq_lens[w.req];
    w.context = tile.context;  // the position of the request's first new token
    w.head0 = head_group << hp_shift;
    w.kv_head = w.head0 / group_size;
    w.kv_begin = first_key(w, w.tok0) / kBlockN * kBlockN;
    w.kv_end = last_key(w, w.tok_end - 1) + 1;
    w.num_kv_tiles = (w.kv_end - w.kv_begin + kBlockN - 1) / kBlockN;
    w.always_first = first_key(w, w.tok_end - 1);
    w.always_last = last_key(w, w.tok0);
    return true;
  };

  // 16-byte chunk c of row m of the Q tile (Q, and O of the epilogue without kAsyncIo),
  // 128-byte swizzled as TMA would write it; and the (token, head) of the row's query.
  constexpr int kChunks = D / 8;
  constexpr int kChunksPerThread = 64 * kChunks / 128;  // of a warpgroup's 64 rows
  auto tile_chunk = [&](int m, int c) {
    return smem + (c / 8) * kBlockM * 128 + m * 128 + (((c % 8) ^ (m & 7)) << 4);
  };
  auto row_offset = [&](const Work& w, int m, std::int64_t stride_token, std::int64_t stride_head) {
    return std::int64_t(w.q_first + w.tok0 + (m >> hp_shift)) * stride_token +
           std::int64_t(w.head0 + (m & ((1 << hp_shift) - 1))) * stride_head;
  };

  if (warpgroup == 0) {
    // ---------------- producer ----------------
    hw::set_max_registers_dec<Cfg::kProducerRegisters>();
    if (tid >= 32) {
      // Warps 1-3 (kAsyncIo): each item's O from its buffer to the output, whole 16-byte
      // chunks, while the consumers go on to the next item.
      if constexpr (Cfg::kAsyncIo) {
        std::uint32_t o_phase = 0;
        for (int round = 0, item = item_of(0); item < items; item = item_of(++round)) {
          Work w;
          if (!work_of(item, w)) continue;
          hw::mbarrier_wait(o_full, o_phase);
          o_phase ^= 1;
          T* out = static_cast<T*>(p.out);
          for (int i = tid - 32; i < kBlockM * kChunks; i += kStorers) {
            const int m = i / kChunks, c = i % kChunks;
            if (w.tok0 + (m >> hp_shift) < w.tok_end) {
              *reinterpret_cast<uint4*>(
                  out + row_offset(w, m, p.out_stride_token, p.out_stride_head) + c * 8) =
                  *reinterpret_cast<const uint4*>(tile_chunk(m, c) + Cfg::kQBytes);
            }
          }
          hw::mbarrier_arrive(o_empty);
        }
      }
      return;
    }
    const int lane = tid;
    const int rows = params.rows_per_copy;
    const std::uint32_t box_bytes = rows * 128;
    int iteration = 0, landed_phase = 0;
    std::uint32_t q_phase = 0;
    // kAsyncIo: the item's Q tile, once both consumers' last S of the item before has read it
    // (one box per 64-column block: the tile's heads × its tokens).
    auto issue_q = [&](const Work& w) {
      if constexpr (Cfg::kAsyncIo) {
        if (lane == 0) {
          hw::mbarrier_wait(q_empty, q_phase ^ 1);
          hw::mbarrier_arrive_expect_tx(q_full, Cfg::kQBytes);
          for (int c = 0; c < Cfg::kColumnBlocks; ++c) {
            hw::tma_load_3d(s_q + c * kBlockM * 128, &params.q_map, q_full, c * 64, w.head0,
                            w.q_first + w.tok0);
          }
        }
        q_phase ^= 1;
        __syncwarp();
      }
    };
    for (int round = 0, item = item_of(0); item < items; item = item_of(++round)) {
      Work w;
      if (!work_of(item, w)) continue;
      if (w.num_kv_tiles == 0) issue_q(w);
      const std::int32_t* blocks =
          paged ? p.block_table + std::int64_t(w.req) * p.block_table_stride : nullptr;
      const int kv_row0 = paged ? 0 : p.kv_start[w.req];
      for (int it = 0; it < w.num_kv_tiles; ++it, ++iteration) {
        const int stage = iteration % kStages;
        const std::uint32_t phase = (iteration / kStages) & 1;
        const int n0 = w.kv_begin + it * kBlockN;
        // Boxes that hold keys of the sequence; the rest of the tile is not read.
        const int valid = min(kBlockN, w.kv_len - n0);
        const int boxes = (valid + rows - 1) / rows;
        const std::uint32_t bytes = boxes * Cfg::kColumnBlocks * box_bytes;
        // Lane b finds box b's coordinates and issues its copies: a paged tile is up to 16
        // boxes, and one lane issuing them all one after another held the pipeline back.
        int my_c1 = 0, my_c3 = 0;
        if (lane < boxes) {
          const int key = n0 + lane * rows;
          if (paged) {
            my_c1 = key & ((1 << p.block_shift) - 1);
            my_c3 = blocks[key >> p.block_shift];
          } else {
            my_c1 = kv_row0 + key;
          }
        }
        // The copies complete `bar`'s transaction bytes, which lane 0 expects before the other
        // lanes see the stage free (__syncwarp); a copy landing before the expectation is fine,
        // as the phase cannot complete before lane 0's arrival.
        auto issue = [&](const CUtensorMap* map, std::uint32_t tile, std::uint32_t bar) {
          if (lane < boxes) {
            for (int c = 0; c < Cfg::kColumnBlocks; ++c) {
              hw::tma_load_4d(tile + c * kBlockN * 128 + lane * rows * 128, map, bar, c * 64, my_c1,
                              w.kv_head, my_c3);
            }
          }
        };
        if (lane == 0) {
          hw::mbarrier_wait(k_empty(stage), phase ^ 1);
          hw::mbarrier_arrive_expect_tx(k_full(stage), bytes);
        }
        __syncwarp();
        issue(&params.k_map, s_k + stage * Cfg::kTileBytes, k_full(stage));
        if (it == 0) issue_q(w);  // after the item's first K tile: the consumers need both
        if (lane == 0) hw::mbarrier_wait(v_empty(stage), phase ^ 1);
        __syncwarp();
        const std::uint32_t v_tile = s_v + stage * Cfg::kTileBytes;
        if (valid == kBlockN) {
          if (lane == 0) hw::mbarrier_arrive_expect_tx(v_full(stage), bytes);
          issue(&params.v_map, v_tile, v_full(stage));
        } else {
          // The tile runs past the sequence: land V, zero rows valid.., then release it.
          if (lane == 0) hw::mbarrier_arrive_expect_tx(v_landed, bytes);
          issue(&params.v_map, v_tile, v_landed);
          __syncwarp();
          hw::mbarrier_wait(v_landed, landed_phase);
          landed_phase ^= 1;
          std::uint8_t* tile = smem + (v_tile - smem_base);
          const int chunks = (kBlockN - valid) * 8;  // 16-byte chunks per column block
          for (int i = lane; i < chunks * Cfg::kColumnBlocks; i += 32) {
            const int c = i / chunks, r = valid + (i % chunks) / 8;
            *reinterpret_cast<uint4*>(tile + c * kBlockN * 128 + r * 128 + (i % 8) * 16) =
                make_uint4(0, 0, 0, 0);
          }
          hw::fence_proxy_async();
          __syncwarp();
          if (lane == 0) hw::mbarrier_arrive(v_full(stage));
        }
      }
    }
    return;
  }

  // ---------------- consumers ----------------
  hw::set_max_registers_inc<Cfg::kConsumerRegisters>();
  const int ctid = tid - 128 * warpgroup;  // thread in its warpgroup
  const int cw = warpgroup - 1;            // consumer 0 or 1: rows 64 cw ..
  const int warp = ctid / 32, lane = ctid % 32, g = lane / 4, t = lane % 4;
  const bool plain_scores = p.softcap <= 0.0f && !p.use_alibi;
  const float exp_scale = plain_scores ? p.q_scale * kernels::kLog2e : 1.0f;
  int iteration = 0;
  std::uint32_t q_phase = 0, o_phase = 0;  // kAsyncIo: the items' Q and O buffers
  for (int round = 0, item = item_of(0); item < items; item = item_of(++round)) {
    Work w;
    if (!work_of(item, w)) continue;
    // kAsyncIo: the item's last S has read Q, which the producer may then replace.
    auto q_read = [&](int it) {
      if constexpr (Cfg::kAsyncIo) {
        if (it == w.num_kv_tiles - 1) hw::mbarrier_arrive(q_empty);
      }
    };

    // Q: this warpgroup's 64 rows, swizzled as TMA would write them; rows past the tokens 0.
    // A batch's loads are all issued before its stores: interleaved, each store waited for its
    // load (13% of a 1k-token causal step, measured). With kAsyncIo the producer brings it.
    if constexpr (Cfg::kAsyncIo) {
      hw::mbarrier_wait(q_full, q_phase);
      q_phase ^= 1;
    } else {
      const T* q = static_cast<const T*>(p.q);
      // Eight loads in flight a thread; batches rolled (unrolled, the compiler keeps every
      // chunk's address from item to item and spills at head size 256).
      constexpr int kBatch = kChunksPerThread < 8 ? kChunksPerThread : 8;
#pragma unroll 1
      for (int j0 = 0; j0 < kChunksPerThread; j0 += kBatch) {
        uint4 v[kBatch];
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
          const int i = ctid + 128 * (j0 + j);
          const int m = 64 * cw + i / kChunks, c = i % kChunks;
          v[j] = make_uint4(0, 0, 0, 0);
          if (w.tok0 + (m >> hp_shift) < w.tok_end) {
            v[j] = __ldg(reinterpret_cast<const uint4*>(
                q + row_offset(w, m, p.q_stride_token, p.q_stride_head) + c * 8));
          }
        }
#pragma unroll
        for (int j = 0; j < kBatch; ++j) {
          const int i = ctid + 128 * (j0 + j);
          *reinterpret_cast<uint4*>(tile_chunk(64 * cw + i / kChunks, i % kChunks)) = v[j];
        }
      }
      hw::fence_proxy_async();
      hw::named_barrier_sync(1 + cw, 128);
    }

    // This thread's rows: r = 0, 1 → row 64 cw + 16 warp + g + 8 r of the CTA tile.
    auto tile_row = [&](int r) { return 64 * cw + 16 * warp + g + 8 * r; };
    auto row_token = [&](int r) { return w.tok0 + (tile_row(r) >> hp_shift); };
    // Per row: the keys it sees and its ALiBi slope.
    int key_lo[2], key_hi[2];
    float slope[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int tok = row_token(r);
      key_lo[r] = first_key(w, tok);
      key_hi[r] = min(last_key(w, tok), w.kv_len - 1);
      slope[r] = p.use_alibi ? p.alibi[w.head0 + (tile_row(r) & ((1 << hp_shift) - 1))] : 0.0f;
    }
    float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
    float o[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] = 0.0f;

    // S = Q·Kᵀ of the K tile in `stage`, 16 head-dim columns per wgmma; issued, not waited.
    auto issue_scores = [&](float(&s)[kBlockN / 2], int stage) {
      hw::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        const std::uint64_t a = hw::matrix_descriptor(
            s_q + (kk / 4) * kBlockM * 128 + cw * 64 * 128 + (kk % 4) * 32, 16, 1024);
        const std::uint64_t b = hw::matrix_descriptor(
            s_k + stage * Cfg::kTileBytes + (kk / 4) * kBlockN * 128 + (kk % 4) * 32, 16, 1024);
        kernels::wgmma_ss<T>(s, a, b, kk > 0, std::integral_constant<int, kBlockN>{});
      }
      hw::wgmma_commit();
    };
    // O += P·V of the V tile in `stage`, 16 keys per wgmma (V is the N-major B operand);
    // issued, not waited.
    auto issue_pv = [&](const std::uint32_t(&pa)[kBlockN / 16][4], int stage) {
      hw::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kBlockN / 16; ++kk) {
        const std::uint64_t b = hw::matrix_descriptor(s_v + stage * Cfg::kTileBytes + kk * 16 * 128,
                                                      kBlockN * 128, 1024);
        kernels::wgmma_rs<T>(o, pa[kk], b, 1, std::integral_constant<int, D>{});
      }
      hw::wgmma_commit();
    };
    // The scores of the tile at key n0 (raw, or in log2 units with a cap or ALiBi), masked where
    // the tile crosses a row's visible range; then the online softmax: the row maxima and sums
    // move on, s becomes P (in place, f32), and `correction` is what O must be scaled by before
    // it takes this tile's P·V. s[i], i = 4 j + e: row g + 8 (e / 2), key n0 + 8 j + 2 t + e % 2.
    // Each step is its own loop, so the common case (no cap, no ALiBi, no mask) runs a short
    // stretch of code.
    auto softmax = [&](float(&s)[kBlockN / 2], int n0, float(&correction)[2]) {
      const bool masked = n0 < w.always_first || n0 + kBlockN - 1 > w.always_last;
      if (!plain_scores) {
#pragma unroll
        for (int i = 0; i < kBlockN / 2; ++i) {
          const int r = (i % 4) / 2;
          const int key = n0 + 8 * (i / 4) + 2 * t + (i & 1);
          float x = s[i] * p.q_scale;
          if (p.softcap > 0.0f) x = p.softcap * tanhf(x / p.softcap);
          if (p.use_alibi) x += slope[r] * float(key - (w.context + row_token(r)));
          s[i] = x * kernels::kLog2e;
        }
      }
      if (masked) {
#pragma unroll
        for (int i = 0; i < kBlockN / 2; ++i) {
          const int r = (i % 4) / 2;
          const int key = n0 + 8 * (i / 4) + 2 * t + (i & 1);
          if (key < key_lo[r] || key > key_hi[r]) s[i] = -INFINITY;
        }
      }
      float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int i = 0; i < kBlockN / 2; ++i) {
        tile_max[(i % 4) / 2] = fmaxf(tile_max[(i % 4) / 2], s[i]);
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
        tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
        const float new_max = fmaxf(row_max[r], tile_max[r] * exp_scale);
        // A row with no visible key yet keeps max −inf: subtract 0 instead (its p are 0).
        const float base = new_max == -INFINITY ? 0.0f : new_max;
        correction[r] = kernels::fast_exp2(row_max[r] - base);
        row_max[r] = new_max;
        row_sum[r] *= correction[r];
      }
#pragma unroll
      for (int i = 0; i < kBlockN / 2; ++i) {
        const int r = (i % 4) / 2;
        const float base = row_max[r] == -INFINITY ? 0.0f : row_max[r];
        s[i] = kernels::fast_exp2(s[i] * exp_scale - base);
        row_sum[r] += s[i];
      }
    };
    // P as the A operand of P·V: per 16 keys, rows g / g + 8, keys 2t.. and 2t + 8... Written
    // only once no P·V is in flight: a register a running wgmma reads must not be redefined
    // (the compiler would serialise the wgmmas).
    auto pack_p = [](const float(&s)[kBlockN / 2], std::uint32_t(&pa)[kBlockN / 16][4]) {
#pragma unroll
      for (int j = 0; j < kSTiles; ++j) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          pa[j / 2][(j % 2) * 2 + r] = kernels::pack2<T>(s[4 * j + 2 * r], s[4 * j + 2 * r + 1]);
        }
      }
    };
    auto rescale_o = [&](const float(&correction)[2]) {
      if (__any_sync(0xffffffffu, correction[0] != 1.0f || correction[1] != 1.0f)) {
#pragma unroll
        for (int j = 0; j < kOTiles; ++j) {
          o[4 * j + 0] *= correction[0];
          o[4 * j + 1] *= correction[0];
          o[4 * j + 2] *= correction[1];
          o[4 * j + 3] *= correction[1];
        }
      }
    };

    // O += P·V of the V tile in `stage` with nothing else in flight, waited for; the stage is
    // then released.
    auto pv_alone = [&](std::uint32_t(&pa)[kBlockN / 16][4], int stage, std::uint32_t phase) {
      hw::mbarrier_wait(v_full(stage), phase);
      hw::fence_registers(o);
      issue_pv(pa, stage);
      hw::wgmma_wait<0>();
      hw::fence_registers(o);
      hw::fence_registers(pa);
      hw::mbarrier_arrive(v_empty(stage));
    };

    // Without kOverlap, each tile in turn: S, its softmax, P·V. With it, FlashAttention-3's
    // overlap inside the warpgroup: S of tile n + 1 and P·V of tile n are in flight together,
    // so the softmax of tile n + 1 runs while the tensor cores multiply P·V of tile n; the
    // first tile's S is waited for alone, the last tile's P·V after the loop.
    if constexpr (!kOverlap) {
      for (int it = 0; it < w.num_kv_tiles; ++it, ++iteration) {
        const int stage = iteration % kStages;
        const std::uint32_t phase = (iteration / kStages) & 1;
        float s[kBlockN / 2];
        std::uint32_t pa[kBlockN / 16][4];
        float correction[2];
        hw::mbarrier_wait(k_full(stage), phase);
        issue_scores(s, stage);
        hw::wgmma_wait<0>();
        hw::fence_registers(s);
        hw::mbarrier_arrive(k_empty(stage));
        q_read(it);
        softmax(s, w.kv_begin + it * kBlockN, correction);
        rescale_o(correction);
        pack_p(s, pa);
        pv_alone(pa, stage, phase);
      }
    } else if (w.num_kv_tiles > 0) {
      std::uint32_t pa[kBlockN / 16][4];
      float correction[2];
      int stage = iteration % kStages;
      std::uint32_t phase = (iteration / kStages) & 1;
      {
        float s[kBlockN / 2];
        hw::mbarrier_wait(k_full(stage), phase);
        issue_scores(s, stage);
        hw::wgmma_wait<0>();
        hw::fence_registers(s);
        hw::mbarrier_arrive(k_empty(stage));
        q_read(0);
        softmax(s, w.kv_begin, correction);  // O is 0: no correction
        pack_p(s, pa);
      }
      ++iteration;
      for (int it = 1; it < w.num_kv_tiles; ++it, ++iteration) {
        const int prev_stage = stage;
        const std::uint32_t prev_phase = phase;
        stage = iteration % kStages;
        phase = (iteration / kStages) & 1;
        // O and P are final before the first wgmma of the pair: an instruction writing them
        // between the two would make the compiler serialise the wgmmas.
        hw::fence_registers(o);
        hw::fence_registers(pa);
        float s[kBlockN / 2];
        hw::mbarrier_wait(k_full(stage), phase);
        issue_scores(s, stage);
        hw::mbarrier_wait(v_full(prev_stage), prev_phase);
        issue_pv(pa, prev_stage);
        hw::wgmma_wait<1>();  // S of this tile; P·V of the last one may still run
        hw::fence_registers(s);
        hw::mbarrier_arrive(k_empty(stage));
        q_read(it);
        softmax(s, w.kv_begin + it * kBlockN, correction);
        hw::wgmma_wait<0>();
        hw::fence_registers(o);
        hw::fence_registers(pa);
        hw::mbarrier_arrive(v_empty(prev_stage));
        pack_p(s, pa);
        rescale_o(correction);
      }
      pv_alone(pa, stage, phase);
    }
    if (w.num_kv_tiles == 0) q_read(-1);  // no S read it

    // Normalise this thread's two rows into shared memory (kAsyncIo: the O buffer, once the
    // storers are done with the item before), and their LSE.
    T* out = static_cast<T*>(p.out);
    std::uint8_t* o_tile = smem;
    if constexpr (Cfg::kAsyncIo) {
      hw::mbarrier_wait(o_empty, o_phase ^ 1);
      o_tile = smem + Cfg::kQBytes;
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float sum = row_sum[r];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const int m = tile_row(r), tok = row_token(r);
      if (tok >= w.tok_end) continue;
      const int head = w.head0 + (m & ((1 << hp_shift) - 1));
      const std::int64_t row = w.q_first + tok;
      const float inv = sum > 0.0f ? p.v_scale / sum : 0.0f;
      // Into this warpgroup's rows of the Q tile (its last S has been read), laid out as Q, so
      // the swizzle puts a warp's eight rows in distinct banks. Chunk j sits at the row's
      // chunk-0 position XOR j % 8: one base register (tile_chunk() per chunk spilled).
      const std::uint32_t row_at = m * 128 + ((m & 7) << 4) + 4 * t;
#pragma unroll
      for (int j = 0; j < kOTiles; ++j) {
        *reinterpret_cast<std::uint32_t*>(o_tile + (row_at ^ ((j % 8) << 4)) +
                                          (j / 8) * kBlockM * 128) =
            kernels::pack2<T>(o[4 * j + 2 * r] * inv, o[4 * j + 2 * r + 1] * inv);
      }
      if (p.lse != nullptr && t == 0) {
        p.lse[row * p.lse_stride_token + head] =
            sum > 0.0f ? (row_max[r] + log2f(sum)) * kernels::kLn2 : -INFINITY;
      }
    }
    if constexpr (Cfg::kAsyncIo) {
      hw::mbarrier_arrive(o_full);  // the storers take it from here
      o_phase ^= 1;
      continue;
    }
    // The warpgroup's 64 rows out of shared memory, 16 bytes a thread: a quarter-warp writes a
    // whole row, where the registers' layout stored 4 bytes of 8 rows at a time (measured 7% of
    // a 1k-token causal step).
    // Rolled: unrolled, the compiler keeps every chunk's address from item to item, and spills.
    hw::named_barrier_sync(1 + cw, 128);
#pragma unroll 1
    for (int j = 0; j < kChunksPerThread; ++j) {
      const int i = ctid + 128 * j;
      const int m = 64 * cw + i / kChunks, c = i % kChunks;
      if (w.tok0 + (m >> hp_shift) < w.tok_end) {
        *reinterpret_cast<uint4*>(out + row_offset(w, m, p.out_stride_token, p.out_stride_head) +
                                  c * 8) = *reinterpret_cast<const uint4*>(tile_chunk(m, c));
      }
    }
    // Q is rewritten by the next tile only after every warp of this warpgroup is done with it.
    hw::named_barrier_sync(1 + cw, 128);
  }
#endif
}

}  // namespace freezeframe::prefill
