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
//
// The parts, each in its own header beside this one: pipeline.cuh (the shared-memory layout,
// the K/V ring's barriers and the Q/O handoffs), work.cuh (the items and the keys each row
// sees), producer.cuh (the TMA warp and the O storers), consumer.cuh (Q, S, P·V and the
// overlap), softmax.cuh (a thread's rows and the online softmax of a tile), epilogue.cuh (O
// normalised, its LSE, O out). Every part is force-inlined into this one __global__: the
// wgmma fences and waits keep their places in the instruction stream, which is what keeps
// the overlap and the wgmmas unserialised.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/sm90.cuh"
#include "prefill/padding_rows.cuh"
#include "prefill/prefill_params.h"
#include "prefill/sm90/consumer.cuh"
#include "prefill/sm90/epilogue.cuh"
#include "prefill/sm90/pipeline.cuh"
#include "prefill/sm90/prefill_sm90_params.h"
#include "prefill/sm90/producer.cuh"
#include "prefill/sm90/softmax.cuh"
#include "prefill/sm90/work.cuh"

namespace freezeframe::prefill {

template <typename T, int D, bool kOverlap>
__global__ void __launch_bounds__(384, 1)
    prefill_sm90_kernel(const __grid_constant__ Sm90Params params) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Cfg = Sm90Config<D, kOverlap>;
  namespace hw = kernels::sm90;
  const PrefillParams& p = params.p;

  extern __shared__ std::uint8_t smem_raw[];
  const sm90::SharedLayout<Cfg> smem(smem_raw);
  const sm90::Barriers<Cfg> bars(smem.barriers());

  const int tid = threadIdx.x;
  const int warpgroup = tid / 128;
  if (tid == 0) {
    bars.init();
    hw::prefetch_tensor_map(&params.k_map);
    hw::prefetch_tensor_map(&params.v_map);
    if constexpr (Cfg::kAsyncIo) hw::prefetch_tensor_map(&params.q_map);
  }

  const PlanHeader header = *reinterpret_cast<const PlanHeader*>(p.plan);
  zero_padding_rows<T, D, Cfg::kThreads>(p, header, tid);
  __syncthreads();  // the barriers are initialised
  const sm90::WorkList<Cfg::kBlockM, Cfg::kBlockN> work(p, header);

  if (warpgroup == 0) {
    hw::set_max_registers_dec<Cfg::kProducerRegisters>();
    if (tid >= 32) {
      if constexpr (Cfg::kAsyncIo) sm90::store_o_buffers<T>(p, smem, work, bars, tid - 32);
      return;
    }
    sm90::KvProducer<Cfg>{params, p, smem, work, bars, tid, params.rows_per_copy}.run();
    return;
  }

  hw::set_max_registers_inc<Cfg::kConsumerRegisters>();
  sm90::Consumer<T, D, kOverlap> consumer{p, smem, work, bars,
                                          sm90::ConsumerThread(tid, warpgroup, work.hp_shift)};
  for (int round = 0, item = work.item_of(0); item < work.items; item = work.item_of(++round)) {
    sm90::Work w;
    if (!work.work_of(item, w)) continue;
    consumer.load_q(w);
    sm90::RowState<D> rows(p, w, work, consumer.thread);
    consumer.mainloop(w, rows);
    sm90::epilogue(consumer, w, rows);
  }
#endif
}

}  // namespace freezeframe::prefill
