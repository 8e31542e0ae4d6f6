#pragma once
// SplitMix64's finaliser: 64 bits well mixed from 64, for the tokens serving/ makes up (a trace's
// prompts, the hash token source's draws).

#include <cstdint>

namespace freezeframe {

inline std::uint64_t splitmix64_finalise(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace freezeframe
