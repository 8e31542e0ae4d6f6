#pragma once
// BlockSize: a KV-cache block size and the arithmetic the step path does with it for every
// request and token of every step. Block sizes are powers of two (the spec insists), so shifts
// and masks replace divisions; any other size still works, by division.

#include <bit>
#include <cstdint>

namespace freezeframe {

class BlockSize {
 public:
  constexpr explicit BlockSize(int size)
      : size_(size),
        shift_(size > 0 && (size & (size - 1)) == 0 ? std::countr_zero(static_cast<unsigned>(size))
                                                    : -1) {}

  [[nodiscard]] constexpr int size() const { return size_; }
  /// Blocks that `tokens` tokens take.
  [[nodiscard]] constexpr int blocks(std::int64_t tokens) const {
    return static_cast<int>(shift_ >= 0 ? (tokens + size_ - 1) >> shift_
                                        : (tokens + size_ - 1) / size_);
  }
  /// The block that holds position `pos`, and the position's place in it.
  [[nodiscard]] constexpr int block_of(std::int64_t pos) const {
    return static_cast<int>(shift_ >= 0 ? pos >> shift_ : pos / size_);
  }
  [[nodiscard]] constexpr int offset_in_block(std::int64_t pos) const {
    return static_cast<int>(shift_ >= 0 ? pos & (size_ - 1) : pos % size_);
  }

 private:
  int size_;
  int shift_;  ///< log2(size_), or −1 when size_ is not a power of two
};

}  // namespace freezeframe
