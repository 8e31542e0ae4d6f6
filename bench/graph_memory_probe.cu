// graph_memory_probe: what CUDA graph executables cost on this device, the figures behind the
// engine's graph-memory budget (docs/PERFORMANCE.md): device memory per executable and per
// node (free memory before and after instantiating and uploading copies of one graph, kept
// alive so the driver cannot reuse their memory), for our kind of kernel node, a kernel with
// 1 KiB of parameters, cuBLAS GEMM nodes and memset nodes; and the host time of
// cudaGraphExecUpdate, alone and followed by a launch.
//
// usage: graph_memory_probe

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <vector>

namespace {

#define CHECK(x)                                                              \
  do {                                                                        \
    const auto status_ = (x);                                                 \
    if (status_ != 0) {                                                       \
      std::fprintf(stderr, "%s:%d: %s failed (%d)\n", __FILE__, __LINE__, #x, \
                   static_cast<int>(status_));                                \
      std::exit(1);                                                           \
    }                                                                         \
  } while (0)

__global__ void add_one(float* p) { p[threadIdx.x] += 1.0f; }
struct KiB {
  float values[256];
};
__global__ void add_param(float* p, KiB k) { p[threadIdx.x] += k.values[threadIdx.x]; }

std::size_t free_bytes() {
  std::size_t free = 0, total = 0;
  CHECK(cudaMemGetInfo(&free, &total));
  return free;
}

cudaGraph_t capture(cudaStream_t stream, const std::function<void()>& work) {
  cudaGraph_t graph = nullptr;
  CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  work();
  CHECK(cudaStreamEndCapture(stream, &graph));
  return graph;
}

double us_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

int main() {
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  float* data;
  CHECK(cudaMalloc(&data, 64 << 20));
  cublasHandle_t blas;
  CHECK(cublasCreate(&blas));
  CHECK(cublasSetStream(blas, stream));
  void* workspace;
  CHECK(cudaMalloc(&workspace, 32 << 20));
  CHECK(cublasSetWorkspace(blas, workspace, 32 << 20));
  __nv_bfloat16 *a, *b, *c;
  CHECK(cudaMalloc(&a, 4096 * 4096 * 2));
  CHECK(cudaMalloc(&b, 512 * 4096 * 2));
  CHECK(cudaMalloc(&c, 512 * 4096 * 2));
  const float one = 1.0f, zero = 0.0f;
  auto gemm = [&](int m) {  // a decode-step projection: [m, 4096] × [4096, 4096]ᵀ
    CHECK(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, 4096, m, 4096, &one, a, CUDA_R_16BF, 4096, b,
                       CUDA_R_16BF, 4096, &zero, c, CUDA_R_16BF, 4096, CUBLAS_COMPUTE_32F,
                       CUBLAS_GEMM_DEFAULT));
  };
  for (const int m : {1, 64, 256}) gemm(m);  // cuBLAS's lazy set-up, outside the captures
  CHECK(cudaStreamSynchronize(stream));

  std::vector<cudaGraphExec_t> alive;  // never destroyed: freed memory would be reused
  std::printf("%-30s %6s %6s %12s %10s\n", "graph", "nodes", "execs", "KiB/exec", "KiB/node");
  auto measure = [&](const char* name, int execs, const std::function<void()>& work) {
    cudaGraph_t graph = capture(stream, work);
    std::size_t nodes = 0;
    CHECK(cudaGraphGetNodes(graph, nullptr, &nodes));
    CHECK(cudaDeviceSynchronize());
    const std::size_t before = free_bytes();
    for (int i = 0; i < execs; ++i) {
      cudaGraphExec_t exec;
      CHECK(cudaGraphInstantiate(&exec, graph, 0));
      CHECK(cudaGraphUpload(exec, stream));
      alive.push_back(exec);
    }
    CHECK(cudaDeviceSynchronize());
    const double kib = double(before - free_bytes()) / execs / 1024;
    std::printf("%-30s %6zu %6d %12.1f %10.2f\n", name, nodes, execs, kib, kib / nodes);
    CHECK(cudaGraphDestroy(graph));
  };
  measure("1 kernel", 512, [&] { add_one<<<1, 32, 0, stream>>>(data); });
  measure("16 kernels", 256, [&] {
    for (int i = 0; i < 16; ++i) add_one<<<1, 32, 0, stream>>>(data);
  });
  measure("256 kernels", 64, [&] {
    for (int i = 0; i < 256; ++i) add_one<<<1, 32, 0, stream>>>(data);
  });
  measure("256 kernels, 1 KiB params", 64, [&] {
    const KiB k{};
    for (int i = 0; i < 256; ++i) add_param<<<1, 32, 0, stream>>>(data, k);
  });
  for (const int m : {1, 64, 256}) {
    char name[64];
    std::snprintf(name, sizeof name, "64 cuBLAS GEMMs, M = %d", m);
    measure(name, 64, [&] {
      for (int i = 0; i < 64; ++i) gemm(m);
    });
  }
  measure("64 memsets", 64, [&] {
    for (int i = 0; i < 64; ++i) CHECK(cudaMemsetAsync(data, 0, 4096, stream));
  });

  // Updating one executable between two graphs of the same shape (other grids and values).
  std::printf("\n%6s %14s %22s\n", "nodes", "update us", "update + launch us");
  for (const int n : {13, 40, 455}) {
    cudaGraph_t g1 = capture(stream, [&] {
      for (int i = 0; i < n; ++i) add_one<<<1, 32, 0, stream>>>(data);
    });
    cudaGraph_t g2 = capture(stream, [&] {
      for (int i = 0; i < n; ++i) add_one<<<2, 32, 0, stream>>>(data + 4096);
    });
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, g1, 0));
    CHECK(cudaGraphUpload(exec, stream));
    const int rounds = n > 100 ? 100 : 1000;
    cudaGraphExecUpdateResultInfo info;
    auto t = std::chrono::steady_clock::now();
    for (int i = 0; i < rounds; ++i) CHECK(cudaGraphExecUpdate(exec, i % 2 ? g1 : g2, &info));
    const double update = us_since(t) / rounds;
    t = std::chrono::steady_clock::now();
    for (int i = 0; i < rounds; ++i) {
      CHECK(cudaGraphExecUpdate(exec, i % 2 ? g1 : g2, &info));
      CHECK(cudaGraphLaunch(exec, stream));
    }
    const double with_launch = us_since(t) / rounds;
    CHECK(cudaStreamSynchronize(stream));
    std::printf("%6d %14.2f %22.2f\n", n, update, with_launch);
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(g1));
    CHECK(cudaGraphDestroy(g2));
  }
  return 0;
}
