#include "freezeframe/engine/runtime/engine.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>

#include "freezeframe/backends/registry.h"
#include "freezeframe/core/cuda_check.h"
#include "freezeframe/core/device.h"
#include "freezeframe/core/device_properties.h"
#include "freezeframe/core/nvtx.h"
#include "freezeframe/engine/model/checkpoint_weights.h"
#include "freezeframe/engine/plan/staging_layout.h"
#include "freezeframe/engine/runtime/graph_scope.h"
#include "freezeframe/engine/spec/tensor_parallel.h"
#include "runtime/engine_state.h"
#include "runtime/weight_upload.h"

namespace freezeframe {
namespace {

using E = ErrorCode;

/// The first backend of the spec's layers that cannot attend prefill rows over a DCP shard
/// (AttentionBackend::supports_dcp_prefill), or nothing when they all can.
std::string_view dcp_prefill_missing(const EngineSpec& spec) {
  for (const LayerSpec& layer : spec.model.layers) {
    if (!spec.registry->get(layer.backend).supports_dcp_prefill()) return layer.backend;
  }
  return {};
}

/// Under DCP, a step with prefill rows where a backend cannot attend them over a shard.
void check_dcp_rows(const EngineSpec& spec, const DeploymentGeometry& geometry, bool dcp_prefill,
                    const StepShape& shape) {
  FF_CHECK(geometry.rank.dcp_world_size == 1 || dcp_prefill || shape.num_decodes == shape.num_reqs,
           E::kUnsupported, "the step has prefill rows, which backend '", dcp_prefill_missing(spec),
           "' does not attend under decode context parallelism (", geometry.rank.dcp_world_size,
           " ranks): decode steps only");
}

/// The spec asks for things the engine does not run: refuse before allocating anything.
void check_supported(const EngineSpec& spec, const EngineOptions& options) {
  const int t = spec.tp.world_size;
  const Communicator* comm = options.communicator;
  const int dcp = spec.dcp.world_size;
  const Communicator* dcp_comm = options.dcp_communicator;
  FF_CHECK(dcp == 1 || dcp_comm != nullptr, E::kInvalidArgument, spec.where("dcp.world_size"), ": ",
           dcp, " ranks need each rank's DCP communicator (EngineOptions::dcp_communicator)");
  FF_CHECK(dcp_comm == nullptr || dcp_comm->world_size() == dcp, E::kInvalidArgument,
           spec.where("dcp.world_size"), ": ", dcp, " ranks, but the DCP communicator's group has ",
           dcp_comm == nullptr ? 0 : dcp_comm->world_size());
  FF_CHECK(dcp_comm == nullptr || comm == nullptr || dcp_comm->rank() == comm->rank() % dcp,
           E::kInvalidArgument, spec.where("dcp.world_size"), ": tensor-parallel rank ",
           comm == nullptr ? 0 : comm->rank(), " is rank ",
           comm == nullptr ? 0 : comm->rank() % dcp,
           " of its DCP group, but its DCP communicator is rank ",
           dcp_comm == nullptr ? 0 : dcp_comm->rank());
  // Under DCP a backend that cannot mask prefill rows over a shard runs decode steps only:
  // graph modes that capture steps with prefill rows are refused with it.
  const CudaGraphMode mode = spec.cuda_graphs.mode;
  const std::string_view without = dcp_prefill_missing(spec);
  FF_CHECK(dcp == 1 || without.empty() || mode == CudaGraphMode::kNone ||
               mode == CudaGraphMode::kFullDecodeOnly,
           E::kUnsupported, spec.where("cuda_graphs.mode"), ": ", to_string(mode),
           " captures steps with prefill rows, which backend '", without,
           "' does not attend under decode context parallelism; use full_decode_only or none");
  FF_CHECK(t == 1 || comm != nullptr, E::kInvalidArgument, spec.where("tp.world_size"), ": ", t,
           " ranks need each rank's communicator (EngineOptions::communicator: a LocalGroup's "
           "rank, or an NcclCommunicator)");
  FF_CHECK(comm == nullptr || comm->world_size() == t, E::kInvalidArgument,
           spec.where("tp.world_size"), ": ", t, " ranks, but the communicator's group has ",
           comm == nullptr ? 0 : comm->world_size());
  const ModelSpec& model = spec.model;
  FF_CHECK(model.builtin_weights || model.checkpoint, E::kUnsupported,
           spec.where("model.builtin_weights"),
           ": false asks for the weights of a checkpoint, and the spec names none; name it in "
           "model.checkpoint, or leave builtin_weights true for random weights");
  for (int l = 0; l < spec.model.num_layers; ++l) {
    const LayerSpec& layer = spec.model.layers[l];
    FF_CHECK(layer.attention_type == AttentionType::kDecoder, E::kUnsupported,
             spec.where("model.layers"), ": layer ", l, " is ", to_string(layer.attention_type),
             " attention; the built-in model is a decoder and runs decoder layers only");
    // Outputs are planned activations at fixed addresses, which graphs replay into.
    FF_CHECK(spec.registry->get(layer.backend).accept_output_buffer(), E::kUnsupported,
             spec.where("model.layers"), ": layer ", l, "'s backend '", layer.backend,
             "' does not write into a preallocated output buffer, which the engine needs");
  }
}

}  // namespace

Engine::Engine(EngineSpec spec, EngineOptions options) {
  require_usable_gpu();
  check_supported(spec, options);
  // A checkpoint's weights are checked whole before anything is allocated or uploaded.
  // Over T ranks, each takes its part of every tensor (tensor_parallel.h).
  std::unique_ptr<WeightSource> checkpoint;
  std::vector<const WeightTensor*> checkpoint_tensors;
  std::vector<WeightShard> shards;
  std::vector<KvCacheScales> kv_cache_scales;
  if (!spec.model.builtin_weights) {
    checkpoint = WeightSource::open(*spec.model.checkpoint);
    const ModelProgram program = build_model_program(spec);
    if (spec.tp.world_size > 1) {
      for (const ProgramWeight& w : program.weights) {
        shards.push_back(weight_shard(spec, w.name, State::tp_rank(options)));
      }
    }
    checkpoint_tensors = match_weights(*checkpoint, program, shards);
    // An fp8 cache writes with the scales the checkpoint calibrated, where it has them.
    if (is_fp8(spec.kv_cache_dtype())) {
      kv_cache_scales =
          checkpoint_kv_cache_scales(*checkpoint, *spec.model.checkpoint, spec.model.num_layers);
    }
  }
  std::int64_t device_memory = options.device_memory;
  if (device_memory == 0) {
    std::size_t free_bytes = 0, total_bytes = 0;
    FF_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    device_memory = static_cast<std::int64_t>(total_bytes);
  }
  state_ = std::make_unique<State>(std::move(spec), std::move(options), device_memory);
  State& s = *state_;
  const cudaStream_t stream = s.stream.get();
  s.dcp_prefill = s.geometry.rank.dcp_world_size == 1 || dcp_prefill_missing(s.spec).empty();

  // The model's backends, in order of first use; each layer's attention reads its backend's
  // metadata of the staged step.
  std::vector<const AttentionBackend*> backends;
  std::vector<int> backend_of_layer;
  for (const LayerSpec& layer : s.spec.model.layers) {
    const AttentionBackend* backend = &s.spec.registry->get(layer.backend);
    auto it = std::find(backends.begin(), backends.end(), backend);
    if (it == backends.end()) it = backends.insert(backends.end(), backend);
    backend_of_layer.push_back(static_cast<int>(it - backends.begin()));
  }
  // The layout the planner sized the staging region by (the same function of the same inputs).
  StagingLayout layout = staging_layout(s.spec, s.program, s.geometry, current_device_properties());
  FF_CHECK(static_cast<std::int64_t>(layout.total_bytes) == s.plan.region("staging").bytes,
           E::kInternal, "the staged image takes ", layout.total_bytes,
           " bytes; the plan's staging region holds ", s.plan.region("staging").bytes);
  s.stager = std::make_unique<StepStager>(std::move(layout), s.arena.data("staging"), s.geometry,
                                          std::move(backends));
  s.runner = std::make_unique<ModelRunner>(
      s.spec, s.geometry, s.program, s.views, s.arena, std::move(backend_of_layer),
      std::move(s.options.user_pieces), s.options.sample_tokens, s.options.communicator,
      s.options.dcp_communicator);
  if (!kv_cache_scales.empty()) s.runner->set_kv_cache_scales(kv_cache_scales);
  s.logits = s.program.tensor_index("logits");
  s.sampled = s.program.tensor_index("sampled_token_ids");

  if (checkpoint) {
    std::vector<int> scale_view(s.program.weights.size(), -1);
    for (std::size_t w = 0; w < s.program.weights.size(); ++w) {
      if (s.program.weights[w].scales_of >= 0) scale_view[s.program.weights[w].scales_of] = int(w);
    }
    upload_weights(*checkpoint, checkpoint_tensors, s.views.weights, shards, scale_view,
                   s.options.weight_staging_bytes, stream, s.options.weight_progress);
    checkpoint.reset();  // unmaps the files
  } else {
    s.runner->init_weights(s.options.weight_seed, stream);
  }
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

void Engine::State::stage(const StepBatch& batch, const StepShape& shape, const RunShape& run) {
  stager->stage(batch, shape, run.rows, run.reqs);
}

void Engine::State::run_ops(int begin, int end, const RunShape& run, cudaStream_t s, bool nvtx) {
  if (begin == 0) stager->enqueue_upload(s);
  runner->run(begin, end, run, stager->metadata(), s, nvtx);
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
  // Block ids are checked where the stager writes them (the rows that changed).
  const StepShape shape =
      validate_step(batch, s.limits, s.geometry.dcp_sharding(), /*check_block_ids=*/false);
  check_dcp_rows(s.spec, s.geometry, s.dcp_prefill, shape);
  FF_CHECK(batch.sampling.empty() || s.options.sample_tokens, E::kInvalidArgument,
           "the step carries sampling parameters but the engine does not sample "
           "(EngineOptions::sample_tokens is false)");
  char name[64];
  std::snprintf(name, sizeof name, "step[tokens=%d,reqs=%d]", shape.num_tokens, shape.num_reqs);
  const NvtxRange range(name);
  Dispatch dispatch{RuntimeMode::kEager, {shape.num_tokens, shape.num_reqs, shape.uniform_decode}};
  if (!options.eager) {
    dispatch = s.dispatcher.dispatch(shape.num_tokens, shape.num_reqs,
                                     shape.uniform_decode && !options.prefer_piecewise);
  }
  const bool graph = dispatch.mode != RuntimeMode::kEager;
  const RunShape run =
      graph ? RunShape{dispatch.descriptor.num_tokens, s.padded_reqs(dispatch.descriptor)}
            : RunShape{shape.num_tokens, shape.num_reqs};
  const auto t1 = Clock::now();
  s.stage(batch, shape, run);
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
    s.replay(
        s.piecewise_segments, run, RuntimeMode::kPiecewise,
        [&](std::size_t g, cudaStream_t on) { s.piecewise_executables.launch(graphs[g], on); });
  }
  const auto t3 = Clock::now();
  StepResult result;
  const TensorView& logits = s.views.tensors[s.logits];
  const std::int64_t logits_shape[] = {shape.num_reqs, logits.size(1)};
  result.logits = TensorView(logits.data(), logits.dtype(), logits_shape, logits.device());
  if (s.options.sample_tokens) {
    const TensorView& sampled = s.views.tensors[s.sampled];
    const std::int64_t sampled_shape[] = {shape.num_reqs};
    result.token_ids = TensorView(sampled.data(), sampled.dtype(), sampled_shape, sampled.device());
    result.host_token_ids = s.runner->host_token_ids(shape.num_reqs);
  }
  result.mode = options.eager_like_graph ? RuntimeMode::kEager : dispatch.mode;
  result.descriptor = dispatch.descriptor;
  using Us = std::chrono::duration<double, std::micro>;
  result.host = {Us(t1 - t0).count(), Us(t2 - t1).count(), Us(t3 - t2).count()};
  return result;
}

std::vector<OpTime> Engine::profile_ops(const StepBatch& batch) {
  State& s = *state_;
  const StepShape shape =
      validate_step(batch, s.limits, s.geometry.dcp_sharding(), /*check_block_ids=*/false);
  check_dcp_rows(s.spec, s.geometry, s.dcp_prefill, shape);
  const RunShape run{shape.num_tokens, shape.num_reqs};
  s.stage(batch, shape, run);
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
    times.push_back(
        {s.runner->op_name(i), s.runner->layer_of(i), marks[i + 1].elapsed_ms_since(marks[i])});
  }
  return times;
}

void Engine::synchronize() const {
  state_->stream.synchronize();
  state_->stager->uploads_done();
}
const EngineSpec& Engine::spec() const { return state_->spec; }
bool Engine::samples() const { return state_->options.sample_tokens; }
const MemoryPlan& Engine::plan() const { return state_->plan; }
const CaptureReport& Engine::capture_report() const { return state_->report; }
const Dispatcher& Engine::dispatcher() const { return state_->dispatcher; }
const DeploymentGeometry& Engine::geometry() const { return state_->geometry; }
const DeploymentLimits& Engine::limits() const { return state_->limits; }
cudaStream_t Engine::stream() const { return state_->stream.get(); }
TensorView Engine::kv_cache(int layer) const { return state_->views.kv_caches.at(layer); }

TensorView Engine::weight(std::string_view name) const {
  const ModelProgram& program = state_->program;
  for (std::size_t w = 0; w < program.weights.size(); ++w) {
    if (program.weights[w].name == name) return state_->views.weights[w];
  }
  FF_THROW(E::kNotFound, "the model program has no weight '", name, "'");
}

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
