#pragma once
// Reading what the recording NVTX injection library (nvtx_recorder.cpp) saw, through its two C
// functions on the already-loaded library. Empty when the library was not loaded.

#include <dlfcn.h>

#include <cstddef>
#include <string>
#include <vector>

namespace freezeframe::testing {

/// "push <domain> <message>" / "pop <domain>", in order.
inline std::vector<std::string> recorded_nvtx_events(const char* recorder_path) {
  void* library = dlopen(recorder_path, RTLD_NOW | RTLD_NOLOAD);
  if (library == nullptr) return {};
  using Count = std::size_t (*)();
  using Event = const char* (*)(std::size_t);
  auto count = reinterpret_cast<Count>(dlsym(library, "freezeframe_nvtx_event_count"));
  auto event = reinterpret_cast<Event>(dlsym(library, "freezeframe_nvtx_event"));
  std::vector<std::string> events;
  for (std::size_t i = 0; count != nullptr && event != nullptr && i < count(); ++i) {
    events.emplace_back(event(i));
  }
  dlclose(library);
  return events;
}

}  // namespace freezeframe::testing
