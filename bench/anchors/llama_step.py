#!/usr/bin/env python3
"""PyTorch anchor for one Llama-3.1-8B-shaped decode or prefill step, eager and as a CUDA graph.

For each batch size, one decode step in bf16 with deterministic random weights: embedding of B
token ids, then per layer RMSNorm -> fused QKV projection -> Neox RoPE at position context-1
(a per-request position tensor on the device) -> write of the new K and V into a preallocated
contiguous KV cache [batch, kv_heads, max_context, head] (index_copy_) -> SDPA of the single
query over the first `context` cached positions (enable_gqa) -> o_proj + residual -> RMSNorm ->
fused gate_up -> SiLU(gate) * up -> down + residual; then final RMSNorm -> lm_head -> float32
logits [B, vocab]. Plain torch ops; with --compile, also torch.compile(mode="reduce-overhead")
of the same step (fused elementwise ops and its own CUDA graphs). Weights (~16 GB) far exceed L2.

Reported per batch: eager step time (median of CUDA-event timings after warm-up), the step
captured in a torch.cuda.CUDAGraph (warm-up on a side stream): host wall time of the capture
block (synchronised before and after, so it includes instantiation), median replay time (CUDA
events around replays enqueued back to back, one synchronisation at the end, as `freezeframe
bench` times the engine's graphs), free device memory before and after capture, and the largest
difference between eager and graph logits. With --gemms-only, a graph holding only the four
GEMMs per layer (qkv, o, gate_up, down; no lm_head) is timed as well, for reference.

Prefill steps (--prefill 1x8192,4x2048,...: B requests of N new tokens each, after
--prefill-context C cached ones, like `freezeframe bench --prefill`): the same layers over B*N
tokens (cuBLAS GEMMs through F.linear in bf16), RoPE at positions C..C+N-1, the new K and V
written into a contiguous cache [B, kv_heads, C+N, head] (a static slice copy), then SDPA of
the N queries of each request over its C+N keys with enable_gqa, once per backend of
--prefill-sdpa (default cudnn and flash, each forced with sdpa_kernel). Every request has the
same lengths, so one batched SDPA call serves them. Without a context the mask is is_causal;
with one the causal mask must be aligned to the bottom right (query i sees keys up to C+i),
which is_causal is not when N < C+N: --prefix-mask lower_right (default) passes
torch.nn.attention.bias.causal_lower_right, which the flash and memory-efficient kernels run
natively and other backends receive materialised; --prefix-mask explicit passes a boolean
[N, C+N] mask to every backend. A backend that cannot run a shape is reported as failed for
that row. The LM head runs on each request's last token. Reported per shape and backend:
eager and graph ms, capture ms, and model TFLOP/s of the graph replay (2 per parameter per
token for the layers' matrices, the LM head on B rows, and 4*heads*head per query-key pair).
With --prefill and no --batches only prefill steps run.

With --fp8 the four projections of every layer run W8A8 as `freezeframe` runs them under
model.quantization fp8: weights in float8_e4m3fn with a float32 scale per output row
(max|row| / 448), each projection's input quantised per token the same way, and
torch._scaled_mm with those row-wise scales (float32 accumulation, bf16 out); the embedding,
norms, attention and LM head stay bf16.

usage: python3 bench/anchors/llama_step.py --json $OUT/llama_step_anchor.json
       [--batches 1,8,64,256] [--context 1024] [--gemms-only] [--sdpa auto|flash|cudnn|efficient|math]
       [--prefill 1x8192,4x2048,16x512,64x128] [--prefill-context C] [--prefill-sdpa cudnn,flash]
       [--prefix-mask lower_right|explicit] [--fp8] [--ours freezeframe_bench.json]
"""

import argparse
import contextlib
import gc
import json
import statistics
import time
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from timing import back_to_back_times, event_times

DTYPE = torch.bfloat16
ITEMSIZE = torch.finfo(DTYPE).bits // 8
HAS_RMS_NORM = hasattr(F, "rms_norm")
BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}


def rms_norm(x, weight, eps):
    if HAS_RMS_NORM:
        return F.rms_norm(x, (x.shape[-1],), weight, eps)
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * weight


