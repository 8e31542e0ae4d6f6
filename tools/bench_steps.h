#pragma once
// The bench's measurements of one engine: decode and prefill steps timed in every mode that
// runs them (median device time of back-to-back steps between events), the host time of a
// step() call in four conditions, and the device time by op kind (freezeframe bench).

#include <random>
#include <string>
#include <utility>
#include <vector>

#include "freezeframe/engine/runtime/engine.h"
#include "prefill_shapes.h"
#include "step_flops.h"

namespace freezeframe::tools {

/// When the timed step() call starts.
enum class HostCondition {
  kAfterSync,  ///< right after synchronize() returned: the thread waited out a whole step
  kWarm,       ///< after synchronize() and 200 us of host work (a loop sampling, scheduling)
  kGpuBusy,    ///< while the GPU runs the previous step, whose input copy is done (overlapped)
  kAfterPoll,  ///< after waiting for the previous step by polling the stream (never sleeping)
};
constexpr int kHostConditions = 4;
constexpr const char* kHostConditionNames[kHostConditions] = {"after sync", "warm", "gpu busy",
                                                              "after poll"};

/// Device time per op kind over the whole program, largest first, and their sum.
struct Breakdown {
  std::vector<std::pair<std::string, double>> by_kind;
  double total = 0.0;

  /// "12.345 ms: attention 9.661 gate_up_proj 3.007 ..."
  [[nodiscard]] std::string text() const;
  /// {"attention": 9.661, "gate_up_proj": 3.007, ...}
  [[nodiscard]] std::string json() const;
};

struct Row {
  int batch = 0;
  int run_tokens = 0;                    // as the dispatcher runs it (padded to a graph)
  double ms[3] = {0, 0, 0};              // by RuntimeMode; 0 = not run
  double host_us[kHostConditions] = {};  // by HostCondition
  StepHostTimes host[kHostConditions];
  Breakdown breakdown;
};

struct PrefillRow {
  PrefillShape shape;
  int run_tokens = 0;
  RuntimeMode mode = RuntimeMode::kEager;  // the dispatcher's
  double ms[3] = {0, 0, 0};                // by RuntimeMode; 0 = not run
  StepFlops flops;
  Breakdown breakdown;

  /// In the mode the dispatcher runs it in.
  [[nodiscard]] double dispatched_ms() const { return ms[int(mode)]; }
  [[nodiscard]] double tflops() const {
    return dispatched_ms() > 0 ? flops.total() / (dispatched_ms() * 1e-3) / 1e12 : 0.0;
  }
};

/// A time for the tables: "-" where the mode did not run.
[[nodiscard]] std::string cell(double ms);
/// A decode row: B single-token decodes over `context` tokens, every mode, the host times and
/// the breakdown.
[[nodiscard]] Row time_decode(Engine& engine, int b, int context, int iterations,
                              std::mt19937& rng);
/// A prefill row: eagerly, and in the graph mode the dispatcher runs it in; the breakdown and
/// the FLOPs.
[[nodiscard]] PrefillRow time_prefill(Engine& engine, const PrefillShape& shape, int context,
                                      int iterations, std::mt19937& rng);

}  // namespace freezeframe::tools
