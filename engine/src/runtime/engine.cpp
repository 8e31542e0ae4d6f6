#include "freezeframe/engine/runtime/engine.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>

#include "freezeframe/backends/registry.h"
#include "freezeframe/core/device.h"
#include "freezeframe/core/device_properties.h"
#include "freezeframe/core/error.h"
#include "freezeframe/core/nvtx.h"
#include "freezeframe/engine/runtime/graph_scope.h"
#include "runtime/engine_state.h"

namespace freezeframe {
namespace {

using E = ErrorCode;

/// The spec asks for things the engine does not run: refuse before allocating anything.
void check_supported(const EngineSpec& spec) {
  FF_CHECK(spec.dcp.world_size == 1, E::kUnsupported, spec.where("dcp.world_size"),
           ": the engine runs one GPU; decode context parallelism over ", spec.dcp.world_size,
           " ranks needs a multi-GPU engine");
  FF_CHECK(spec.model.builtin_weights, E::kUnsupported, spec.where("model.builtin_weights"),
           ": the engine executes the built-in model, whose weights must be planned (true)");
  for (int l = 0; l < spec.model.num_layers; ++l) {
    const LayerSpec& layer = spec.model.layers[l];
    FF_CHECK(layer.attention_type == AttentionType::kDecoder, E::kUnsupported,
             spec.where("model.layers"), ": layer ", l, " is ", to_string(layer.attention_type),
             " attention; the built-in model is a decoder and runs decoder layers only");
    // Outputs are planned activations at fixed addresses, which graphs replay into.
    FF_CHECK(find_backend(layer.backend).accept_output_buffer(), E::kUnsupported,
             spec.where("model.layers"), ": layer ", l, "'s backend '", layer.backend,
             "' does not write into a preallocated output buffer, which the engine needs");
  }
}


}  // namespace

Engine::Engine(EngineSpec spec, EngineOptions options) {
  FF_CHECK(has_gpu(), E::kUnsupported, "the engine needs a CUDA GPU: ", gpu_status());
  check_supported(spec);
  std::int64_t device_memory = options.device_memory;
  if (device_memory == 0) {
    std::size_t free_bytes = 0, total_bytes = 0;
    FF_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    device_memory = static_cast<std::int64_t>(total_bytes);
  }
  state_ = std::make_unique<State>(std::move(spec), std::move(options), device_memory);
  State& s = *state_;
  const cudaStream_t stream = s.stream.get();

  // One metadata builder per backend, on the plan's persistent metadata region; they check
  // the block ids they stage against the pool (BatchLimits::num_blocks).
  const BatchLimits batch = s.geometry.batch_limits();
  std::map<std::string, int> builder_index;
  std::vector<int> builder_of_layer;
  for (const LayerSpec& layer : s.spec.model.layers) {
    auto [it, added] = builder_index.emplace(layer.backend, static_cast<int>(s.builders.size()));
    if (added) {
      s.builders.push_back(find_backend(layer.backend)
                               .make_builder(batch, s.arena.data("metadata." + layer.backend)));
    }
    builder_of_layer.push_back(it->second);
  }
  s.metadata.resize(s.builders.size());
  s.runner = std::make_unique<ModelRunner>(s.spec, s.geometry, s.program, s.views, s.arena,
                                           std::move(builder_of_layer),
                                           std::move(s.options.user_pieces));

  // Inputs: token ids then positions, at the offsets the plan gave them.
  const TensorView& token_ids = s.views.tensors[s.program.tensor_index("token_ids")];
  const TensorView& positions = s.views.tensors[s.program.tensor_index("positions")];
  const auto* token_base = static_cast<const std::byte*>(token_ids.data());
  const auto* positions_base = static_cast<const std::byte*>(positions.data());
  FF_CHECK(positions_base > token_base, E::kInternal, "the plan puts positions before token ids");
  s.positions_offset = static_cast<std::size_t>(positions_base - token_base);
  s.token_ids = s.program.tensor_index("token_ids");
  s.logits = s.program.tensor_index("logits");
  const auto* metadata_base =
      static_cast<const std::byte*>(s.arena.data("metadata." + s.spec.model.layers.front().backend));
  const std::size_t inputs_end = s.positions_offset + positions.span_bytes();
  FF_CHECK(metadata_base >= token_base + inputs_end &&
               metadata_base - (token_base + inputs_end) < 4096,
           E::kInternal, "the plan does not put the first builder's metadata right after the inputs");
  s.metadata_offset = static_cast<std::size_t>(metadata_base - token_base);
  s.upload_image = PinnedBuffer(s.metadata_offset + s.builders.front()->image_bytes());
  s.upload_copy = HostCopy(s.upload_image, s.views.tensors[s.token_ids].data());

  s.runner->init_weights(s.options.weight_seed, stream);
  const MemoryRegion& cache = s.plan.region("kv_cache");
  FF_CUDA_CHECK(cudaMemsetAsync(s.arena.data("kv_cache"), 0, cache.bytes, stream));
  s.build_segments();
  s.build_warm_up_ops();
  s.stream.synchronize();

  if (s.options.capture_graphs) {
    s.dispatcher = Dispatcher(effective_graph_mode(s.spec), s.spec.cuda_graphs.capture_sizes,
                              s.spec.scheduler.max_num_seqs);
    s.capture_all();
  }
}

Engine::~Engine() {
  if (state_) FF_CUDA_WARN(cudaStreamSynchronize(state_->stream.get()));
}

void Engine::State::upload(const StepBatch& batch, const RunShape& run) {
  const NvtxRange range("metadata_upload");
  const cudaStream_t s = stream.get();
  step_metadata.assign(batch, limits, run.rows, run.reqs);
  const CommonAttentionMetadata common = step_metadata.common();

  // The image may still feed the previous step's copy.
  if (upload_in_flight) upload_free.synchronize();
  upload_in_flight = false;
  auto* base = static_cast<std::byte*>(upload_image.data());
  const std::size_t metadata_bytes = builders[0]->stage(common, base + metadata_offset);
  metadata[0] = &builders[0]->metadata();
  auto* ids = reinterpret_cast<std::int32_t*>(base);
  auto* positions = reinterpret_cast<std::int64_t*>(base + positions_offset);
  int row = 0;
  for (const StepRequest& r : batch.requests) {
    for (std::int64_t pos = r.seq_len - r.query_len; pos < r.seq_len; ++pos, ++row) {
      positions[row] = pos;
    }
  }
  if (batch.token_ids.empty()) {
    std::memset(ids, 0, sizeof(std::int32_t) * row);
  } else {
    std::memcpy(ids, batch.token_ids.data(), sizeof(std::int32_t) * row);
  }
  std::fill(ids + row, ids + run.rows, 0);
  std::fill(positions + row, positions + run.rows, 0);
  // Unused token and position rows of the span go along; nothing reads them. The copy itself
  // is the first of the step's work (run_ops).
  upload_copy.set_length(metadata_offset + metadata_bytes);
  // Further backends (a model mixing them) upload their own copy.
  for (std::size_t b = 1; b < builders.size(); ++b) metadata[b] = &builders[b]->upload(common, s);
}

void Engine::State::run_ops(int begin, int end, const RunShape& run, cudaStream_t s, bool nvtx) {
  if (begin == 0) {
    upload_copy.enqueue(s);
    upload_free.record_external(s);
    upload_in_flight = true;
    for (const auto& builder : builders) builder->finish(s);
  }
  runner->run(begin, end, run, metadata, s, nvtx);
}

template <typename Launch>
void Engine::State::replay(const std::vector<Segment>& segments, const RunShape& run,
                           RuntimeMode mode, Launch&& launch) {
  const cudaStream_t s = stream.get();
  const std::string_view mode_name = to_string(mode);
  std::size_t g = 0;
  char name[96];  // the range names, without allocating on the step path
  for (const Segment& segment : segments) {
    if (!segment.graph) {
      run_ops(segment.begin, segment.end, run, s, true);
      continue;
    }
    std::snprintf(name, sizeof name, "replay[size=%d,mode=%.*s%s%s]", run.rows,
                  static_cast<int>(mode_name.size()), mode_name.data(),
                  segment.label.empty() ? "" : ",", segment.label.c_str());
    const NvtxRange range(name);
    launch(g++, s);
  }
}

StepResult Engine::step(const StepBatch& batch, const StepOptions& options) {
  State& s = *state_;
  const auto t0 = Clock::now();
  const StepShape shape = validate_step(batch, s.limits, s.ids_checked_up_front());
  char name[64];
  std::snprintf(name, sizeof name, "step[tokens=%d,reqs=%d]", shape.num_tokens, shape.num_reqs);
  const NvtxRange range(name);
  Dispatch dispatch{RuntimeMode::kEager, {shape.num_tokens, shape.num_reqs, shape.uniform_decode}};
  if (!options.eager) {
    dispatch = s.dispatcher.dispatch(shape.num_tokens, shape.num_reqs,
                                     shape.uniform_decode && !options.prefer_piecewise);
  }
  const bool graph = dispatch.mode != RuntimeMode::kEager;
  const RunShape run = graph ? RunShape{dispatch.descriptor.num_tokens, s.padded_reqs(dispatch.descriptor)}
                             : RunShape{shape.num_tokens, shape.num_reqs};
  const auto t1 = Clock::now();
  s.upload(batch, run);
  const auto t2 = Clock::now();
  const cudaStream_t stream = s.stream.get();
  if (!graph || options.eager_like_graph) {
    s.run_ops(0, s.runner->num_ops(), run, stream, true);
  } else if (dispatch.mode == RuntimeMode::kFull) {
    const std::vector<GraphExec>& graphs = s.full_graphs.at(dispatch.descriptor);
    s.replay(s.full_segments, run, RuntimeMode::kFull,
             [&](std::size_t g, cudaStream_t on) { graphs[g].launch(on); });
  } else {
    const std::vector<int>& graphs = s.piecewise_graphs.at(dispatch.descriptor);
    s.replay(s.piecewise_segments, run, RuntimeMode::kPiecewise,
             [&](std::size_t g, cudaStream_t on) { s.piecewise_executables.launch(graphs[g], on); });
  }
  const auto t3 = Clock::now();
  StepResult result;
  const TensorView& logits = s.views.tensors[s.logits];
  const std::int64_t logits_shape[] = {shape.num_reqs, logits.size(1)};
  result.logits = TensorView(logits.data(), logits.dtype(), logits_shape, logits.device());
  result.mode = options.eager_like_graph ? RuntimeMode::kEager : dispatch.mode;
  result.descriptor = dispatch.descriptor;
  using Us = std::chrono::duration<double, std::micro>;
  result.host = {Us(t1 - t0).count(), Us(t2 - t1).count(), Us(t3 - t2).count()};
  return result;
}

std::vector<OpTime> Engine::profile_ops(const StepBatch& batch) {
  State& s = *state_;
  const StepShape shape = validate_step(batch, s.limits, s.ids_checked_up_front());
  const RunShape run{shape.num_tokens, shape.num_reqs};
  s.upload(batch, run);
  const cudaStream_t stream = s.stream.get();
  const int n = s.runner->num_ops();
  std::vector<Event> marks;
  for (int i = 0; i <= n; ++i) marks.emplace_back(true);
  marks[0].record(stream);
  for (int i = 0; i < n; ++i) {
    s.run_ops(i, i + 1, run, stream, false);
    marks[i + 1].record(stream);
  }
  s.stream.synchronize();
  std::vector<OpTime> times;
  for (int i = 0; i < n; ++i) {
    times.push_back({s.runner->op_name(i), s.runner->layer_of(i), marks[i + 1].elapsed_ms_since(marks[i])});
  }
  return times;
}

void Engine::synchronize() const {
  state_->stream.synchronize();
  state_->upload_in_flight = false;  // the copy out of the upload image is done, too
}
const EngineSpec& Engine::spec() const { return state_->spec; }
const MemoryPlan& Engine::plan() const { return state_->plan; }
const CaptureReport& Engine::capture_report() const { return state_->report; }
const Dispatcher& Engine::dispatcher() const { return state_->dispatcher; }
const DeploymentGeometry& Engine::geometry() const { return state_->geometry; }
const DeploymentLimits& Engine::limits() const { return state_->limits; }
cudaStream_t Engine::stream() const { return state_->stream.get(); }
TensorView Engine::kv_cache(int layer) const { return state_->views.kv_caches.at(layer); }

int Engine::num_graphs() const {
  std::size_t n = 0;
  for (const auto& [key, graphs] : state_->full_graphs) n += graphs.size();
  return static_cast<int>(n) + state_->piecewise_executables.num_graphs();
}

int Engine::num_executables() const {
  std::size_t n = 0;
  for (const auto& [key, graphs] : state_->full_graphs) n += graphs.size();
  return static_cast<int>(n) + state_->piecewise_executables.num_executables();
}

}  // namespace freezeframe