def rope(x, cos, sin):
    """Neox-style rotation of x [B, heads, head] by cos/sin [B, 1, head/2]."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


FP8_MAX = 448.0


def quantize_rows(t):
    """float8_e4m3fn rows of t and their float32 scales [rows, 1] (max|row| / 448; 1 for zeros)."""
    amax = t.abs().amax(dim=-1, keepdim=True).float()
    scale = torch.where(amax > 0, amax / FP8_MAX, torch.ones_like(amax))
    return (t.float() * (FP8_MAX / torch.where(amax > 0, amax, torch.ones_like(amax)))).to(torch.float8_e4m3fn), scale


def linear(x, weight):
    """x @ weight.T: F.linear for a bf16 weight, W8A8 through torch._scaled_mm for an fp8 one
    ((fp8 weight [N, K], float32 scales [1, N]))."""
    if not isinstance(weight, tuple):
        return F.linear(x, weight)
    wq, ws = weight
    xq, xs = quantize_rows(x.reshape(-1, x.shape[-1]))
    y = torch._scaled_mm(xq, wq.t(), scale_a=xs, scale_b=ws, out_dtype=DTYPE)
    return y.reshape(*x.shape[:-1], wq.shape[0])


def to_fp8(weight):
    q, scale = quantize_rows(weight)
    return q, scale.reshape(1, -1).contiguous()


def randn(*shape, scale=1.0):
    return torch.randn(shape, device="cuda", dtype=DTYPE).mul_(scale)


def make_weights(c):
    qkv_rows = (c.heads + 2 * c.kv_heads) * c.head_dim
    layers = [SimpleNamespace(
        ln1=torch.ones(c.hidden, device="cuda", dtype=DTYPE),
        qkv=randn(qkv_rows, c.hidden, scale=c.hidden ** -0.5),
        o=randn(c.hidden, c.heads * c.head_dim, scale=(c.heads * c.head_dim) ** -0.5),
        ln2=torch.ones(c.hidden, device="cuda", dtype=DTYPE),
        gate_up=randn(2 * c.intermediate, c.hidden, scale=c.hidden ** -0.5),
        down=randn(c.hidden, c.intermediate, scale=c.intermediate ** -0.5),
    ) for _ in range(c.layers)]
    if c.fp8:
        for layer in layers:
            for name in ("qkv", "o", "gate_up", "down"):
                setattr(layer, name, to_fp8(getattr(layer, name)))
    return SimpleNamespace(embed=randn(c.vocab, c.hidden), layers=layers,
                           norm=torch.ones(c.hidden, device="cuda", dtype=DTYPE),
                           lm_head=randn(c.vocab, c.hidden, scale=c.hidden ** -0.5))


def make_step(w, c, batch):
    """Static inputs, KV caches and a step closure for one batch size."""
    ids = torch.randint(c.vocab, (batch,), device="cuda")
    pos = torch.full((batch,), c.context - 1, device="cuda", dtype=torch.long)
    caches = [(randn(batch, c.kv_heads, c.max_context, c.head_dim), randn(batch, c.kv_heads, c.max_context, c.head_dim))
              for _ in range(c.layers)]
    inv_freq = c.rope_theta ** -(torch.arange(0, c.head_dim, 2, device="cuda", dtype=torch.float32) / c.head_dim)
    # row of (request b, kv head h, position 0) in the cache viewed as [batch * kv_heads * max_context, head]
    base_rows = (torch.arange(batch, device="cuda")[:, None] * c.kv_heads + torch.arange(c.kv_heads, device="cuda")) * c.max_context
    q_size, kv_size = c.heads * c.head_dim, c.kv_heads * c.head_dim

    def step():
        h = F.embedding(ids, w.embed)
        freqs = pos[:, None].float() * inv_freq
        cos, sin = freqs.cos().to(DTYPE)[:, None], freqs.sin().to(DTYPE)[:, None]
        rows = (base_rows + pos[:, None]).reshape(-1)
        for layer, (k_cache, v_cache) in zip(w.layers, caches):
            q, k, v = linear(rms_norm(h, layer.ln1, c.rms_eps), layer.qkv).split([q_size, kv_size, kv_size], dim=-1)
            q = rope(q.view(batch, c.heads, c.head_dim), cos, sin)
            k = rope(k.view(batch, c.kv_heads, c.head_dim), cos, sin)
            k_cache.view(-1, c.head_dim).index_copy_(0, rows, k.reshape(-1, c.head_dim))
            v_cache.view(-1, c.head_dim).index_copy_(0, rows, v.reshape(-1, c.head_dim))
            attn = F.scaled_dot_product_attention(q[:, :, None], k_cache[:, :, :c.context], v_cache[:, :, :c.context],
                                                  enable_gqa=True)
            h = h + linear(attn.reshape(batch, q_size), layer.o)
            gate, up = linear(rms_norm(h, layer.ln2, c.rms_eps), layer.gate_up).chunk(2, dim=-1)
            h = h + linear(F.silu(gate) * up, layer.down)
        return F.linear(rms_norm(h, w.norm, c.rms_eps), w.lm_head).float()

    return step, sum(k.numel() + v.numel() for k, v in caches) * ITEMSIZE


def make_gemm_step(w, c, batch):
    x, attn, act = randn(batch, c.hidden), randn(batch, c.heads * c.head_dim), randn(batch, c.intermediate)

    def step():
        for layer in w.layers:
            linear(x, layer.qkv)
            linear(attn, layer.o)
            linear(x, layer.gate_up)
            linear(act, layer.down)
    return step


def prefix_mask(n, total, kind):
    """The causal mask of N queries at the end of TOTAL keys (query i sees keys 0..TOTAL-N+i)."""
    if kind == "explicit":
        rows = torch.arange(n, device="cuda")[:, None] + (total - n)
        return torch.arange(total, device="cuda")[None, :] <= rows
    from torch.nn.attention.bias import causal_lower_right
    return causal_lower_right(n, total)


def make_prefill_step(w, c, batch, new, context, mask_kind):
    """Static inputs, KV caches holding `context` cached positions, and a step closure for
    `batch` requests of `new` tokens each."""
    total = context + new
    ids = torch.randint(c.vocab, (batch * new,), device="cuda")
    pos = torch.arange(context, total, device="cuda")
    caches = [(randn(batch, c.kv_heads, total, c.head_dim), randn(batch, c.kv_heads, total, c.head_dim))
              for _ in range(c.layers)]
    inv_freq = c.rope_theta ** -(torch.arange(0, c.head_dim, 2, device="cuda", dtype=torch.float32) / c.head_dim)
    q_size, kv_size = c.heads * c.head_dim, c.kv_heads * c.head_dim
    mask = prefix_mask(new, total, mask_kind) if context > 0 else None

    def attention(q, k, v):
        if mask is None:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)

    def step():
        h = F.embedding(ids, w.embed)
        freqs = pos[:, None].float() * inv_freq
        cos, sin = freqs.cos().to(DTYPE)[:, None], freqs.sin().to(DTYPE)[:, None]  # [new, 1, head/2]
        for layer, (k_cache, v_cache) in zip(w.layers, caches):
            q, k, v = linear(rms_norm(h, layer.ln1, c.rms_eps), layer.qkv).split([q_size, kv_size, kv_size], dim=-1)
            q = rope(q.view(batch, new, c.heads, c.head_dim), cos, sin)
            k = rope(k.view(batch, new, c.kv_heads, c.head_dim), cos, sin)
            k_cache[:, :, context:].copy_(k.transpose(1, 2))
            v_cache[:, :, context:].copy_(v.view(batch, new, c.kv_heads, c.head_dim).transpose(1, 2))
            attn = attention(q.transpose(1, 2), k_cache, v_cache)  # [batch, heads, new, head]
            h = h + linear(attn.transpose(1, 2).reshape(batch * new, q_size), layer.o)
            gate, up = linear(rms_norm(h, layer.ln2, c.rms_eps), layer.gate_up).chunk(2, dim=-1)
            h = h + linear(F.silu(gate) * up, layer.down)
        last = h.view(batch, new, c.hidden)[:, -1]
        return F.linear(rms_norm(last, w.norm, c.rms_eps), w.lm_head).float()

    return step


def prefill_flops(c, batch, new, context):
    """Model FLOPs of a prefill step, as `freezeframe bench` counts them."""
    layer_params = ((c.heads + 2 * c.kv_heads) * c.head_dim * c.hidden + c.heads * c.head_dim * c.hidden
                    + 3 * c.intermediate * c.hidden) * c.layers
    pairs = new * context + new * (new + 1) // 2
    return (2 * layer_params * batch * new + 2 * c.vocab * c.hidden * batch
            + 4 * c.heads * c.head_dim * c.layers * batch * pairs)


def capture(fn, warmup):
    """Capture fn into a CUDA graph; returns graph, its output, capture ms, free bytes before/after."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    free_before = torch.cuda.mem_get_info()[0]
    graph = torch.cuda.CUDAGraph()
    torch.cuda.synchronize()
    start = time.perf_counter()
    with torch.cuda.graph(graph):
        out = fn()
    torch.cuda.synchronize()
    capture_ms = (time.perf_counter() - start) * 1e3
    return graph, out, capture_ms, free_before, torch.cuda.mem_get_info()[0]


