#!/usr/bin/env python3
"""Before/after table of one GPU run: each row of the decode, prefill and engine benches with
its baseline and current time (the median over the rounds each side ran, alternating), their
ratio, and a mark where the current one is slower by more than the tolerance.

usage: bench_level.py LOGS [--tolerance 0.01]
LOGS holds {decode,prefill,engine}_{baseline,current}_ROUND.json as scripts/gpu-compare writes
them: decode_bench and prefill_bench write one JSON object a line, `freezeframe bench --json` one
object with its rows under "results" and "prefill".
"""
import argparse
import glob
import json
import os
import statistics
import sys


def rows_of(path):
    with open(path) as f:
        text = f.read()
    try:
        whole = json.loads(text)
    except json.JSONDecodeError:
        whole = None
    if not isinstance(whole, dict) or not ("results" in whole or "prefill" in whole):
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    out = []
    for section in ("results", "prefill"):
        for row in whole.get(section, []):
            out.append(dict(row, section=section))
    return out


# Each bench: the fields that name a row, and the time it is compared by (lower is better).
BENCHES = {
    "decode": (("batch", "context", "heads", "kv_heads", "head_size", "block_size", "kv_dtype"),
               "median_us", "us"),
    "prefill": (("kind", "batch", "new_tokens", "context", "heads", "kv_heads", "head_size",
                 "decodes", "decode_context", "block_size"), "median_ms", "ms"),
    "engine": (("section", "batch", "b", "n", "context"), "full_ms", "ms"),
}


def collect(logs, bench, side):
    keys, value, _ = BENCHES[bench]
    times = {}
    for path in sorted(glob.glob(os.path.join(logs, f"{bench}_{side}_*.json"))):
        for row in rows_of(path):
            if value not in row:
                continue
            key = tuple((k, row[k]) for k in keys if k in row)
            times.setdefault(key, []).append(float(row[value]))
    return {k: statistics.median(v) for k, v in times.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("logs")
    ap.add_argument("--tolerance", type=float, default=0.01)
    args = ap.parse_args()
    slower = compared = 0
    for bench, (_, value, unit) in BENCHES.items():
        base = collect(args.logs, bench, "baseline")
        cur = collect(args.logs, bench, "current")
        common = [k for k in base if k in cur]
        if not common:
            continue
        print(f"\n{bench} ({value}, median over rounds)")
        print(f"{'row':<84} {'baseline':>10} {'current':>10} {'ratio':>7}")
        for key in common:
            name = " ".join(f"{k}={v}" for k, v in key if k != "section")
            ratio = cur[key] / base[key] if base[key] > 0 else float("nan")
            mark = "  SLOWER" if ratio > 1 + args.tolerance else ""
            slower += bool(mark)
            compared += 1
            print(f"{name[:84]:<84} {base[key]:>10.4g} {cur[key]:>10.4g} {ratio:>7.3f}{mark}")
    print(f"\n{compared} rows compared, {slower} slower by more than {args.tolerance:.0%}")
    return 0 if compared else 1


if __name__ == "__main__":
    sys.exit(main())
