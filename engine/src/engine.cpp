#include "freezeframe/engine/engine.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <unordered_map>

#include "freezeframe/backends/metadata_builder.h"
#include "freezeframe/backends/registry.h"
#include "freezeframe/core/cuda_handles.h"
#include "freezeframe/core/device.h"
#include "freezeframe/core/error.h"
#include "freezeframe/core/nvtx.h"
#include "freezeframe/engine/graph_scope.h"
#include "freezeframe/engine/memory_planner.h"
#include "freezeframe/engine/model_program.h"
#include "freezeframe/engine/plan_views.h"
#include "freezeframe/graphs/cuda_graph.h"
#include "freezeframe/graphs/shared_executables.h"
#include "freezeframe/memory/arena.h"
#include "host_copy.h"
#include "model_runner.h"

namespace freezeframe {
namespace {

using E = ErrorCode;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
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

/// The spec asks for things the engine does not run: refuse before allocating anything.
void check_supported(const EngineSpec& spec) {
  FF_CHECK(spec.dcp.world_size == 1, E::kUnsupported, spec.where("dcp.world_size"),
           ": the engine runs one GPU; decode context parallelism over ", spec.dcp.world_size,
           " ranks needs a multi-GPU engine");
  FF_CHECK(spec.model.builtin_weights, E::kUnsupported, spec.where("model.builtin_weights"),
           ": the engine executes the built-in model, whose weights must be planned (true)");
  for (int l = 0; l < spec.model.num_layers; ++l) {
    const AttentionType type = spec.model.layers[l].attention_type;
    FF_CHECK(type == AttentionType::kDecoder, E::kUnsupported, spec.where("model.layers"),
             ": layer ", l, " is ", to_string(type),
             " attention; the built-in model is a decoder and runs decoder layers only");
  }
}

/// A batch of exactly `rows` tokens to capture `descriptor` with: all single-token decodes for
/// a uniform-decode key; otherwise prefill chunks (so every launch a mixed batch needs is
/// recorded), a trailing one-token chunk moved first as the decode it is. No token writes the
/// cache (slot −1) and every block id is 0.
struct CaptureBatch {
  std::vector<StepRequest> requests;
  std::vector<std::int32_t> block_ids;
  std::vector<std::int64_t> slots;
  StepBatch batch;

  CaptureBatch(const BatchDescriptor& d, const StepLimits& limits) {
    std::vector<int> lengths;
    if (d.uniform_decode || d.num_tokens == 1) {
      lengths.assign(d.num_tokens, 1);
    } else {
      const int chunk = static_cast<int>(std::min<std::int64_t>(limits.max_model_len, d.num_tokens));
      for (int left = d.num_tokens; left > 0; left -= chunk) lengths.push_back(std::min(chunk, left));
      if (lengths.size() > 1 && lengths.back() == 1) std::rotate(lengths.rbegin(), lengths.rbegin() + 1, lengths.rend());
    }
    int most = 1;
    for (const int len : lengths) most = std::max(most, (len + limits.block_size - 1) / limits.block_size);
    block_ids.assign(most, 0);
    for (const int len : lengths) {
      requests.push_back({len, len, std::span<const std::int32_t>(block_ids)});
    }
    slots.assign(d.num_tokens, -1);
    batch.requests = requests;
    batch.slot_mapping = slots;
  }
};

}  // namespace

struct Engine::State {
  EngineSpec spec;
  EngineOptions options;
  MemoryPlan plan;
  ModelProgram program;
  Arena arena;
  PlanViews views;
  Stream stream;
  StepLimits limits;
  std::vector<std::unique_ptr<MetadataBuilder>> builders;
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

  // A step's inputs (token ids, positions) and the first builder's metadata, staged in
  // pinned memory laid out like the device span they go to (the plan puts them together),
  // uploaded in one copy: a kernel first in the step's work, so a graph holds it and a
  // replay costs the host one launch.
  PinnedBuffer upload_image;
  HostCopy upload_copy;              // upload_image → the device span
  std::size_t positions_offset = 0;  // bytes from token_ids to positions, host and device alike
  std::size_t metadata_offset = 0;   // bytes from token_ids to the first builder's buffers
  Event upload_free{false};          // the last copy out of upload_image has run (recorded
  bool upload_in_flight = false;     // right after it, by graphs too)
  std::vector<const AttentionMetadata*> metadata;
  StepMetadata step_metadata;  // reused every step
  int token_ids = -1, logits = -1;  // program tensor indices

  State(EngineSpec s, EngineOptions o, std::int64_t device_memory)
      : spec(std::move(s)),
        options(std::move(o)),
        plan(plan_memory(spec, device_memory)),
        program(build_model_program(spec)),
        arena(Arena::allocate(plan)),
        views(bind_plan(spec, program, arena)),
        stream(Stream::create()),
        limits(step_limits(spec, static_cast<std::int32_t>(plan.kv_cache.num_blocks))),
        dispatcher(CudaGraphMode::kNone, {}) {}