def bench_batch(w, c, batch, args):
    step, kv_bytes = make_step(w, c, batch)
    eager = event_times(step, args.iterations, args.warmup)
    eager_logits = step().clone()
    graph, logits, capture_ms, free_before, free_after = capture(step, args.warmup)
    start = time.perf_counter()
    graph.replay()
    torch.cuda.synchronize()
    first_replay_ms = (time.perf_counter() - start) * 1e3
    # Replays back to back, as `freezeframe bench` runs the engine's graphs.
    replays = back_to_back_times(graph.replay, args.iterations, args.warmup)
    graph_ms = statistics.median(replays)
    kv_read = kv_bytes * c.context // c.max_context
    result = {
        "batch": batch, "eager_ms": statistics.median(eager), "eager_ms_min": min(eager),
        "graph_ms": graph_ms, "graph_ms_min": min(replays), "capture_ms": capture_ms, "first_replay_ms": first_replay_ms,
        "free_before_capture_bytes": free_before, "free_after_capture_bytes": free_after, "graph_bytes": free_before - free_after,
        "kv_cache_bytes": kv_bytes, "bytes_per_step": c.streamed_weight_bytes + kv_read,
        "graph_tbs": (c.streamed_weight_bytes + kv_read) / (graph_ms * 1e-3) / 1e12,
        "logits_finite": bool(torch.isfinite(logits).all()),
        "max_abs_diff_graph_vs_eager": (logits - eager_logits).abs().max().item(),
    }
    del graph, logits
    if args.compile:
        # torch.compile of the same step with its own CUDA graphs ("reduce-overhead"): fused
        # elementwise ops, the anchor a PyTorch user would reach for.
        start = time.perf_counter()
        compiled = torch.compile(step, mode="reduce-overhead", fullgraph=True)
        for _ in range(3):
            compiled_logits = compiled()
        torch.cuda.synchronize()
        compile_s = time.perf_counter() - start
        times = back_to_back_times(compiled, args.iterations, args.warmup)
        result.update(compiled_ms=statistics.median(times), compiled_ms_min=min(times),
                      compile_s=compile_s,
                      max_abs_diff_compiled_vs_eager=(compiled_logits - eager_logits).abs().max().item())
        del compiled, compiled_logits
    del eager_logits, step
    if args.gemms_only:
        gemm_graph, _, gemm_capture_ms, _, _ = capture(make_gemm_step(w, c, batch), args.warmup)
        gemm = back_to_back_times(gemm_graph.replay, args.iterations, args.warmup)
        result.update(gemms_graph_ms=statistics.median(gemm), gemms_capture_ms=gemm_capture_ms)
    return result


