#pragma once
// BatchDescriptor: the key a captured graph is stored and found under.

#include <cstddef>
#include <functional>
#include <string>

namespace freezeframe {

struct BatchDescriptor {
  int num_tokens = 0;           ///< padded token count
  int num_reqs = 0;             ///< request count where a full graph fixes it; 0 = any
  bool uniform_decode = false;  ///< every request is a single-token decode

  friend bool operator==(const BatchDescriptor&, const BatchDescriptor&) = default;
  /// "tokens=8,reqs=8,uniform" — for logs and NVTX payloads.
  [[nodiscard]] std::string describe() const;
};

struct BatchDescriptorHash {
  std::size_t operator()(const BatchDescriptor& d) const {
    return std::hash<long long>()((static_cast<long long>(d.num_tokens) << 32) ^
                                  (static_cast<long long>(d.num_reqs) << 1) ^ d.uniform_decode);
  }
};

}  // namespace freezeframe
