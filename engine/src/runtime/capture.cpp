// Warm-up and graph capture: the model program's segments (one full graph, or pieces between
// attention calls), every captured size run once eagerly, then recorded largest first.

#include <algorithm>
#include <cstdio>
#include <map>

#include "freezeframe/core/cuda_check.h"
#include "freezeframe/core/nvtx.h"
#include "runtime/engine_state.h"

namespace freezeframe {
namespace {

/// A batch of exactly `rows` tokens to capture `descriptor` with: all single-token decodes for
/// a uniform-decode key; otherwise prefill chunks (so every launch a mixed batch needs is
/// recorded), a trailing one-token chunk moved first as the decode it is. No token writes the
/// cache (slot −1) and every block id is 0.
struct CaptureBatch {
  std::vector<StepRequest> requests;
  std::vector<std::int32_t> block_ids;
  std::vector<std::int64_t> slots;
  StepBatch batch;
  StepShape shape;  // by construction (its slots, −1, would not pass validate_step)

  CaptureBatch(const BatchDescriptor& d, const DeploymentLimits& limits) {
    std::vector<int> lengths;
    if (d.uniform_decode || d.num_tokens == 1) {
      lengths.assign(d.num_tokens, 1);
    } else {
      const int chunk =
          static_cast<int>(std::min<std::int64_t>(limits.max_model_len, d.num_tokens));
      for (int left = d.num_tokens; left > 0; left -= chunk)
        lengths.push_back(std::min(chunk, left));
      if (lengths.size() > 1 && lengths.back() == 1)
        std::rotate(lengths.rbegin(), lengths.rbegin() + 1, lengths.rend());
    }
    int most = 1;
    for (const int len : lengths)
      most = std::max(most, (len + limits.block_size - 1) / limits.block_size);
    block_ids.assign(most, 0);
    for (const int len : lengths) {
      requests.push_back({len, len, std::span<const std::int32_t>(block_ids)});
    }
    slots.assign(d.num_tokens, -1);
    batch.requests = requests;
    batch.slot_mapping = slots;
    shape.num_tokens = d.num_tokens;
    shape.num_reqs = static_cast<int>(requests.size());
    while (shape.num_decodes < shape.num_reqs && lengths[shape.num_decodes] == 1)
      ++shape.num_decodes;
    shape.uniform_decode = shape.num_decodes == shape.num_reqs;
  }
};

}  // namespace

void Engine::State::build_segments() {
  const int n = runner->num_ops();
  // A collective no graph may capture (a LocalGroup's) runs eagerly between the graphs of every
  // mode, which end before it and start after it.
  const auto add_full = [&](int begin, int end, const std::string& label) {
    int part = 0;
    for (int i = begin; i < end;) {
      if (runner->runs_between_graphs(i)) {
        full_segments.push_back({i, i + 1, false, ""});
        ++i;
        continue;
      }
      int j = i;
      while (j < end && !runner->runs_between_graphs(j)) ++j;
      const bool whole = i == begin && j == end;
      std::string name = label;
      if (!whole) name += (name.empty() ? "part=" : ",part=") + std::to_string(part++);
      full_segments.push_back({i, j, true, name});
      i = j;
    }
  };
  if (spec.cuda_graphs.layer_by_layer) {
    for (int i = 0; i < n;) {
      int j = i;
      while (j < n && runner->layer_of(j) == runner->layer_of(i)) ++j;
      const int layer = runner->layer_of(i);
      const std::string name =
          layer >= 0 ? std::to_string(layer) : (i == 0 ? "embedding" : "lm_head");
      add_full(i, j, "layer=" + name);
      i = j;
    }
  } else {
    add_full(0, n, "");
  }
  int piece = 0;
  // Pieces with the same ops (a decoder's middle pieces: one layer's tail, the next one's
  // head) capture graphs of one shape, so they may share executables across layers too.
  std::map<std::string, int> groups_by_ops;
  for (int i = 0; i < n;) {
    if (runner->is_attention(i) || runner->runs_between_graphs(i)) {
      piecewise_segments.push_back({i, i + 1, false, ""});
      ++i;
      continue;
    }
    int j = i;
    std::string ops;
    for (; j < n && !runner->is_attention(j) && !runner->runs_between_graphs(j); ++j) {
      (ops += runner->op_name(j)) += ',';
    }
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
    // (Under DCP with a backend that cannot attend prefill rows over a shard, only decode
    // steps run: no prefill chunks.)
    const std::span<const int> sizes = dispatcher.capture_sizes();
    if (dcp_prefill) {
      for (auto it = sizes.rbegin(); it != sizes.rend(); ++it) warm_up({*it, 0, false});
    }
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
  report.warmup_device_bytes =
      static_cast<std::int64_t>(free_start) - static_cast<std::int64_t>(free_warm);
  report.graph_device_bytes =
      static_cast<std::int64_t>(free_warm) - static_cast<std::int64_t>(free_end);
  report.refused_updates = piecewise_executables.refusals();
  report.total_ms = ms_since(start);
}

void Engine::State::warm_up(const BatchDescriptor& d) {
  const RunShape run{d.num_tokens, padded_reqs(d)};
  const CaptureBatch dummy(d, limits);
  stage(dummy.batch, dummy.shape, run);
  for (const auto& [begin, end] : warm_up_ops) run_ops(begin, end, run, stream.get(), false);
}

void Engine::State::capture_one(const BatchDescriptor& d, RuntimeMode mode) {
  const std::string mode_name(to_string(mode));
  const NvtxRange range("capture[size=" + std::to_string(d.num_tokens) + ",mode=" + mode_name +
                        "]");
  const RunShape run{d.num_tokens, padded_reqs(d)};
  const CaptureBatch dummy(d, limits);
  stage(dummy.batch, dummy.shape, run);
  const cudaStream_t s = stream.get();
  const std::vector<Segment>& segments =
      mode == RuntimeMode::kFull ? full_segments : piecewise_segments;
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
      const int group =
          spec.cuda_graphs.piecewise_sharing != PiecewiseSharing::kNone
              ? segment.sharing_group
              : static_cast<int>(segments.size()) + piecewise_executables.num_graphs();
      pieces.push_back(piecewise_executables.add(group, std::move(graph), s));
    }
    info.instantiate_ms += ms_since(segment_start);
  }
  info.graphs = static_cast<int>(full.size() + pieces.size());
  FF_CUDA_CHECK(cudaMemGetInfo(&free_after, &total));
  info.device_bytes =
      static_cast<std::int64_t>(free_before) - static_cast<std::int64_t>(free_after);
  if (mode == RuntimeMode::kFull) {
    full_graphs[d] = std::move(full);
  } else {
    piecewise_graphs[d] = std::move(pieces);
  }
  report.captured.push_back(info);
}

}  // namespace freezeframe