def bench_prefill(w, c, shape, sdpa, args):
    batch, new = shape
    step = make_prefill_step(w, c, batch, new, args.prefill_context, args.prefix_mask)
    with sdpa_kernel(BACKENDS[sdpa]):
        eager = event_times(step, args.iterations, args.warmup)
        eager_logits = step().clone()
        graph, logits, capture_ms, free_before, free_after = capture(step, args.warmup)
        replays = back_to_back_times(graph.replay, args.iterations, args.warmup)
    graph_ms = statistics.median(replays)
    flops = prefill_flops(c, batch, new, args.prefill_context)
    result = {
        "b": batch, "n": new, "context": args.prefill_context, "sdpa": sdpa,
        "mask": "is_causal" if args.prefill_context == 0 else args.prefix_mask,
        "eager_ms": statistics.median(eager), "graph_ms": graph_ms, "graph_ms_min": min(replays),
        "capture_ms": capture_ms, "graph_bytes": free_before - free_after, "flops": flops,
        "eager_tflops": flops / (statistics.median(eager) * 1e-3) / 1e12,
        "graph_tflops": flops / (graph_ms * 1e-3) / 1e12,
        "logits_finite": bool(torch.isfinite(logits).all()),
        "max_abs_diff_graph_vs_eager": (logits - eager_logits).abs().max().item(),
    }
    del graph, logits, eager_logits, step
    return result


