#!/usr/bin/env python3
"""PyTorch anchors for the prefill benchmark, printed side by side with it.

For each configuration of prefill_bench (its JSON lines), times PyTorch's
scaled_dot_product_attention on the same shapes over contiguous [batch, heads, tokens, head]
tensors (GQA through enable_gqa) with the flash and the cuDNN backends, and reports TFLOP/s
counted the same way (4 · heads · head · visible query-key pairs), timed as prefill_bench times
ours (ten calls captured into a CUDA graph, replayed back to back: timing.graph_times). SDPA
reads contiguous tensors: rows that differ only in our cache's block size (blk) time the same
SDPA call. Chunked rows (new tokens over a cached prefix) use flash's native bottom-right causal
mask (torch.nn.attention.bias.causal_lower_right); cuDNN's SDPA builds a dense mask for it (a
slow path no cuDNN user would take), so that cell is left blank, as is the mixed row (no single
SDPA call). Also the bf16 matmul peak of the GPU (torch.matmul, 8192³), in the same run.

usage: prefill_sdpa.py --ours prefill_bench.json [--json combined.json]
"""

import argparse
import json
import statistics

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.bias import causal_lower_right

from timing import graph_times


def time_ms(fn, calls=10):
    return statistics.median(graph_times(lambda i: fn(), calls))


def matmul_peak_tflops(n=8192):
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    ms = time_ms(lambda: torch.matmul(a, b))
    return 2 * n**3 / (ms * 1e-3) / 1e12


def sdpa_ms(backend, row):
    if row["kind"] == "mixed":
        return float("nan")
    if row["kind"] == "chunked" and backend == SDPBackend.CUDNN_ATTENTION:
        return float("nan")  # a dense bottom-right mask: not cuDNN's own path
    b, n, ctx = row["batch"], row["new_tokens"], row["context"]
    h, hkv, d = row["heads"], row["kv_heads"], row["head_size"]
    gen = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    k = torch.randn(b, hkv, ctx + n, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    v = torch.randn(b, hkv, ctx + n, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    kwargs = {"enable_gqa": True}
    if row["kind"] == "causal":
        kwargs["is_causal"] = True
    elif row["kind"] == "chunked":
        kwargs["attn_mask"] = causal_lower_right(n, ctx + n)
    try:
        with sdpa_kernel(backend):
            return time_ms(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, **kwargs))
    except RuntimeError:
        return float("nan")  # the backend does not take this shape or mask
    finally:
        del q, k, v
        torch.cuda.empty_cache()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ours", required=True)
    parser.add_argument("--json")
    args = parser.parse_args()
    rows = [json.loads(line) for line in open(args.ours) if line.strip()]
    peak = matmul_peak_tflops()
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}; bf16 matmul peak {peak:.0f} TFLOP/s")
    header = (f"{'kind':<13} {'batch':>5} {'new':>6} {'ctx':>6} {'heads':>6} {'head':>4} {'blk':>4} | "
              f"{'ours ms':>8} {'TF/s':>6} | {'flash ms':>8} {'TF/s':>6} | {'cuDNN ms':>8} {'TF/s':>6} | "
              f"ours/cuDNN  of peak")
    print(header)
    print("-" * len(header))
    out = []
    for row in rows:
        flops = row["tflops"] * row["median_ms"] * 1e-3 * 1e12
        flash = sdpa_ms(SDPBackend.FLASH_ATTENTION, row)
        cudnn = sdpa_ms(SDPBackend.CUDNN_ATTENTION, row)
        tf = lambda ms: flops / (ms * 1e-3) / 1e12 if ms == ms else float("nan")
        print(f"{row['kind']:<13} {row['batch']:>5} {row['new_tokens']:>6} {row['context']:>6} "
              f"{row['heads']:>3}/{row['kv_heads']:<2} {row['head_size']:>4} "
              f"{row.get('block_size', 0) or '-':>4} | "
              f"{row['median_ms']:>8.3f} {row['tflops']:>6.1f} | {flash:>8.3f} {tf(flash):>6.1f} | "
              f"{cudnn:>8.3f} {tf(cudnn):>6.1f} | {row['tflops'] / tf(cudnn) if cudnn == cudnn else float('nan'):>10.2f}"
              f"  {100 * row['tflops'] / peak:>5.0f}%", flush=True)
        out.append({**row, "flash_ms": flash, "flash_tflops": tf(flash), "cudnn_ms": cudnn,
                    "cudnn_tflops": tf(cudnn), "matmul_peak_tflops": peak})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
