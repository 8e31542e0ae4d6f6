#pragma once
// MemoryPlan: every byte the engine will use, as named regions of one arena (offsets and sizes
// in bytes, each region 256-byte aligned), with the tensors placed inside each region and a
// summary of the KV cache and the activations. Pure host data: it can be computed, printed and
// checked on a machine without a GPU; the Arena then makes it real with one allocation.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace freezeframe {

/// What a region holds (for reports and the memory map).
enum class RegionKind {
  kWeights,      ///< parameters of the built-in model
  kActivations,  ///< tensors of the model program, packed by lifetime
  kStaging,      ///< a step's staged inputs and attention metadata, at fixed addresses
  kOutputs,      ///< per-step outputs at fixed addresses (logits)
  kWorkspace,    ///< scratch shared by all layers (backend, split-KV, cuBLAS)
  kKvCache,      ///< the paged KV cache: whatever is left of the budget
};

/// "weights", "activations", ... (as in the JSON output).
[[nodiscard]] std::string_view to_string(RegionKind kind);

/// One tensor inside a region.
struct Placement {
  Placement() = default;
  Placement(std::string name_, std::int64_t offset_, std::int64_t bytes_)
      : name(std::move(name_)), offset(offset_), bytes(bytes_) {}

  std::string name;
  std::int64_t offset = 0;  ///< bytes from the start of the arena
  std::int64_t bytes = 0;
  int first_step = -1;  ///< activations: program steps during which it is live
  int last_step = -1;
  std::string aliases;  ///< non-empty: shares the memory of this placement (KV sharing)
};

struct MemoryRegion {
  std::string name;
  RegionKind kind = RegionKind::kWorkspace;
  std::int64_t offset = 0;  ///< bytes from the start of the arena; a multiple of 256
  std::int64_t bytes = 0;
  std::vector<Placement> placements;

  [[nodiscard]] std::int64_t end() const { return offset + bytes; }
};

/// The KV cache in blocks and tokens.
struct KvCacheSummary {
  std::int64_t num_blocks = 0;
  int block_size = 0;                ///< tokens per block
  std::int64_t bytes_per_block = 0;  ///< summed over the layers that own a cache
  int cache_layers = 0;              ///< layers that own a cache (sharers excluded)
  std::int64_t tokens_per_rank = 0;  ///< num_blocks · block_size
  int tp_world_size = 1;             ///< ranks of the deployment, each planned alike
  int dcp_world_size = 1;
  int dcp_interleave_size = 1;
  /// Tokens the deployment's cache holds: num_blocks · block_size · dcp_world_size (a block id
  /// names a virtual block of block_size · D positions, spread over the DCP group).
  std::int64_t deployment_tokens = 0;
  /// Max-length sequences that fit at once (all ranks together; see the planner for the formula).
  std::int64_t max_concurrent_sequences = 0;
  std::int64_t max_model_len = 0;
};

/// The activation region against what no packing can beat.
struct ActivationSummary {
  std::int64_t peak_bytes = 0;         ///< size of the packed region
  std::int64_t lower_bound_bytes = 0;  ///< max over program steps of live bytes
  int num_tensors = 0;
  int num_steps = 0;
};

class MemoryPlan {
 public:
  static constexpr std::int64_t kAlignment = 256;

  MemoryPlan() = default;
  /// `capacity_bytes`: the budget the arena may use.
  explicit MemoryPlan(std::int64_t capacity_bytes);

  /// Appends a region at the next aligned offset. A repeated name or a negative size throws
  /// kInvalidArgument; exceeding the capacity does not (see check_fits).
  MemoryRegion& add_region(std::string name, RegionKind kind, std::int64_t bytes);
  /// Adds a tensor to `region`; `offset` is relative to the region's start. Throws
  /// kInvalidArgument when it does not lie inside the region.
  void add_placement(std::string_view region, Placement placement);

  [[nodiscard]] std::span<const MemoryRegion> regions() const { return regions_; }
  /// The region called `name`, or nullptr.
  [[nodiscard]] const MemoryRegion* find(std::string_view name) const;
  /// The region called `name`; throws kNotFound naming the known regions.
  [[nodiscard]] const MemoryRegion& region(std::string_view name) const;
  /// Bytes from the arena start to the end of the last region.
  [[nodiscard]] std::int64_t used_bytes() const;
  [[nodiscard]] std::int64_t capacity_bytes() const { return capacity_; }
  /// Throws kOutOfMemory naming the first region that ends past the capacity, and by how much.
  void check_fits() const;

  /// Device memory the plan was made for (the budget is a share of it).
  std::int64_t device_bytes = 0;
  KvCacheSummary kv_cache;
  ActivationSummary activations;
  /// Things that fit but deserve a look (capture sizes off the default grid, ...).
  std::vector<std::string> warnings;

 private:
  MemoryRegion* find_mutable(std::string_view name);

  std::int64_t capacity_ = 0;
  std::vector<MemoryRegion> regions_;
};

}  // namespace freezeframe