def parse_shapes(text):
    """'1x8192,4x2048' -> [(1, 8192), (4, 2048)]."""
    shapes = []
    for item in text.split(","):
        b, sep, n = item.strip().partition("x")
        if not sep or not b.isdigit() or not n.isdigit() or int(b) < 1 or int(n) < 1:
            raise SystemExit(f"--prefill: '{item}' is not BxN (B requests of N new tokens each, e.g. 4x2048)")
        shapes.append((int(b), int(n)))
    return shapes


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", help="comma-separated decode batch sizes (default 1,8,64,256; none with only --prefill)")
    parser.add_argument("--context", type=int, default=1024, help="tokens per request, including the new one")
    parser.add_argument("--max-context", type=int, help="KV cache capacity per request (default: --context)")
    parser.add_argument("--iterations", type=int, default=50, help="timed steps / replays per mode")
    parser.add_argument("--warmup", type=int, default=5, help="untimed calls before timing and before capture")
    for flag, default in (("hidden", 4096), ("layers", 32), ("heads", 32), ("kv-heads", 8), ("head-dim", 128),
                          ("intermediate", 14336), ("vocab", 128256), ("rope-theta", 500000.0), ("rms-eps", 1e-5), ("seed", 0)):
        parser.add_argument(f"--{flag}", type=type(default), default=default, help="model shape" if flag != "seed" else None)
    parser.add_argument("--sdpa", choices=["auto", *BACKENDS], default="auto", help="force one SDPA backend (decode)")
    parser.add_argument("--gemms-only", action="store_true", help="also time a graph of only the 4 GEMMs per layer")
    parser.add_argument("--compile", action="store_true",
                        help="also time torch.compile(mode='reduce-overhead') of the decode step")
    parser.add_argument("--prefill", help="prefill steps, comma-separated BxN (B requests of N new tokens each)")
    parser.add_argument("--prefill-context", type=int, default=0, help="tokens cached before each prefill request's new ones")
    parser.add_argument("--prefill-sdpa", default="cudnn,flash", help="SDPA backends the prefill steps run on, each forced")
    parser.add_argument("--prefix-mask", choices=["lower_right", "explicit"], default="lower_right",
                        help="the causal mask with a context: causal_lower_right or a boolean [N, C+N] mask")
    parser.add_argument("--fp8", action="store_true",
                        help="W8A8 projections: fp8 weights and per-token fp8 inputs through torch._scaled_mm")
    parser.add_argument("--json", help="write results as one JSON object to this path")
    parser.add_argument("--ours", help="JSON of `freezeframe bench` on the same shapes, printed side by side")
    args = parser.parse_args()
    if args.batches is None:
        args.batches = "" if args.prefill else "1,8,64,256"
    batches = [int(b) for b in args.batches.split(",") if b.strip()]
    prefill_shapes = parse_shapes(args.prefill) if args.prefill else []
    prefill_sdpa = [b.strip() for b in args.prefill_sdpa.split(",") if b.strip()]
    unknown = [b for b in prefill_sdpa if b not in BACKENDS]
    if unknown or args.prefill_context < 0:
        raise SystemExit(f"--prefill-sdpa takes {', '.join(BACKENDS)}; --prefill-context a count >= 0")
    c = SimpleNamespace(**{k: getattr(args, k) for k in ("context", "hidden", "layers", "heads", "kv_heads", "head_dim",
                                                          "intermediate", "vocab", "rope_theta", "rms_eps")})
    c.max_context = args.max_context or args.context
    c.fp8 = args.fp8
    assert c.max_context >= c.context and c.heads % c.kv_heads == 0 and c.head_dim % 2 == 0

    torch.manual_seed(args.seed)
    with torch.no_grad():
        w = make_weights(c)
        layer_bytes = c.layers * sum(sum(t.numel() * t.element_size() for t in (v if isinstance(v, tuple) else (v,)))
                                     for v in vars(w.layers[0]).values())
        shapes = {**vars(c), "tied_lm_head": False}
        c.streamed_weight_bytes = layer_bytes + (w.lm_head.numel() + w.norm.numel()) * ITEMSIZE
        weight_bytes = c.streamed_weight_bytes + w.embed.numel() * ITEMSIZE
        print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, weights {weight_bytes / 2**30:.2f} GiB, "
              f"context {c.context}, sdpa {args.sdpa}, rms_norm {'F.rms_norm' if HAS_RMS_NORM else 'manual'}"
              f"{', fp8 projections (torch._scaled_mm)' if c.fp8 else ''}")
        results = run_decode(w, c, batches, args) if batches else []
        prefill = run_prefill(w, c, prefill_shapes, prefill_sdpa, args) if prefill_shapes else []

    total_capture_ms = sum(r.get("capture_ms", 0.0) for r in results + prefill)
    total_graph_bytes = sum(r.get("graph_bytes", 0) for r in results + prefill)
    print(f"total capture ms: {total_capture_ms:.1f}, total graph memory {total_graph_bytes / 2**20:.1f} MiB")
    if args.json:
        report = {
            "anchor": "llama_step", "device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "cuda": torch.version.cuda, "dtype": "bfloat16", "fp8_projections": args.fp8, "sdpa": args.sdpa,
            "rms_norm": "F.rms_norm" if HAS_RMS_NORM else "manual",
            "shapes": shapes, "weight_bytes": weight_bytes, "streamed_weight_bytes": c.streamed_weight_bytes,
            "iterations": args.iterations, "warmup": args.warmup, "seed": args.seed,
            "total_capture_ms": total_capture_ms, "total_graph_bytes": total_graph_bytes, "results": results,
            "prefill_context": args.prefill_context, "prefix_mask": args.prefix_mask, "prefill": prefill,
        }
        with open(args.json, "w") as out:
            json.dump(report, out, indent=2)
            out.write("\n")
    if args.ours:
        with open(args.ours) as f:
            ours = json.load(f)
        if results:
            side_by_side(ours, results)
        if prefill:
            prefill_side_by_side(ours, prefill)
    print("anchor llama_step: done")


