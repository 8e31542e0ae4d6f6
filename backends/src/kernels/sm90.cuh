#pragma once
// Hopper (sm_90a) building blocks of the warp-specialised prefill kernel: mbarriers, tensor
// memory accelerator (TMA) copies, wgmma matrix descriptors and fences, named barriers and
// register reallocation. Each is one PTX instruction (PTX ISA 8.0+); the comments say what
// the kernel relies on.

#include <cuda.h>

#include <cstdint>

namespace freezeframe::kernels::sm90 {

// --- mbarriers (in shared memory, 8 bytes each) ---

__device__ __forceinline__ void mbarrier_init(std::uint32_t bar, std::uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(arrivals));
}
/// Makes initialised barriers visible to the async proxy (TMA) before first use.
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
/// One arrival that also tells the barrier to expect `bytes` more from async copies.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(std::uint32_t bar, std::uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbarrier_arrive(std::uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
/// Waits until the phase of parity `parity` has completed.
__device__ __forceinline__ void mbarrier_wait(std::uint32_t bar, std::uint32_t parity) {
  std::uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

// --- TMA ---

/// A 4-d box of `map` at coordinates (c0 innermost) into shared memory at `dst`; its bytes
/// complete a transaction of barrier `bar`.
__device__ __forceinline__ void tma_load_4d(std::uint32_t dst, const CUtensorMap* map,
                                            std::uint32_t bar, int c0, int c1, int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes "
      "[%0], [%1, {%3, %4, %5, %6}], [%2];\n" ::"r"(dst),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}
/// The same for a 3-d box.
__device__ __forceinline__ void tma_load_3d(std::uint32_t dst, const CUtensorMap* map,
                                            std::uint32_t bar, int c0, int c1, int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes "
      "[%0], [%1, {%3, %4, %5}], [%2];\n" ::"r"(dst),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}
__device__ __forceinline__ void prefetch_tensor_map(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<std::uint64_t>(map)) : "memory");
}
/// Orders this thread's generic-proxy shared-memory writes before later async-proxy reads
/// (wgmma operands, TMA).
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// --- wgmma ---

/// A shared-memory matrix descriptor for a 128-byte-swizzled operand (the layout TMA's
/// SWIZZLE_128B writes: 8 rows of 128 bytes per 1024-byte atom, 16-byte chunk c of row r at
/// chunk c ^ r). `lead` and `stride` are the leading and stride byte offsets: for a K-major
/// operand the stride is the step between 8-row groups (the leading one is unused); for an
/// N-major one the leading is the step between 64-element column blocks and the stride the
/// step between groups of 8 rows along K.
__device__ __forceinline__ std::uint64_t matrix_descriptor(std::uint32_t address,
                                                           std::uint32_t lead,
                                                           std::uint32_t stride) {
  return static_cast<std::uint64_t>((address & 0x3ffff) >> 4) |
         static_cast<std::uint64_t>((lead & 0x3ffff) >> 4) << 16 |
         static_cast<std::uint64_t>((stride & 0x3ffff) >> 4) << 32 |
         static_cast<std::uint64_t>(1) << 62;  // 128-byte swizzle
}
/// Before the first wgmma of a batch: orders register and shared-memory operands.
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
/// Waits until at most N committed wgmma groups of this warpgroup are in flight.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/// Keeps the compiler from moving accesses of an accumulator across wgmma_wait: wgmma writes
/// it asynchronously.
template <int N>
__device__ __forceinline__ void fence_registers(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
/// The same for a register A operand (packed 16-bit pairs): a wgmma in flight still reads it,
/// so its registers must not be reused before wgmma_wait.
template <int N, int M>
__device__ __forceinline__ void fence_registers(std::uint32_t (&a)[N][M]) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
#pragma unroll
    for (int j = 0; j < M; ++j) asm volatile("" : "+r"(a[i][j])::"memory");
  }
}

// --- warpgroups ---

/// Synchronises the `threads` threads that use named barrier `id` (1-15; 0 is __syncthreads).
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
/// Hands registers back (producer) or takes them (consumers): a warpgroup-wide instruction.
template <int kRegisters>
__device__ __forceinline__ void set_max_registers_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}
template <int kRegisters>
__device__ __forceinline__ void set_max_registers_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

}  // namespace freezeframe::kernels::sm90
