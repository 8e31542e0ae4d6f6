#include "freezeframe/core/cuda_handles.h"

#include <atomic>
#include <cstring>
#include <utility>

#include "freezeframe/core/cuda_check.h"

namespace freezeframe {

namespace {
std::atomic<std::uint64_t> g_device_allocations{0};
std::atomic<std::uint64_t> g_device_bytes{0};
std::atomic<std::uint64_t> g_pinned_allocations{0};
std::atomic<std::uint64_t> g_pinned_bytes{0};
}  // namespace

AllocationCounters allocation_counters() {
  return {g_device_allocations.load(), g_device_bytes.load(), g_pinned_allocations.load(),
          g_pinned_bytes.load()};
}

// --- Stream ---
Stream Stream::create() {
  int device = 0;
  FF_CUDA_CHECK(cudaGetDevice(&device));
  cudaStream_t stream = nullptr;
  FF_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  return Stream(stream, device, true);
}

Stream Stream::borrow(cudaStream_t stream, int device) { return Stream(stream, device, false); }

Stream::Stream(Stream&& other) noexcept
    : stream_(std::exchange(other.stream_, nullptr)),
      device_(other.device_),
      owned_(std::exchange(other.owned_, false)) {}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    reset();
    stream_ = std::exchange(other.stream_, nullptr);
    device_ = other.device_;
    owned_ = std::exchange(other.owned_, false);
  }
  return *this;
}

Stream::~Stream() { reset(); }

void Stream::reset() noexcept {
  if (owned_ && stream_ != nullptr) FF_CUDA_WARN(cudaStreamDestroy(stream_));
  stream_ = nullptr;
  owned_ = false;
}

void Stream::synchronize() const { FF_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

// --- Event ---
Event::Event(bool timing) {
  FF_CUDA_CHECK(
      cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
}

Event::Event(Event&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    reset();
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}

Event::~Event() { reset(); }

void Event::reset() noexcept {
  if (event_ != nullptr) FF_CUDA_WARN(cudaEventDestroy(event_));
  event_ = nullptr;
}

void Event::record(cudaStream_t stream) { FF_CUDA_CHECK(cudaEventRecord(event_, stream)); }
void Event::record_external(cudaStream_t stream) {
  // The flag is refused outside a capture.
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  FF_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  if (status == cudaStreamCaptureStatusActive) {
    FF_CUDA_CHECK(cudaEventRecordWithFlags(event_, stream, cudaEventRecordExternal));
  } else {
    record(stream);
  }
}
void Event::synchronize() const { FF_CUDA_CHECK(cudaEventSynchronize(event_)); }

float Event::elapsed_ms_since(const Event& start) const {
  float ms = 0;
  FF_CUDA_CHECK(cudaEventElapsedTime(&ms, start.event_, event_));
  return ms;
}

// --- DeviceBuffer ---
DeviceBuffer::DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  FF_CUDA_CHECK(cudaMalloc(&data_, bytes));
  g_device_allocations.fetch_add(1);
  g_device_bytes.fetch_add(bytes);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() { reset(); }

void DeviceBuffer::reset() noexcept {
  if (data_ != nullptr) FF_CUDA_WARN(cudaFree(data_));
  data_ = nullptr;
  bytes_ = 0;
}

// --- PinnedBuffer ---
PinnedBuffer::PinnedBuffer(std::size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  FF_CUDA_CHECK(cudaMallocHost(&data_, bytes));
  std::memset(data_, 0, bytes);
  g_pinned_allocations.fetch_add(1);
  g_pinned_bytes.fetch_add(bytes);
}

PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

PinnedBuffer::~PinnedBuffer() { reset(); }

void PinnedBuffer::reset() noexcept {
  if (data_ != nullptr) FF_CUDA_WARN(cudaFreeHost(data_));
  data_ = nullptr;
  bytes_ = 0;
}

}  // namespace freezeframe