def failure(error):
    return str(error).splitlines()[0][:160] if str(error) else type(error).__name__


def run_decode(w, c, batches, args):
    header = f"{'batch':>5} | {'eager ms':>9} | {'graph ms':>9} {'TB/s':>5} | {'capture ms':>10} | {'graph MiB':>9}"
    header += f" | {'gemms ms':>8}" if args.gemms_only else ""
    header += f" | {'compiled ms':>11}" if args.compile else ""
    print(header)
    print("-" * len(header))
    results = []
    for batch in batches:
        torch.manual_seed(args.seed + batch)
        backend = sdpa_kernel(BACKENDS[args.sdpa]) if args.sdpa != "auto" else contextlib.nullcontext()
        try:
            with backend:
                r = bench_batch(w, c, batch, args)
        except (RuntimeError, torch.OutOfMemoryError) as error:
            print(f"{batch:>5} | failed: {failure(error)}", flush=True)
            r = {"batch": batch, "error": failure(error)}
        gc.collect()
        torch.cuda.empty_cache()
        results.append(r)
        if "error" in r:
            continue
        line = (f"{batch:>5} | {r['eager_ms']:>9.3f} | {r['graph_ms']:>9.3f} {r['graph_tbs']:>5.2f} | "
                f"{r['capture_ms']:>10.1f} | {r['graph_bytes'] / 2**20:>9.1f}")
        line += f" | {r['gemms_graph_ms']:>8.3f}" if args.gemms_only else ""
        line += f" | {r['compiled_ms']:>11.3f}" if args.compile else ""
        print(line + ("" if r["logits_finite"] else "  (non-finite logits)"), flush=True)
    return results