  /// Whether step validation checks the block ids. A single builder checks those of the rows
  /// it stages (the ones that changed), before any copy; with several, each enqueues its copy
  /// as it stages, so a refusal by a later one would come after an earlier one's copy.
  [[nodiscard]] bool ids_checked_up_front() const { return builders.size() > 1; }

  [[nodiscard]] int padded_reqs(const BatchDescriptor& d) const {
    return d.num_reqs > 0 ? d.num_reqs : std::min(d.num_tokens, limits.max_num_seqs);
  }

  void build_segments();
  void build_warm_up_ops();
  void upload(const StepBatch& batch, const RunShape& run);
  /// Ops [begin, end) on `s`; from op 0, the upload's device half first: the copy out of
  /// upload_image and the builders' finish (so a graph of the first segment holds them).
  void run_ops(int begin, int end, const RunShape& run, cudaStream_t s, bool nvtx);
  void capture_all();
  void warm_up(const BatchDescriptor& d);
  void capture_one(const BatchDescriptor& d, RuntimeMode mode);
  /// Runs `segments`: graph segment g through launch(g), the others eagerly.
  template <typename Launch>
  void replay(const std::vector<Segment>& segments, const RunShape& run, RuntimeMode mode,
              Launch&& launch);
};

Engine::Engine(EngineSpec spec, EngineOptions options) {
  require_usable_gpu();
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

  // One metadata builder per backend, on the plan's persistent metadata region.
  BatchLimits batch = batch_limits(s.spec);
  batch.num_blocks = s.limits.num_blocks;  // the builders check the block ids they stage
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
  s.runner = std::make_unique<ModelRunner>(s.spec, s.program, s.views, s.arena,
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

void Engine::State::build_segments() {
  const int n = runner->num_ops();
  if (spec.cuda_graphs.layer_by_layer) {
    for (int i = 0; i < n;) {
      int j = i;
      while (j < n && runner->layer_of(j) == runner->layer_of(i)) ++j;
      const int layer = runner->layer_of(i);
      const std::string name = layer >= 0 ? std::to_string(layer) : (i == 0 ? "embedding" : "lm_head");
      full_segments.push_back({i, j, true, "layer=" + name});
      i = j;
    }
  } else {
    full_segments.push_back({0, n, true, ""});
  }
  int piece = 0;
  // Pieces with the same ops (a decoder's middle pieces: one layer's tail, the next one's
  // head) capture graphs of one shape, so they may share executables across layers too.
  std::map<std::string, int> groups_by_ops;
  for (int i = 0; i < n;) {
    if (runner->is_attention(i)) {
      piecewise_segments.push_back({i, i + 1, false, ""});
      ++i;
      continue;
    }
    int j = i;
    std::string ops;
    for (; j < n && !runner->is_attention(j); ++j) (ops += runner->op_name(j)) += ',';
    const int group = spec.cuda_graphs.piecewise_sharing == PiecewiseSharing::kAcrossLayers
                          ? groups_by_ops.emplace(ops, piece).first->second
                          : piece;
    piecewise_segments.push_back({i, j, true, "piece=" + std::to_string(piece++), group});
    i = j;
  }
}

void Engine::State::build_warm_up_ops() {
  const int n = runner->num_ops();
  std::vector<bool> warm(n, true);
  // A layer's kind: its spec and its op list (user pieces included).
  std::vector<std::pair<LayerSpec, std::string>> kinds;
  for (int i = 0; i < n;) {
    const int layer = runner->layer_of(i);
    int j = i + 1;
    while (j < n && runner->layer_of(j) == layer) ++j;
    if (layer >= 0) {
      std::pair<LayerSpec, std::string> kind{spec.model.layers[layer], ""};
      for (int k = i; k < j; ++k) (kind.second += runner->op_name(k)) += ',';
      if (std::find(kinds.begin(), kinds.end(), kind) != kinds.end()) {
        std::fill(warm.begin() + i, warm.begin() + j, false);
      } else {
        kinds.push_back(std::move(kind));
      }
    }
    i = j;
  }
  for (int i = 0; i < n;) {
    if (!warm[i]) {
      ++i;
      continue;
    }
    int j = i;
    while (j < n && warm[j]) ++j;
    warm_up_ops.emplace_back(i, j);
    i = j;
  }
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

void Engine::State::capture_all() {
  const auto start = Clock::now();
  std::size_t free_start = 0, free_warm = 0, free_end = 0, total = 0;
  FF_CUDA_CHECK(cudaMemGetInfo(&free_start, &total));
  free_warm = free_start;
  std::vector<std::pair<BatchDescriptor, RuntimeMode>> jobs;
  for (const BatchDescriptor& d : dispatcher.full_keys()) jobs.emplace_back(d, RuntimeMode::kFull);
  for (const BatchDescriptor& d : dispatcher.piecewise_keys()) {
    jobs.emplace_back(d, RuntimeMode::kPiecewise);
  }
  try {
    // Warm-up: every size once, eagerly, with prefill chunks (every launch a mixed batch
    // needs), and the largest uniform-decode key once (the decode-only paths), so every kernel
    // is loaded and the libraries' lazy state settled before anything is recorded. One layer
    // of each kind runs (warm_up_ops): the others launch the same kernels on the same shapes.
    const std::span<const int> sizes = dispatcher.capture_sizes();
    for (auto it = sizes.rbegin(); it != sizes.rend(); ++it) warm_up({*it, 0, false});
    for (const auto& job : jobs) {
      if (job.first.uniform_decode) {
        warm_up(job.first);
        break;
      }
    }
    stream.synchronize();
    report.warmup_ms = ms_since(start);
    FF_CUDA_CHECK(cudaMemGetInfo(&free_warm, &total));
    for (std::size_t i = 0; i < jobs.size(); ++i) {
      capture_one(jobs[i].first, jobs[i].second);
      if (options.capture_progress) {
        options.capture_progress(static_cast<int>(i + 1), static_cast<int>(jobs.size()));
      }
    }
    stream.synchronize();
  } catch (const Error& e) {
    // The capture was ended and the stream is usable (capture_graph); drop every graph and
    // run eagerly from now on.
    report.failure = e.what();
    full_graphs.clear();
    piecewise_graphs.clear();
    piecewise_executables.clear();
    report.captured.clear();
    dispatcher = Dispatcher(CudaGraphMode::kNone, {});
    FF_CUDA_WARN(cudaStreamSynchronize(stream.get()));
    std::fprintf(stderr, "freezeframe: graph capture failed, every step will run eagerly: %s\n",
                 e.what());
  }
  FF_CUDA_CHECK(cudaMemGetInfo(&free_end, &total));
  report.warmup_device_bytes = static_cast<std::int64_t>(free_start) - static_cast<std::int64_t>(free_warm);
  report.graph_device_bytes = static_cast<std::int64_t>(free_warm) - static_cast<std::int64_t>(free_end);
  report.refused_updates = piecewise_executables.refusals();
  report.total_ms = ms_since(start);
}

void Engine::State::warm_up(const BatchDescriptor& d) {
  const RunShape run{d.num_tokens, padded_reqs(d)};
  const CaptureBatch dummy(d, limits);
  upload(dummy.batch, run);
  for (const auto& [begin, end] : warm_up_ops) run_ops(begin, end, run, stream.get(), false);
}

void Engine::State::capture_one(const BatchDescriptor& d, RuntimeMode mode) {
  const std::string mode_name(to_string(mode));
  const NvtxRange range("capture[size=" + std::to_string(d.num_tokens) + ",mode=" + mode_name + "]");
  const RunShape run{d.num_tokens, padded_reqs(d)};
  const CaptureBatch dummy(d, limits);
  upload(dummy.batch, run);
  const cudaStream_t s = stream.get();
  const std::vector<Segment>& segments = mode == RuntimeMode::kFull ? full_segments : piecewise_segments;
  CapturedGraphInfo info;
  info.descriptor = d;
  info.mode = mode;
  std::size_t free_before = 0, free_after = 0, total = 0;
  FF_CUDA_CHECK(cudaMemGetInfo(&free_before, &total));
  std::vector<GraphExec> full;
  std::vector<int> pieces;
  for (std::size_t k = 0; k < segments.size(); ++k) {
    const Segment& segment = segments[k];
    if (!segment.graph) continue;
    auto segment_start = Clock::now();
    CudaGraph graph = capture_graph(s, [&] { run_ops(segment.begin, segment.end, run, s, false); });
    info.capture_ms += ms_since(segment_start);
    info.nodes += graph.node_count();
    segment_start = Clock::now();
    if (mode == RuntimeMode::kFull) {
      full.emplace_back(graph);
      full.back().upload(s);
    } else {
      // A group of its own when not shared.
      const int group = spec.cuda_graphs.piecewise_sharing != PiecewiseSharing::kNone
                            ? segment.sharing_group
                            : static_cast<int>(segments.size()) + piecewise_executables.num_graphs();
      pieces.push_back(piecewise_executables.add(group, std::move(graph), s));
    }
    info.instantiate_ms += ms_since(segment_start);
  }
  info.graphs = static_cast<int>(full.size() + pieces.size());
  FF_CUDA_CHECK(cudaMemGetInfo(&free_after, &total));
  info.device_bytes = static_cast<std::int64_t>(free_before) - static_cast<std::int64_t>(free_after);
  if (mode == RuntimeMode::kFull) {
    full_graphs[d] = std::move(full);
  } else {
    piecewise_graphs[d] = std::move(pieces);
  }
  report.captured.push_back(info);
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
const StepLimits& Engine::limits() const { return state_->limits; }
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
