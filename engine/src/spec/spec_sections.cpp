// The cache, scheduler and cuda_graphs sections of a spec, with their defaults and the
// checks between them.

#include <algorithm>
#include <string>
#include <vector>

#include "freezeframe/base/printable.h"
#include "freezeframe/engine/spec/byte_size.h"
#include "spec/spec_parser.h"

namespace freezeframe::spec_detail {
namespace {

const std::vector<std::string> kCacheDTypes = {"auto",     "bf16",     "f16",      "fp8",
                                               "fp8_e4m3", "fp8_e5m2", "bfloat16", "float16"};
const std::vector<std::string> kSharings = {"across_sizes", "across_layers", "none", "true",
                                            "false"};
const std::vector<std::string> kGraphModes = {"none", "piecewise", "full", "full_decode_only",
                                              "full_and_piecewise"};

}  // namespace

void SpecParser::parse_cache(const YAML::Node& c) {
  r_.check_keys(c, "cache", {"block_size", "dtype", "memory_budget"});
  CacheSpec& cache = spec_.cache;
  if (auto v = r_.read_int(c, "block_size", "cache", 1, 4096)) {
    if ((*v & (*v - 1)) != 0) {
      r_.problem(SpecReader::child(c, "block_size"), "cache.block_size",
                 "must be a power of two, got " + std::to_string(*v));
    } else {
      cache.block_size = static_cast<int>(*v);
    }
  }
  if (auto v = r_.read_choice(c, "dtype", "cache", kCacheDTypes)) {
    if (*v != "auto") cache.dtype = parse_dtype(*v);
  }
  const YAML::Node budget = SpecReader::child(c, "memory_budget");
  if (!budget.IsDefined()) return;
  const std::string path = "cache.memory_budget";
  r_.remember(path, budget);
  const std::string text = budget.IsScalar() ? budget.Scalar() : std::string();
  bool out_of_range = false;
  const std::optional<double> fraction = parse_yaml_number(text, out_of_range);
  if (fraction && *fraction > 0 && *fraction <= 1) {
    cache.memory_budget.fraction = *fraction;
  } else if (auto bytes = parse_byte_size(text); bytes && *bytes > 1) {
    cache.memory_budget.bytes = *bytes;
  } else {
    r_.problem(budget, path,
               "expected a fraction of device memory in (0, 1] or a size such as 70GiB, got " +
                   (budget.IsScalar() ? quote(text)
                                      : std::string(budget.IsSequence() ? "a list" : "a mapping")));
  }
}

void SpecParser::parse_scheduler(const YAML::Node& s) {
  r_.check_keys(
      s, "scheduler",
      {"max_num_seqs", "max_num_batched_tokens", "max_model_len", "max_prefill_context_tokens"});
  SchedulerSpec& sched = spec_.scheduler;
  if (auto v = r_.read_int(s, "max_num_seqs", "scheduler", 1, 1 << 20)) {
    sched.max_num_seqs = static_cast<int>(*v);
  }
  if (auto v = r_.read_int(s, "max_num_batched_tokens", "scheduler", 1, kMaxBatchedTokens)) {
    sched.max_num_batched_tokens = static_cast<int>(*v);
  }
  if (auto v = r_.read_int(s, "max_model_len", "scheduler", 1, kMaxPositions)) {
    if (*v < kMinModelLen) {
      r_.problem(SpecReader::child(s, "max_model_len"), "scheduler.max_model_len",
                 kMinModelLenReason + std::to_string(*v));
    } else {
      sched.max_model_len = *v;
    }
  }
  if (auto v = r_.read_int(s, "max_prefill_context_tokens", "scheduler", 0, kMaxPositions)) {
    sched.max_prefill_context_tokens = *v;
  }
}

void SpecParser::resolve_scheduler() {
  SchedulerSpec& s = spec_.scheduler;
  // A field that was given but refused has its problem already; no second one about it here.
  const auto given = [&](const char* path) { return spec_.locations.count(path) > 0; };
  if (s.max_model_len == 0) {
    s.max_model_len = spec_.model.max_position_embeddings;
    // A checkpoint that could not be read has its problem already.
    if (s.max_model_len == 0 && !given("scheduler.max_model_len") &&
        !given("model.max_position_embeddings") && !checkpoint_node_.IsDefined()) {
      problem("scheduler.max_model_len",
              "is required when model.max_position_embeddings is not given");
    }
  } else if (spec_.model.max_position_embeddings > 0 &&
             s.max_model_len > spec_.model.max_position_embeddings) {
    problem("scheduler.max_model_len",
            "is " + std::to_string(s.max_model_len) + ", longer than the model's " +
                "max_position_embeddings " + std::to_string(spec_.model.max_position_embeddings));
  }
  if (s.max_num_batched_tokens < s.max_num_seqs) {
    problem("scheduler.max_num_batched_tokens",
            "is " + std::to_string(s.max_num_batched_tokens) +
                ", fewer than scheduler.max_num_seqs " + std::to_string(s.max_num_seqs) +
                ": a step must fit one token of every sequence");
  }
}

void SpecParser::parse_cuda_graphs(const YAML::Node& g) {
  r_.check_keys(g, "cuda_graphs",
                {"mode", "capture_sizes", "max_capture_size", "layer_by_layer",
                 "share_piecewise_executables"});
  CudaGraphSpec& graphs = spec_.cuda_graphs;
  if (auto v = r_.read_choice(g, "mode", "cuda_graphs", kGraphModes)) {
    graphs.mode = parse_graph_mode(*v).value_or(CudaGraphMode::kFullAndPiecewise);
  }
  if (auto v = r_.read_bool(g, "layer_by_layer", "cuda_graphs")) graphs.layer_by_layer = *v;
  if (auto v = r_.read_choice(g, "share_piecewise_executables", "cuda_graphs", kSharings)) {
    graphs.piecewise_sharing = *v == "across_layers"             ? PiecewiseSharing::kAcrossLayers
                               : (*v == "none" || *v == "false") ? PiecewiseSharing::kNone
                                                                 : PiecewiseSharing::kAcrossSizes;
  }
  if (auto v = r_.read_int(g, "max_capture_size", "cuda_graphs", 1, kMaxCaptureSize)) {
    max_capture_size_ = static_cast<int>(*v);
  }
  capture_sizes_node_ = SpecReader::child(g, "capture_sizes");
}

void SpecParser::resolve_capture_sizes() {
  CudaGraphSpec& graphs = spec_.cuda_graphs;
  const int max_tokens = spec_.scheduler.max_num_batched_tokens;
  const YAML::Node& node = capture_sizes_node_;
  const std::string path = "cuda_graphs.capture_sizes";
  if (node.IsDefined()) {
    r_.remember(path, node);
    if (!node.IsSequence()) {
      r_.problem(node, path, "expected a list of batch sizes (tokens per step)");
      return;
    }
    // Every size is a set of captured graphs: a list longer than this is a mistake, and is
    // refused before its items are read.
    if (node.size() > kMaxCaptureSizes) {
      r_.problem(node, path,
                 "lists " + std::to_string(node.size()) + " sizes, more than the " +
                     std::to_string(kMaxCaptureSizes) + " a spec may capture");
      return;
    }
    if (max_capture_size_) {
      problem("cuda_graphs.max_capture_size", "set capture_sizes or max_capture_size, not both");
    }
    graphs.capture_sizes_explicit = true;
    std::vector<int> sizes;
    for (std::size_t i = 0; i < node.size(); ++i) {
      const std::string item = path + "[" + std::to_string(i) + "]";
      auto v = r_.as_int(node[i], item, 0, kMaxBatchedTokens);
      if (!v) continue;
      const int size = static_cast<int>(*v);
      if (size == 0) {
        r_.problem(node[i], item, "capture sizes must be positive, got 0");
        continue;
      }
      if (size > max_tokens) {
        r_.problem(node[i], item,
                   "capture size " + std::to_string(size) +
                       " is above scheduler.max_num_batched_tokens " + std::to_string(max_tokens));
        continue;
      }
      // Sizes ascend, so a repeat can only be of the previous size.
      if (!sizes.empty() && size == sizes.back()) {
        r_.problem(node[i], item, "capture size " + std::to_string(size) + " is duplicated");
        continue;
      }
      if (!sizes.empty() && size < sizes.back()) {
        r_.problem(node[i], item,
                   "capture sizes must be sorted ascending: " + std::to_string(size) +
                       " comes after " + std::to_string(sizes.back()));
        continue;
      }
      sizes.push_back(size);
    }
    graphs.capture_sizes = std::move(sizes);
  } else {
    int max_size = std::min(2 * spec_.scheduler.max_num_seqs, 512);
    if (max_capture_size_) {
      if (*max_capture_size_ > max_tokens) {
        problem("cuda_graphs.max_capture_size", "is " + std::to_string(*max_capture_size_) +
                                                    ", above scheduler.max_num_batched_tokens " +
                                                    std::to_string(max_tokens));
      }
      max_size = *max_capture_size_;
    }
    graphs.capture_sizes = default_capture_sizes(std::min(max_size, max_tokens));
  }
  if (graphs.mode == CudaGraphMode::kNone) graphs.capture_sizes.clear();
  graphs.max_capture_size = graphs.capture_sizes.empty() ? 0 : graphs.capture_sizes.back();
}

}  // namespace freezeframe::spec_detail