def run_prefill(w, c, shapes, backends, args):
    mask = "is_causal" if args.prefill_context == 0 else args.prefix_mask
    print(f"prefill after {args.prefill_context} cached tokens per request (mask {mask})")
    header = (f"{'b x n':>10} {'sdpa':>6} | {'eager ms':>9} | {'graph ms':>9} {'TFLOP/s':>8} | "
              f"{'capture ms':>10} | {'graph MiB':>9}")
    print(header)
    print("-" * len(header))
    results = []
    for b, n in shapes:
        for sdpa in backends:
            torch.manual_seed(args.seed + b * n)
            name = f"{b}x{n}"
            try:
                r = bench_prefill(w, c, (b, n), sdpa, args)
            except (RuntimeError, torch.OutOfMemoryError) as error:
                print(f"{name:>10} {sdpa:>6} | failed: {failure(error)}", flush=True)
                r = {"b": b, "n": n, "context": args.prefill_context, "sdpa": sdpa, "error": failure(error)}
            gc.collect()
            torch.cuda.empty_cache()
            results.append(r)
            if "error" in r:
                continue
            print(f"{name:>10} {sdpa:>6} | {r['eager_ms']:>9.3f} | {r['graph_ms']:>9.3f} {r['graph_tflops']:>8.1f} | "
                  f"{r['capture_ms']:>10.1f} | {r['graph_bytes'] / 2**20:>9.1f}"
                  + ("" if r["logits_finite"] else "  (non-finite logits)"), flush=True)
    return results


def side_by_side(ours, results):
    """Freezeframe's full-graph decode step next to PyTorch's CUDA graph, per batch."""
    by_batch = {r["batch"]: r for r in ours["results"]}
    print(f"\nFreezeframe ({ours['spec']}, {ours['backend']}) vs PyTorch, decode step, context {ours['context']}")
    # Host time of one step() right after a synchronize, and with the GPU running the previous step.
    print("batch | ours full ms | torch graph ms | ours/torch | ours eager ms | torch eager ms | ours host us (busy)")
    for r in results:
        o = by_batch.get(r["batch"])
        if o is None or "error" in r or not o["full_ms"]:
            continue
        busy = o.get("host_us_gpu_busy")
        print(f"{r['batch']:>5} | {o['full_ms']:>12.3f} | {r['graph_ms']:>14.3f} | {o['full_ms'] / r['graph_ms']:>10.3f} | "
              f"{o['eager_ms']:>13.3f} | {r['eager_ms']:>14.3f} | {o['host_us_per_step']:>12.1f}"
              + (f" ({busy:.1f})" if busy is not None else ""))
    torch_capture = sum(r.get("capture_ms", 0.0) for r in results)
    print(f"capture: ours {ours['graphs']} graphs of every size in {ours['capture_total_ms']:.0f} ms, "
          f"{ours['graph_device_bytes'] / 2**20:.1f} MiB; torch {len(results)} graphs in {torch_capture:.0f} ms")


def prefill_side_by_side(ours, results):
    """Freezeframe's prefill step (in the mode its dispatcher runs it in) next to PyTorch's CUDA
    graph and eager step, per shape and SDPA backend; ratio ours / torch graph."""
    by_shape = {(r["b"], r["n"], r["context"]): r for r in ours.get("prefill", [])}
    print(f"\nFreezeframe ({ours['spec']}, {ours['backend']}) vs PyTorch, prefill step")
    print("     b x n  context  sdpa | ours ms (mode)    | torch graph ms | ours/torch | ours eager ms | "
          "torch eager ms | ours TFLOP/s | torch TFLOP/s")
    for r in results:
        o = by_shape.get((r["b"], r["n"], r["context"]))
        if o is None or "error" in r or not o.get("ms"):
            continue
        name = f"{r['b']}x{r['n']}"
        mode = f"{o['ms']:.3f} ({o['mode']})"
        print(f"{name:>10} {r['context']:>8} {r['sdpa']:>5} | {mode:<17} | {r['graph_ms']:>14.3f} | "
              f"{o['ms'] / r['graph_ms']:>10.3f} | {o['eager_ms']:>13.3f} | {r['eager_ms']:>14.3f} | "
              f"{o['tflops']:>12.1f} | {r['graph_tflops']:>13.1f}")


if __name__ == "__main__":
    main()
