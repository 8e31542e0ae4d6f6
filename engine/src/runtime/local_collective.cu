// The collective kernel of a LocalGroup: one launch does every rank's part, reading and writing
// the ranks' buffers directly (one GPU). It runs once every rank's inputs are written and before
// any rank writes them again (LocalGroup orders the ranks' streams with events), so it waits
// for no one.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "freezeframe/core/convert.cuh"
#include "freezeframe/core/cuda_check.h"
#include "runtime/local_collective.h"

namespace freezeframe::local_group {
namespace {

using kernels::from_float;
using kernels::to_float;

constexpr int kThreads = 256;
/// The most blocks a rank's part takes (the launch has one such row per rank).
constexpr int kMaxBlocks = 128;

/// Copies `bytes` from `src` to `dst` over the grid (16 bytes at a time when both allow it).
__device__ void copy_bytes(void* dst, const void* src, std::size_t bytes) {
  if (dst == src) return;
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  const std::size_t first = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const auto aligned = [](const void* a) { return reinterpret_cast<std::uintptr_t>(a) % 16 == 0; };
  if (aligned(dst) && aligned(src) && bytes % 16 == 0) {
    for (std::size_t i = first; i < bytes / 16; i += stride) {
      static_cast<uint4*>(dst)[i] = static_cast<const uint4*>(src)[i];
    }
  } else {
    for (std::size_t i = first; i < bytes; i += stride) {
      static_cast<std::uint8_t*>(dst)[i] = static_cast<const std::uint8_t*>(src)[i];
    }
  }
}

/// Σ over ranks of element `i` of their sends, in f32.
template <typename T>
__device__ float sum_of(const Collective& c, std::size_t i) {
  float sum = 0.0f;
  for (int r = 0; r < c.world; ++r) sum += to_float(static_cast<const T*>(c.send[r])[i]);
  return sum;
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    collective_kernel(const __grid_constant__ Collective c) {
  const int rank = static_cast<int>(blockIdx.y);  // whose part this block does
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  const std::size_t first = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t bytes = c.block_bytes;
  auto* mine = static_cast<std::uint8_t*>(c.recv[rank]);
  switch (c.kind) {
    case Kind::kAllGather:  // block r of my receive is rank r's send
      for (int r = 0; r < c.world; ++r) copy_bytes(mine + r * bytes, c.send[r], bytes);
      break;
    case Kind::kAllToAll:  // block r of my receive is block `rank` of rank r's send
      for (int r = 0; r < c.world; ++r) {
        copy_bytes(mine + r * bytes, static_cast<const std::uint8_t*>(c.send[r]) + rank * bytes,
                   bytes);
      }
      break;
    case Kind::kReduceScatter:  // my receive sums block `rank` of every send
      for (std::size_t i = first; i < c.count; i += stride) {
        static_cast<T*>(c.recv[rank])[i] = from_float<T>(sum_of<T>(c, rank * c.count + i));
      }
      break;
    case Kind::kAllReduce: {
      // Each rank sums its own slice of the elements and writes it to every rank's receive:
      // only it reads or writes that slice of any buffer, so a receive may be its send.
      const std::size_t slice = (c.count + c.world - 1) / c.world;
      const std::size_t begin = slice * rank < c.count ? slice * rank : c.count;
      const std::size_t end = begin + slice < c.count ? begin + slice : c.count;
      for (std::size_t i = begin + first; i < end; i += stride) {
        const T value = from_float<T>(sum_of<T>(c, i));
        for (int r = 0; r < c.world; ++r) static_cast<T*>(c.recv[r])[i] = value;
      }
      break;
    }
  }
}

}  // namespace

void launch(const Collective& collective, cudaStream_t stream) {
  if (collective.count == 0) return;
  Collective c = collective;
  c.block_bytes = c.count * size_of(c.dtype);
  const bool reduces = c.kind == Kind::kReduceScatter || c.kind == Kind::kAllReduce;
  // A block a 1024 elements (an all-reduce's part: its slice) or 16-byte pieces, at most
  // kMaxBlocks.
  const std::size_t work = c.kind == Kind::kAllReduce ? (c.count + c.world - 1) / c.world
                           : reduces                  ? c.count
                                                      : (c.count * size_of(c.dtype) + 15) / 16;
  const std::size_t per_block = kThreads * 4;
  const int blocks =
      static_cast<int>(std::min<std::size_t>(kMaxBlocks, (work + per_block - 1) / per_block));
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(c.world));
  switch (c.dtype) {
    case DType::kBF16: collective_kernel<__nv_bfloat16><<<grid, kThreads, 0, stream>>>(c); break;
    case DType::kF16: collective_kernel<__half><<<grid, kThreads, 0, stream>>>(c); break;
    default:
      FF_CHECK(!reduces || c.dtype == DType::kF32, ErrorCode::kUnsupported, "local group: sums of ",
               name_of(c.dtype), " (f32, bf16 or f16 only)");
      collective_kernel<float><<<grid, kThreads, 0, stream>>>(c);  // copies move any dtype
      break;
  }
  FF_CHECK_LAUNCH();
}

}  // namespace freezeframe::local_group
