#pragma once
// Engine::State: what an engine holds, shared by the files of the runtime room (engine.cpp:
// construction and the step; capture.cpp: warm-up and graph capture). Private to runtime/.

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "freezeframe/core/cuda_handles.h"
#include "freezeframe/engine/model/model_program.h"
#include "freezeframe/engine/plan/memory_planner.h"
#include "freezeframe/engine/plan/plan_views.h"
#include "freezeframe/engine/runtime/engine.h"
#include "freezeframe/graphs/cuda_graph.h"
#include "freezeframe/graphs/shared_executables.h"
#include "freezeframe/memory/arena.h"
#include "runtime/model_runner.h"
#include "runtime/step_stager.h"

namespace freezeframe {

using Clock = std::chrono::steady_clock;

inline double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

/// A run of ops: recorded into one graph, or (attention in piecewise mode) run eagerly.
struct Segment {
  int begin = 0;
  int end = 0;
  bool graph = true;
  std::string label;  ///< NVTX payload: "piece=3", "layer=7"
  /// Piecewise graphs of segments in one group may share executables (see PiecewiseSharing).
  int sharing_group = 0;
};

struct Engine::State {
  EngineSpec spec;
  EngineOptions options;
  MemoryPlan plan;
  ModelProgram program;
  Arena arena;
  PlanViews views;
  Stream stream;
  DeploymentGeometry geometry;
  const DeploymentLimits& limits;
  /// Every layer's backend attends prefill rows over a DCP shard (or there is no DCP).
  bool dcp_prefill = true;
  std::unique_ptr<ModelRunner> runner;
  Dispatcher dispatcher;
  CaptureReport report;

  std::vector<Segment> full_segments, piecewise_segments;
  /// The ops a warm-up runs, as [begin, end) runs: everything outside the layers and one layer
  /// of each kind (same spec, same ops), whose kernels and shapes the others repeat.
  std::vector<std::pair<int, int>> warm_up_ops;
  std::unordered_map<BatchDescriptor, std::vector<GraphExec>, BatchDescriptorHash> full_graphs;
  // Piecewise graphs by descriptor, as handles into piecewise_executables (piece k of every
  // size shares executables when the spec says so).
  std::unordered_map<BatchDescriptor, std::vector<int>, BatchDescriptorHash> piecewise_graphs;
  SharedExecutables piecewise_executables;

  // The one staged image of a step and its upload (a kernel first in the step's work, so a
  // graph holds it and a replay costs the host one launch).
  std::unique_ptr<StepStager> stager;
  int logits = -1;  // program tensor indices
  int sampled = -1;

  State(EngineSpec s, EngineOptions o, std::int64_t device_memory)
      : spec(std::move(s)),
        options(std::move(o)),
        plan(plan_memory(spec, device_memory, current_device_properties())),
        program(build_model_program(spec)),
        arena(Arena::allocate(plan)),
        views(bind_plan(spec, program, arena)),
        stream(Stream::create()),
        geometry(
            DeploymentGeometry::of(spec, tp_rank(options), tp_rank(options) % spec.dcp.world_size)
                .with_num_blocks(plan.kv_cache.num_blocks)),
        limits(geometry.limits),
        dispatcher(CudaGraphMode::kNone, {}) {}

  /// The engine's tensor-parallel rank (DCP groups are consecutive ranks).
  static int tp_rank(const EngineOptions& o) {
    return o.communicator != nullptr ? o.communicator->rank() : 0;
  }

  [[nodiscard]] int padded_reqs(const BatchDescriptor& d) const {
    return d.num_reqs > 0 ? d.num_reqs : std::min(d.num_tokens, limits.max_num_seqs);
  }

  void build_segments();
  void build_warm_up_ops();
  /// Stages a validated step for `run` (StepStager::stage).
  void stage(const StepBatch& batch, const StepShape& shape, const RunShape& run);
  /// Ops [begin, end) on `s`; from op 0, the upload first (so a graph of the first segment
  /// holds it).
  void run_ops(int begin, int end, const RunShape& run, cudaStream_t s, bool nvtx);
  void capture_all();
  void warm_up(const BatchDescriptor& d);
  void capture_one(const BatchDescriptor& d, RuntimeMode mode);
  /// Runs `segments`: graph segment g through launch(g), the others eagerly.
  template <typename Launch>
  void replay(const std::vector<Segment>& segments, const RunShape& run, RuntimeMode mode,
              Launch&& launch);
};

}  // namespace freezeframe
