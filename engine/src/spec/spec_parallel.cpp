// The tp and dcp sections of a spec, and what they ask of the model: tensor parallelism splits
// whole heads and equal slices of the MLP over its ranks; decode context parallelism shards by
// token the KV heads that tensor parallelism replicates (docs/DESIGN.md, "Tensor parallelism").

#include <algorithm>
#include <set>
#include <string>

#include "spec/spec_parser.h"

namespace freezeframe::spec_detail {

void SpecParser::parse_tp(const YAML::Node& t) {
  r_.check_keys(t, "tp", {"world_size"});
  if (auto v = r_.read_int(t, "world_size", "tp", 1, kMaxWorldSize)) {
    spec_.tp.world_size = static_cast<int>(*v);
  }
}

void SpecParser::parse_dcp(const YAML::Node& d) {
  r_.check_keys(d, "dcp", {"world_size", "interleave_size"});
  if (auto v = r_.read_int(d, "world_size", "dcp", 1, kMaxWorldSize)) {
    spec_.dcp.world_size = static_cast<int>(*v);
  }
  if (auto v = r_.read_int(d, "interleave_size", "dcp", 1, 1 << 20)) {
    spec_.dcp.interleave_size = static_cast<int>(*v);
  }
}

void SpecParser::check_tp() {
  const int t = spec_.tp.world_size;
  if (t == 1) return;
  const ModelSpec& m = spec_.model;
  const std::string got = ", got " + std::to_string(t);
  if (m.num_heads > 0 && m.num_heads % t != 0) {
    problem("tp.world_size", "must divide model.num_heads " + std::to_string(m.num_heads) +
                                 " (each rank computes whole query heads)" + got);
  }
  // MLA keeps one latent per token, replicated on every rank: no KV heads to split.
  if (!m.is_mla() && m.num_kv_heads > 0 && m.num_kv_heads % t != 0 && t % m.num_kv_heads != 0) {
    problem("tp.world_size", "must divide model.num_kv_heads " + std::to_string(m.num_kv_heads) +
                                 " or be a multiple of it (past the KV heads each one is "
                                 "replicated on tp.world_size / num_kv_heads ranks)" +
                                 got);
  }
  // Gate/up columns and down rows split evenly; each distinct width is reported once.
  std::set<int> widths;
  for (const LayerSpec& layer : m.layers) {
    if (layer.mlp == MlpKind::kGatedSilu) widths.insert(layer.intermediate_size);
    // Each expert's columns and rows split as a dense MLP's do, the shared ones' too.
    if (layer.mlp == MlpKind::kMoe && m.moe) {
      widths.insert(m.moe->intermediate_size);
      if (m.moe->num_shared_experts > 0) {
        widths.insert(m.moe->num_shared_experts * m.moe->intermediate_size);
      }
    }
  }
  for (const int w : widths) {
    if (w > 0 && w % t != 0) {
      problem("tp.world_size", "must divide the MLP's intermediate_size " + std::to_string(w) +
                                   " (gate/up columns and down rows split evenly)" + got);
    }
  }
}

void SpecParser::check_dcp() {
  const DcpSpec& dcp = spec_.dcp;
  const ModelSpec& m = spec_.model;
  const int t = spec_.tp.world_size;
  const std::string got = ", got " + std::to_string(dcp.world_size);
  if (dcp.world_size > 1 && t % dcp.world_size != 0) {
    problem("dcp.world_size", "must divide tp.world_size " + std::to_string(t) +
                                  " (a DCP group is made of tensor-parallel ranks)" + got);
  } else if (dcp.world_size > 1 && model_ok_ && !m.is_mla() && m.num_kv_heads > 0) {
    // The ranks of a DCP group must hold the same KV heads to split them by token: D divides
    // the replication of each KV head, max(1, T / num_kv_heads). MLA's latent is on every rank.
    const int replicas = std::max(1, t / m.num_kv_heads);
    if (replicas % dcp.world_size != 0) {
      problem("dcp.world_size",
              "must divide the replication of each KV head, max(1, tp.world_size " +
                  std::to_string(t) + " / model.num_kv_heads " + std::to_string(m.num_kv_heads) +
                  ") = " + std::to_string(replicas) +
                  " (the ranks of a DCP group split the same KV heads by token)" + got);
    }
  }
  // A key's index in a rank's shard is not its position (the causal mask over a shard is
  // derived from the query's position alone, dcp_shard.h): nothing else may depend on it.
  for (int l = 0; dcp.world_size > 1 && model_ok_ && l < m.num_layers; ++l) {
    const LayerSpec& layer = m.layers[l];
    if (layer.sliding_window > 0 || layer.alibi) {
      problem("dcp.world_size",
              "layer " + std::to_string(l) + " has " +
                  (layer.alibi ? std::string("ALiBi") : std::string("a sliding window")) +
                  ", which needs each key's position; decode context parallelism attends a "
                  "shard of the context without them" +
                  got);
      break;
    }
  }
  if (spec_.cache.block_size % dcp.interleave_size != 0) {
    problem("dcp.interleave_size", "must divide cache.block_size " +
                                       std::to_string(spec_.cache.block_size) +
                                       " (a block holds whole interleave runs), got " +
                                       std::to_string(dcp.interleave_size));
  }
}

}  // namespace freezeframe::spec_detail
