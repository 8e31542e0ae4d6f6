#!/usr/bin/env python3
"""PyTorch anchor for DeepSeek-V2-Lite's decode and prefill steps (the same model as
configs/deepseek-v2-lite.yaml: 27 layers, hidden 2048, 16 heads of multi-head latent attention
with kv_lora_rank 512 and head parts 128 + 64 (rope) / 128 (v), layer 0 a dense MLP of 10944,
layers 1-26 64 experts of 1408 of which 6 a token plus 2 shared, YaRN over 4096 positions with
factor 40), in bf16 with deterministic random weights, eager and as a CUDA graph.

A step, per layer: RMSNorm -> q_proj -> kv_a_proj_with_mqa -> the latent's RMSNorm -> the
rotary part of q and of the shared k_pe rotated in interleaved pairs (YaRN's frequencies and
its factor on cos and sin, as transformers computes them) -> the latent and k_pe written into a
preallocated latent cache [batch, positions, 576] -> attention -> o_proj + residual -> RMSNorm
-> the MLP + residual; then the final RMSNorm -> lm_head -> float32 logits of each request's
last token.

- Decode attends absorbed: q_nope times each head's W_UK into the 512-wide latent, then SDPA of
  [q_abs, q_pe] (576 wide, one KV head) over the cached [latent, k_pe] with the latent as V, and
  the output up-projected by W_UV: the form whose cache reads are 576 values a position.
- Prefill up-projects the cached latent into each head's keys and values (kv_b_proj) and runs
  SDPA with a causal mask aligned to the bottom right (query i of N sees the C cached positions
  and its own first i + 1).
- The router takes the softmax of its f32 logits and the top 6 (scaled by 1); the routed
  experts run as torch._grouped_mm over the (token, slot) rows sorted by expert (offsets
  counted on the device, so the step captures), the shared experts as one MLP of 2816. Without
  CUDA (--check on the CPU) the experts run one by one over their rows instead.

--check FOLDER runs a tiny DeepSeek-V2 that scripts/fixtures/make_deepseek_fixtures.py wrote
(its config and weights: tiny-deepseek-v2, or tiny-deepseek-v2-qlora with the query compressed
and the experts chosen within groups) over the prompts of its logits file, on the CPU: each
prompt's prefill logits and a last token decoded over the cache against transformers' float32
logits.

usage: python3 bench/anchors/deepseek_step.py --json $OUT/deepseek_step.json
       [--batches 1,8,64] [--context 4096] [--prefill 1x4096,16x256] [--iterations N]
       python3 bench/anchors/deepseek_step.py --check tests/fixtures/reference/tiny-deepseek-v2
"""

import argparse
import json
import math
import pathlib
from types import SimpleNamespace

import torch
import torch.nn.functional as F

LITE = SimpleNamespace(vocab=102400, hidden=2048, layers=27, heads=16, rank=512, nope=128,
                       rope=64, v=128, q_lora=0, dense_inter=10944, experts=64, k=6,
                       moe_inter=1408, shared=2, first_dense=1, scaling=1.0, groups=1,
                       top_groups=1, eps=1e-6,
                       theta=10000.0,
                       yarn=dict(factor=40.0, original=4096, beta_fast=32.0, beta_slow=1.0,
                                 mscale=0.707, mscale_all_dim=0.707))


def yarn_mscale(scale, m):
    return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0


