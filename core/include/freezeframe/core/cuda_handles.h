#pragma once
// Move-only owners of CUDA streams, events, device memory and pinned host memory. Destructors
// never throw (they warn); every allocation is counted so tests can prove a steady state
// allocates nothing.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace freezeframe {

/// A CUDA stream, owned (created here, destroyed with this object) or borrowed (wrapping a
/// stream the embedding server gave us). Remembers the device it belongs to.
class Stream {
 public:
  /// Creates a non-blocking stream on the current device.
  static Stream create();
  /// Wraps an existing stream without taking ownership.
  static Stream borrow(cudaStream_t stream, int device);

  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream();

  [[nodiscard]] cudaStream_t get() const { return stream_; }
  [[nodiscard]] int device() const { return device_; }
  [[nodiscard]] bool owned() const { return owned_; }
  void synchronize() const;

 private:
  Stream(cudaStream_t stream, int device, bool owned)
      : stream_(stream), device_(device), owned_(owned) {}
  void reset() noexcept;

  cudaStream_t stream_ = nullptr;
  int device_ = 0;
  bool owned_ = false;
};

/// A CUDA event (timing enabled when asked), destroyed on release.
class Event {
 public:
  explicit Event(bool timing = false);
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event();

  void record(cudaStream_t stream);
  /// Records like record(); inside a stream capture it becomes an event record node, so every
  /// replay of the graph records the event (a plain record there only orders captured work).
  void record_external(cudaStream_t stream);
  void synchronize() const;
  /// Milliseconds between `start` (recorded earlier) and this event.
  [[nodiscard]] float elapsed_ms_since(const Event& start) const;
  [[nodiscard]] cudaEvent_t get() const { return event_; }

 private:
  void reset() noexcept;
  cudaEvent_t event_ = nullptr;
};

/// Device memory from cudaMalloc. Move-only; no implicit copies.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes);
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  [[nodiscard]] void* data() const { return data_; }
  [[nodiscard]] std::size_t bytes() const { return bytes_; }

 private:
  void reset() noexcept;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

/// Page-locked host memory (cudaMallocHost), zero-filled, for staging asynchronous copies.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(std::size_t bytes);
  PinnedBuffer(PinnedBuffer&& other) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer();

  [[nodiscard]] void* data() const { return data_; }
  [[nodiscard]] std::size_t bytes() const { return bytes_; }

 private:
  void reset() noexcept;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

/// Counts of allocations made through DeviceBuffer and PinnedBuffer since process start.
struct AllocationCounters {
  std::uint64_t device_allocations = 0;
  std::uint64_t device_bytes = 0;
  std::uint64_t pinned_allocations = 0;
  std::uint64_t pinned_bytes = 0;
};
[[nodiscard]] AllocationCounters allocation_counters();

}  // namespace freezeframe
