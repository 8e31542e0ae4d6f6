#!/usr/bin/env python3
"""PyTorch anchors for the paged decode benchmark, printed side by side with it.

For each configuration of decode_bench (its JSON lines), times PyTorch's
scaled_dot_product_attention for one query token per request over a contiguous KV cache
[batch, kv_heads, context, head] with GQA, with the flash and the cuDNN backends, and reports
the same KV-read bandwidth (bytes of K and V ÷ time), timed as decode_bench times ours: calls
captured into a CUDA graph cycling through copies of the cache so that a call's inputs are not
in L2, replayed back to back between events (timing.graph_times); min, median and max per call.
fp8 rows have no SDPA counterpart.

usage: decode_sdpa.py --ours decode_bench.json [--json combined.json]
"""

import argparse
import json
import math

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from timing import graph_times, spread

L2_DEFEAT = 512 << 20


def time_sdpa(backend, batch, context, heads, kv_heads, head):
    kv_bytes = batch * context * kv_heads * head * 2 * 2
    copies = max(1, math.ceil(L2_DEFEAT / kv_bytes))
    gen = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(batch, heads, 1, head, device="cuda", dtype=torch.bfloat16, generator=gen)
    ks = [torch.randn(batch, kv_heads, context, head, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(copies)]
    vs = [torch.randn(batch, kv_heads, context, head, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(copies)]
    with sdpa_kernel(backend):
        def run(i):
            return torch.nn.functional.scaled_dot_product_attention(q, ks[i % copies], vs[i % copies], enable_gqa=True)
        # As many calls a replay as decode_bench's: every copy, at least 16.
        lo, us, hi = (t * 1e3 for t in spread(graph_times(run, max(copies, 16))))
    del ks, vs
    torch.cuda.empty_cache()
    return us, kv_bytes / (us * 1e-6) / 1e12, lo, hi


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ours", required=True)
    parser.add_argument("--json")
    args = parser.parse_args()
    rows = [json.loads(line) for line in open(args.ours) if line.strip()]
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    header = f"{'batch':>5} {'ctx':>6} {'heads':>6} {'head':>4} {'blk':>3} {'kv':<8} | {'ours us':>8} {'TB/s':>5} | {'flash us':>8} {'TB/s':>5} | {'cuDNN us':>8} {'TB/s':>5} | {'copy':>5} | ours/cuDNN"
    print(header)
    print("-" * len(header))
    combined = []
    for r in rows:
        flash = cudnn = (float("nan"),) * 4
        if r["kv_dtype"] == "bf16":
            for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
                try:
                    result = time_sdpa(backend, r["batch"], r["context"], r["heads"], r["kv_heads"], r["head_size"])
                except (RuntimeError, torch.OutOfMemoryError) as error:
                    print(f"  ({name} unavailable for this shape: {str(error).splitlines()[0][:100]})")
                    torch.cuda.empty_cache()
                    result = (float("nan"),) * 4
                if name == "flash":
                    flash = result
                else:
                    cudnn = result
        ratio = r["kv_tbs"] / cudnn[1] if cudnn[1] == cudnn[1] else float("nan")
        print(f"{r['batch']:>5} {r['context']:>6} {r['heads']:>3}/{r['kv_heads']:<2} {r['head_size']:>4} {r['block_size']:>3} {r['kv_dtype']:<8} | "
              f"{r['median_us']:>8.1f} {r['kv_tbs']:>5.2f} | {flash[0]:>8.1f} {flash[1]:>5.2f} | {cudnn[0]:>8.1f} {cudnn[1]:>5.2f} | "
              f"{r['copy_tbs']:>5.2f} | {ratio:>6.2f}", flush=True)
        combined.append({**r, "flash_us": flash[0], "flash_tbs": flash[1], "flash_min_us": flash[2],
                         "flash_max_us": flash[3], "cudnn_us": cudnn[0], "cudnn_tbs": cudnn[1],
                         "cudnn_min_us": cudnn[2], "cudnn_max_us": cudnn[3], "timing": "graph"})
    if args.json:
        with open(args.json, "w") as out:
            for row in combined:
                out.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
