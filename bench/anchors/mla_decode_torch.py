#!/usr/bin/env python3
"""PyTorch anchors for the MLA decode benchmark, printed side by side with it.

For each configuration of mla_decode_bench (its JSON lines): the same absorbed MLA decode in
PyTorch, each head's 576-wide query against a contiguous latent cache [batch, context, 576]
(bf16) whose first 512 values are the values, two ways:
  - matmul: scores = q · latentᵀ (bf16 in, f32 softmax), out = P · latent[..., :512];
  - sdpa:   scaled_dot_product_attention over the latent as one shared KV head, with the
            backend PyTorch picks for these head sizes (flash takes none above 256).
Timed as mla_decode_bench times ours: calls captured into a CUDA graph cycling through copies of
the cache so that a call's inputs are not in L2, replayed back to back between events
(timing.graph_times). The anchors read a contiguous cache (no page table): in their favour.
Bandwidth = latent bytes ÷ time, as ours.

usage: mla_decode_torch.py --ours mla_decode_bench.json [--json combined.json]
       mla_decode_torch.py --check   (on the CPU: both forms against float64)
"""

import argparse
import json
import math

import torch

L2_DEFEAT = 512 << 20
LATENT, ROPE = 512, 64
SCALE = 1.0 / math.sqrt(192.0)  # DeepSeek's qk_nope + qk_rope, as mla_decode_bench's


def matmul_form(q, latent):
    """q [B, H, 576], latent [B, L, 576] → [B, H, 512]."""
    scores = torch.matmul(q, latent.transpose(1, 2)).float() * SCALE
    p = torch.softmax(scores, dim=-1).to(latent.dtype)
    return torch.matmul(p, latent[..., :LATENT])


def sdpa_form(q, latent):
    return torch.nn.functional.scaled_dot_product_attention(
        q.unsqueeze(2), latent.unsqueeze(1), latent[..., :LATENT].unsqueeze(1), scale=SCALE,
        enable_gqa=True).squeeze(2)


def time_form(form, heads, batch, context):
    from timing import graph_times, spread
    kv_bytes = batch * context * (LATENT + ROPE) * 2
    copies = max(1, math.ceil(L2_DEFEAT / kv_bytes))
    gen = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(batch, heads, LATENT + ROPE, device="cuda", dtype=torch.bfloat16, generator=gen)
    caches = [torch.randn(batch, context, LATENT + ROPE, device="cuda", dtype=torch.bfloat16,
                          generator=gen) for _ in range(copies)]

    def run(i):
        return form(q, caches[i % copies])

    lo, us, hi = (t * 1e3 for t in spread(graph_times(run, max(copies, 8))))
    del caches
    torch.cuda.empty_cache()
    return us, kv_bytes / (us * 1e-6) / 1e12, lo, hi


def check():
    torch.manual_seed(0)
    q = torch.randn(3, 4, LATENT + ROPE, dtype=torch.float64)
    latent = torch.randn(3, 37, LATENT + ROPE, dtype=torch.float64)
    scores = torch.einsum("bhd,bld->bhl", q, latent) * SCALE
    want = torch.einsum("bhl,bld->bhd", torch.softmax(scores, dim=-1), latent[..., :LATENT])
    for name, form in (("matmul", matmul_form), ("sdpa", sdpa_form)):
        got = form(q.float(), latent.float()).double()
        error = ((got - want).norm() / want.norm()).item()
        print(f"{name}: relative L2 {error:.1e} against float64")
        assert error < 1e-5, name


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ours")
    parser.add_argument("--json")
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    if args.check:
        return check()
    if not args.ours:
        parser.error("--ours is required (or --check)")
    rows = [json.loads(line) for line in open(args.ours) if line.strip()]
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    header = (f"{'heads':>5} {'batch':>5} {'ctx':>6} | {'ours us':>8} {'TB/s':>5} | "
              f"{'matmul us':>9} {'TB/s':>5} | {'sdpa us':>8} {'TB/s':>5} | {'copy':>5} | "
              f"best torch / ours")
    print(header)
    print("-" * len(header))
    combined = []
    for r in rows:
        results = {}
        for name, form in (("matmul", matmul_form), ("sdpa", sdpa_form)):
            try:
                results[name] = time_form(form, r["heads"], r["batch"], r["context"])
            except (RuntimeError, torch.OutOfMemoryError) as error:
                print(f"  ({name} unavailable for this shape: {str(error).splitlines()[0][:100]})")
                torch.cuda.empty_cache()
                results[name] = (float("nan"),) * 4
        best = min((v[0] for v in results.values() if v[0] == v[0]), default=float("nan"))
        m, s = results["matmul"], results["sdpa"]
        print(f"{r['heads']:>5} {r['batch']:>5} {r['context']:>6} | {r['median_us']:>8.1f} "
              f"{r['kv_tbs']:>5.2f} | {m[0]:>9.1f} {m[1]:>5.2f} | {s[0]:>8.1f} {s[1]:>5.2f} | "
              f"{r['copy_tbs']:>5.2f} | {best / r['median_us']:>6.2f}", flush=True)
        combined.append({**r, "matmul_us": m[0], "matmul_tbs": m[1], "matmul_min_us": m[2],
                         "matmul_max_us": m[3], "sdpa_us": s[0], "sdpa_tbs": s[1],
                         "sdpa_min_us": s[2], "sdpa_max_us": s[3], "timing": "graph"})
    if args.json:
        with open(args.json, "w") as out:
            for row in combined:
                out.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