def rotary(c):
    """(inv_freq [rope / 2], the factor on cos and sin, the softmax scale), as transformers'
    DeepSeek-V2 computes them."""
    dim, base = c.rope, c.theta
    inv = 1.0 / base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    scale = (c.nope + c.rope) ** -0.5
    if not c.yarn:
        return inv.float(), 1.0, scale
    y = c.yarn

    def correction(rotations):
        return dim * math.log(y["original"] / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low = max(math.floor(correction(y["beta_fast"])), 0)
    high = min(math.ceil(correction(y["beta_slow"])), dim - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(dim // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
    inv = inv / y["factor"] * ramp + inv * (1 - ramp)
    mscale, all_dim = y.get("mscale") or 0, y.get("mscale_all_dim") or 0
    factor = (yarn_mscale(y["factor"], mscale) / yarn_mscale(y["factor"], all_dim)
              if mscale and all_dim else yarn_mscale(y["factor"], 1.0))
    if all_dim:
        scale *= yarn_mscale(y["factor"], all_dim) ** 2
    return inv.float(), factor, scale


def rms_norm(x, weight, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * weight


def rotate(x, cos, sin):
    """Interleaved pairs (2i, 2i + 1) of x [..., rope] turned by cos/sin [..., rope / 2]."""
    x0, x1 = x.float()[..., 0::2], x.float()[..., 1::2]
    return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), -1).flatten(-2).to(x.dtype)


def random_weights(c, device, dtype, seed=0):
    g = torch.Generator(device=device).manual_seed(seed)

    def w(*shape):
        return (torch.randn(*shape, generator=g, device=device, dtype=torch.float32) /
                math.sqrt(shape[-1])).to(dtype)

    ones = lambda n: torch.ones(n, device=device, dtype=dtype)  # noqa: E731
    layers = []
    for l in range(c.layers):
        layer = dict(input_layernorm=ones(c.hidden), post_attention_layernorm=ones(c.hidden),
                     q_proj=w(c.heads * (c.nope + c.rope), c.hidden),
                     kv_a_proj_with_mqa=w(c.rank + c.rope, c.hidden),
                     kv_a_layernorm=ones(c.rank), kv_b_proj=w(c.heads * (c.nope + c.v), c.rank),
                     o_proj=w(c.hidden, c.heads * c.v))
        if l < c.first_dense:
            layer.update(gate_proj=w(c.dense_inter, c.hidden), up_proj=w(c.dense_inter, c.hidden),
                         down_proj=w(c.hidden, c.dense_inter))
        else:
            shared = c.shared * c.moe_inter
            layer.update(router=w(c.experts, c.hidden),
                         experts_gate_up=w(c.experts, 2 * c.moe_inter, c.hidden),
                         experts_down=w(c.experts, c.hidden, c.moe_inter),
                         shared_gate_proj=w(shared, c.hidden), shared_up_proj=w(shared, c.hidden),
                         shared_down_proj=w(c.hidden, shared))
        layers.append(layer)
    return dict(embed=w(c.vocab, c.hidden), norm=ones(c.hidden), lm_head=w(c.vocab, c.hidden),
                layers=layers)


def load_weights(folder, c, dtype):
    """A save_pretrained DeepSeek-V2's weights under the names above (experts stacked)."""
    from safetensors.torch import load_file
    t = {}
    for shard in sorted(pathlib.Path(folder).glob("*.safetensors")):
        t.update(load_file(str(shard)))
    t = {k: v.to(dtype) for k, v in t.items()}
    layers = []
    for l in range(c.layers):
        p = f"model.layers.{l}."
        query = (("q_a_proj", "self_attn.q_a_proj"), ("q_a_layernorm", "self_attn.q_a_layernorm"),
                 ("q_b_proj", "self_attn.q_b_proj")) if c.q_lora else (("q_proj", "self_attn.q_proj"),)
        layer = {name: t[p + key + ".weight"] for name, key in query + (
            ("input_layernorm", "input_layernorm"),
            ("post_attention_layernorm", "post_attention_layernorm"),
            ("kv_a_proj_with_mqa", "self_attn.kv_a_proj_with_mqa"),
            ("kv_a_layernorm", "self_attn.kv_a_layernorm"), ("kv_b_proj", "self_attn.kv_b_proj"),
            ("o_proj", "self_attn.o_proj"))}
        if l < c.first_dense:
            for name in ("gate_proj", "up_proj", "down_proj"):
                layer[name] = t[p + "mlp." + name + ".weight"]
        else:
            e = range(c.experts)
            layer["router"] = t[p + "mlp.gate.weight"]
            layer["experts_gate_up"] = torch.stack([torch.cat(
                [t[f"{p}mlp.experts.{i}.gate_proj.weight"], t[f"{p}mlp.experts.{i}.up_proj.weight"]])
                for i in e])
            layer["experts_down"] = torch.stack([t[f"{p}mlp.experts.{i}.down_proj.weight"] for i in e])
            for name in ("gate_proj", "up_proj", "down_proj"):
                layer["shared_" + name] = t[p + "mlp.shared_experts." + name + ".weight"]
        layers.append(layer)
    return dict(embed=t["model.embed_tokens.weight"], norm=t["model.norm.weight"],
                lm_head=t["lm_head.weight"], layers=layers)


def config_of(folder):
    j = json.loads((pathlib.Path(folder) / "config.json").read_text())
    rope = j.get("rope_parameters") or j.get("rope_scaling") or {}
    yarn = None
    if rope.get("rope_type", rope.get("type")) == "yarn":
        yarn = dict(factor=rope["factor"], original=rope["original_max_position_embeddings"],
                    beta_fast=rope.get("beta_fast", 32.0), beta_slow=rope.get("beta_slow", 1.0),
                    mscale=rope.get("mscale"), mscale_all_dim=rope.get("mscale_all_dim"))
    return SimpleNamespace(
        vocab=j["vocab_size"], hidden=j["hidden_size"], layers=j["num_hidden_layers"],
        heads=j["num_attention_heads"], rank=j["kv_lora_rank"], nope=j["qk_nope_head_dim"],
        rope=j["qk_rope_head_dim"], v=j["v_head_dim"], q_lora=j.get("q_lora_rank") or 0,
        dense_inter=j["intermediate_size"], experts=j["n_routed_experts"],
        k=j["num_experts_per_tok"], moe_inter=j["moe_intermediate_size"],
        shared=j.get("n_shared_experts") or 0, first_dense=j.get("first_k_dense_replace", 0),
        scaling=j.get("routed_scaling_factor", 1.0), eps=j["rms_norm_eps"],
        groups=(j.get("n_group") or 1) if j.get("topk_method") == "group_limited_greedy" else 1,
        top_groups=(j.get("topk_group") or 1) if j.get("topk_method") == "group_limited_greedy"
        else 1,
        theta=rope.get("rope_theta", j.get("rope_theta", 10000.0)), yarn=yarn)


def gated(x, gate_up_or_gate, up=None, down=None):
    if up is None:
        gate, up_ = (x @ gate_up_or_gate.T).chunk(2, -1)
    else:
        gate, up_ = x @ gate_up_or_gate.T, x @ up.T
    return (F.silu(gate.float()) * up_.float()).to(x.dtype) @ down.T


# torch._grouped_mm (PyTorch 2.8+, sm_90): one launch over every expert's rows, capturable.
GROUPED_MM = hasattr(torch, "_grouped_mm")


def experts(x, layer, c):
    """The routed experts of x [T, hidden]: the router's softmax top k, each (token, slot) row
    through its expert, summed by the weights."""
    logits = x.float() @ layer["router"].float().T
    scores = logits.softmax(-1)
    if c.groups > 1:  # group-limited: the experts outside the best top_groups groups score 0
        best = scores.view(-1, c.groups, c.experts // c.groups).amax(-1)
        keep = torch.zeros_like(best).scatter_(1, best.topk(c.top_groups, dim=-1).indices, 1.0)
        scores = scores * keep.repeat_interleave(c.experts // c.groups, dim=-1)
    weights, ids = torch.topk(scores, c.k, dim=-1)
    weights = weights * c.scaling
    rows = x.shape[0] * c.k
    flat = ids.flatten()
    order = torch.argsort(flat, stable=True)
    source = x[order // c.k]
    if x.is_cuda and GROUPED_MM:
        counts = torch.zeros(c.experts, dtype=torch.int32, device=x.device)
        counts.scatter_add_(0, flat.int(), torch.ones_like(flat, dtype=torch.int32))
        offs = counts.cumsum(0, dtype=torch.int32)
        gate_up = torch._grouped_mm(source, layer["experts_gate_up"].transpose(-2, -1), offs=offs)
        gate, up = gate_up.chunk(2, -1)
        act = (F.silu(gate.float()) * up.float()).to(x.dtype)
        out = torch._grouped_mm(act, layer["experts_down"].transpose(-2, -1), offs=offs)
    else:
        out = torch.empty(rows, x.shape[1], dtype=x.dtype, device=x.device)
        sorted_ids = flat[order]
        for e in range(c.experts):
            at = (sorted_ids == e).nonzero().flatten()
            if at.numel():
                out[at] = gated(source[at], layer["experts_gate_up"][e],
                                down=layer["experts_down"][e])
    combined = torch.empty_like(out)
    combined[order] = out
    return (combined.view(-1, c.k, x.shape[1]).float() * weights[..., None]).sum(1).to(x.dtype)


class Model:
    """The layers over a latent cache [layers, batch, positions, rank + rope]."""

    def __init__(self, w, c, batch, positions, device, dtype):
        self.w, self.c = w, c
        inv, self.rope_factor, self.scale = rotary(c)
        self.inv_freq = inv.to(device)
        self.cache = torch.zeros(c.layers, batch, positions, c.rank + c.rope, device=device,
                                 dtype=dtype)
        for layer in w["layers"]:
            kv_b = layer["kv_b_proj"].view(c.heads, c.nope + c.v, c.rank)
            layer["w_uk"], layer["w_uv"] = kv_b[:, :c.nope], kv_b[:, c.nope:]

    def forward(self, ids, first, decode):
        """Logits of the last of `ids` [batch, n] at positions first .. first + n - 1 (first a
        Python int: every request at the same position)."""
        c, w = self.c, self.w
        b, n = ids.shape
        pos = torch.arange(first, first + n, device=ids.device).float()
        angle = pos[:, None] * self.inv_freq[None, :]
        cos, sin = torch.cos(angle) * self.rope_factor, torch.sin(angle) * self.rope_factor
        h = w["embed"][ids]  # [b, n, hidden]
        total = first + n
        for l, layer in enumerate(w["layers"]):
            x = rms_norm(h, layer["input_layernorm"], c.eps)
            if c.q_lora:
                q = rms_norm(x @ layer["q_a_proj"].T, layer["q_a_layernorm"], c.eps) @ \
                    layer["q_b_proj"].T
            else:
                q = x @ layer["q_proj"].T
            q = q.view(b, n, c.heads, c.nope + c.rope)
            q_nope, q_pe = q[..., :c.nope], rotate(q[..., c.nope:], cos[:, None], sin[:, None])
            kv_a = x @ layer["kv_a_proj_with_mqa"].T
            latent = rms_norm(kv_a[..., :c.rank], layer["kv_a_layernorm"], c.eps)
            k_pe = rotate(kv_a[..., c.rank:], cos, sin)
            cache = self.cache[l]
            cache[:, first:total, :c.rank] = latent
            cache[:, first:total, c.rank:] = k_pe
            if decode:
                q_abs = torch.einsum("bnhd,hdr->bhnr", q_nope, layer["w_uk"])
                query = torch.cat([q_abs, q_pe.transpose(1, 2)], -1)  # [b, heads, n, 576]
                keys = cache[:, None, :total]
                out = F.scaled_dot_product_attention(query, keys, keys[..., :c.rank],
                                                     scale=self.scale, enable_gqa=True)
                out = torch.einsum("bhnr,hvr->bnhv", out, layer["w_uv"])
            else:
                kv = (cache[:, :total, :c.rank] @ layer["kv_b_proj"].T).view(
                    b, total, c.heads, c.nope + c.v)
                keys = torch.cat([kv[..., :c.nope], cache[:, :total, None, c.rank:].expand(
                    b, total, c.heads, c.rope)], -1)
                query = torch.cat([q_nope, q_pe], -1)
                mask = (torch.arange(total, device=ids.device)[None, :] <=
                        torch.arange(first, total, device=ids.device)[:, None])
                out = F.scaled_dot_product_attention(
                    query.transpose(1, 2), keys.transpose(1, 2), kv[..., c.nope:].transpose(1, 2),
                    attn_mask=mask, scale=self.scale).transpose(1, 2)
            h = h + out.reshape(b, n, c.heads * c.v) @ layer["o_proj"].T
            x = rms_norm(h, layer["post_attention_layernorm"], c.eps).view(b * n, c.hidden)
            if l < c.first_dense:
                mlp = gated(x, layer["gate_proj"], layer["up_proj"], layer["down_proj"])
            else:
                mlp = experts(x, layer, c)
                if c.shared:
                    mlp = mlp + gated(x, layer["shared_gate_proj"], layer["shared_up_proj"],
                                      layer["shared_down_proj"])
            h = h + mlp.view(b, n, c.hidden)
        last = rms_norm(h[:, -1], w["norm"], c.eps)
        return (last @ w["lm_head"].T).float()


def check(folder):
    from safetensors.torch import load_file
    c = config_of(folder)
    w = load_weights(folder, c, torch.float32)
    reference = load_file(str(pathlib.Path(str(folder) + ".logits.safetensors")))
    worst = 0.0
    for i in range(3):
        ids = reference[f"prompt.{i}.token_ids"].long()[None]
        want = reference[f"prompt.{i}.logits"]
        n = ids.shape[1]
        for what, logits in (
                ("prefill", Model(w, c, 1, n, "cpu", torch.float32).forward(ids, 0, False)),
                ("decode", decoded(w, c, ids))):
            error = float((logits[0] - want[-1]).norm() / want[-1].norm())
            worst = max(worst, error)
            print(f"prompt {i} ({n} tokens), {what}: last logits relative L2 {error:.2e}")
    assert worst < 1e-4, "the anchor's model is not transformers' DeepSeek-V2"


def decoded(w, c, ids):
    """The last token decoded (absorbed) over the cache the rest was prefilled into."""
    n = ids.shape[1]
    model = Model(w, c, 1, n, "cpu", torch.float32)
    model.forward(ids[:, :-1], 0, False)
    return model.forward(ids[:, -1:], n - 1, True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check")
    parser.add_argument("--batches", default="1,8,64")
    parser.add_argument("--context", type=int, default=4096)
    parser.add_argument("--prefill", default="1x4096,16x256")
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--json")
    args = parser.parse_args()
    if args.check:
        return check(args.check)
    import sys
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    from timing import back_to_back_times, spread

    c, device, dtype = LITE, "cuda", torch.bfloat16
    w = random_weights(c, device, dtype)
    results = []
    shapes = [("decode", int(b), 1, args.context - 1) for b in args.batches.split(",") if b]
    shapes += [("prefill", int(s.split("x")[0]), int(s.split("x")[1]), 0)
               for s in args.prefill.split(",") if s]
    for kind, batch, new, first in shapes:
        model = Model(w, c, batch, first + new, device, dtype)
        ids = torch.randint(0, c.vocab, (batch, new), device=device)
        step = lambda: model.forward(ids, first, kind == "decode")  # noqa: E731
        eager = back_to_back_times(step, args.iterations, 3)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                step()
            replay = back_to_back_times(graph.replay, args.iterations, 2)
        except RuntimeError as error:
            replay = None
            print(f"{kind} {batch}x{new}: no graph ({str(error).splitlines()[0]})")
        row = dict(kind=kind, batch=batch, new=new, context=first + new,
                   eager_ms=spread(eager)[1], graph_ms=spread(replay)[1] if replay else None)
        results.append(row)
        print(f"{kind:>7} {batch:>3} x {new:>5} over {first + new:>5}: eager "
              f"{row['eager_ms']:.3f} ms, graph "
              f"{'-' if replay is None else '%.3f ms' % row['graph_ms']}", flush=True)
        del model, graph
        torch.cuda.empty_cache()
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
