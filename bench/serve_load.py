#!/usr/bin/env python3
"""A load generator for any OpenAI-compatible server (freezeframe serve, llama.cpp's
llama-server, vLLM): streamed requests at a fixed concurrency, or at a request trace's arrival
times, each timed from its send: time to first token (TTFT), time per output token after the
first (TPOT), the gaps between streamed pieces (inter-token latency), end-to-end latency, and
over the run output tokens/s and requests/s. Standard library only, so the same client drives
every server the same way. Prints a summary; --json writes every figure and the run's settings.

Fixed concurrency:  serve_load.py --url http://127.0.0.1:8000 --concurrency 64 --requests 512
                        --prompt-words 256 --max-tokens 128 [--ignore-eos] [--chat]
A trace:            serve_load.py --url ... --trace FILE [--time-scale X] [--max-requests N]
  (Azure CSV or Mooncake JSON Lines; a prompt of the trace's length in words, a Mooncake hash
  block's words the same wherever its id is, so a prefix cache sees the trace's reuse)

Output tokens are counted from the usage the server reports (stream_options.include_usage),
else one a streamed piece. Each request is bounded by --timeout; the run by --duration.
"""
import argparse
import csv
import http.client
import json
import random
import statistics
import sys
import threading
import time
import urllib.parse

WORDS = ("the of and to in is was for on that with as by at from it his an were are which "
         "this be or has had not first one their its new after who they have her she two been "
         "other when there all during into school time may years more most only over city "
         "some world would where later up such used many can state about national out known "
         "university united then made").split()


def words_for(rng, n):
    return " ".join(rng.choice(WORDS) for _ in range(n))


def prompt_of(index, length, hash_ids):
    """A prompt of `length` words: a Mooncake hash block's 512 words depend on its id only."""
    parts = []
    for block in range(0, length, 512):
        n = min(512, length - block)
        key = hash_ids[block // 512] if block // 512 < len(hash_ids) else ("own", index, block)
        parts.append(words_for(random.Random(str(key)), n))
    return " ".join(parts)


def load_trace(path, time_scale, max_requests):
    out = []
    with open(path) as f:
        first = f.read(1)
        f.seek(0)
        if first == "{":
            for line in f:
                if line.strip():
                    r = json.loads(line)
                    out.append((r["timestamp"] / 1000.0, r["input_length"], r["output_length"],
                                r.get("hash_ids", [])))
        else:
            rows = csv.DictReader(f)
            t0 = None
            for r in rows:
                stamp = time.mktime(time.strptime(r["TIMESTAMP"][:19], "%Y-%m-%d %H:%M:%S")) + \
                    float("0." + r["TIMESTAMP"][20:] if len(r["TIMESTAMP"]) > 20 else 0)
                t0 = stamp if t0 is None else t0
                out.append((stamp - t0, int(r["ContextTokens"]), int(r["GeneratedTokens"]), []))
        if max_requests:
            out = out[:max_requests]
    start = out[0][0] if out else 0.0
    return [((t - start) * time_scale, n, m, ids) for t, n, m, ids in out]


class Result:
    def __init__(self):
        self.ok = False
        self.error = ""
        self.ttft = None
        self.e2e = None
        self.gaps = []
        self.pieces = 0
        self.output_tokens = 0
        self.prompt_tokens = 0


def one_request(args, url, body):
    """Sends one streamed request and times it."""
    r = Result()
    parsed = urllib.parse.urlparse(url)
    conn_class = http.client.HTTPSConnection if parsed.scheme == "https" else http.client.HTTPConnection
    headers = {"Content-Type": "application/json"}
    if args.api_key:
        headers["Authorization"] = "Bearer " + args.api_key
    path = "/v1/chat/completions" if args.chat else "/v1/completions"
    start = time.perf_counter()
    last = None
    try:
        conn = conn_class(parsed.hostname, parsed.port, timeout=args.timeout)
        conn.request("POST", path, json.dumps(body), headers)
        resp = conn.getresponse()
        if resp.status != 200:
            r.error = "HTTP %d: %s" % (resp.status, resp.read()[:200].decode(errors="replace"))
            return r
        while True:
            line = resp.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            chunk = json.loads(data)
            if chunk.get("usage"):
                r.output_tokens = chunk["usage"].get("completion_tokens", 0)
                r.prompt_tokens = chunk["usage"].get("prompt_tokens", 0)
            if "error" in chunk:
                r.error = str(chunk["error"])[:200]
                return r
            choices = chunk.get("choices") or []
            text = ""
            if choices:
                text = choices[0].get("text") or (choices[0].get("delta") or {}).get("content") or ""
            if text:
                now = time.perf_counter()
                if r.ttft is None:
                    r.ttft = now - start
                else:
                    r.gaps.append(now - last)
                last = now
                r.pieces += 1
        r.e2e = time.perf_counter() - start
        if not r.output_tokens:
            r.output_tokens = r.pieces
        r.ok = r.ttft is not None
        if not r.ok:
            r.error = "no text came back"
    except Exception as e:  # a refused connection, a timeout: counted, not fatal
        r.error = "%s: %s" % (type(e).__name__, e)
    return r


def body_of(args, prompt, max_tokens, seed):
    body = {"max_tokens": max_tokens, "stream": True, "stream_options": {"include_usage": True},
            "temperature": args.temperature, "seed": seed}
    if args.model:
        body["model"] = args.model
    if args.ignore_eos:
        body["ignore_eos"] = True
    if args.chat:
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    return body


def pct(values, q):
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def summarise(results, seconds):
    ok = [r for r in results if r.ok]
    tpot = [(r.e2e - r.ttft) / (r.output_tokens - 1) for r in ok if r.output_tokens > 1]
    gaps = [g for r in ok for g in r.gaps]
    ms = lambda v: None if v is None else v * 1e3
    out_tokens = sum(r.output_tokens for r in ok)
    return {
        "requests": len(results), "succeeded": len(ok), "failed": len(results) - len(ok),
        "errors": sorted({r.error for r in results if not r.ok})[:10],
        "seconds": seconds, "output_tokens": out_tokens,
        "prompt_tokens": sum(r.prompt_tokens for r in ok),
        "output_tokens_per_s": out_tokens / seconds if seconds > 0 else 0.0,
        "requests_per_s": len(ok) / seconds if seconds > 0 else 0.0,
        "ttft_ms": {"p50": ms(pct([r.ttft for r in ok], .5)), "p90": ms(pct([r.ttft for r in ok], .9)),
                    "p99": ms(pct([r.ttft for r in ok], .99)),
                    "mean": ms(statistics.mean([r.ttft for r in ok])) if ok else None},
        "tpot_ms": {"p50": ms(pct(tpot, .5)), "p90": ms(pct(tpot, .9)), "p99": ms(pct(tpot, .99))},
        "itl_ms": {"p50": ms(pct(gaps, .5)), "p90": ms(pct(gaps, .9)), "p99": ms(pct(gaps, .99))},
        "e2e_ms": {"p50": ms(pct([r.e2e for r in ok], .5)), "p99": ms(pct([r.e2e for r in ok], .99))},
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--model", default="", help="the model id (default: the server's first)")
    ap.add_argument("--api-key", default="")
    ap.add_argument("--chat", action="store_true", help="/v1/chat/completions (default: completions)")
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--prompt-words", type=int, default=128)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--ignore-eos", action="store_true", help="every request to --max-tokens")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--trace")
    ap.add_argument("--time-scale", type=float, default=1.0)
    ap.add_argument("--max-requests", type=int, default=0)
    ap.add_argument("--max-tokens-cap", type=int, default=0, help="cap a trace's output lengths")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds a request may take")
    ap.add_argument("--duration", type=float, default=3600.0, help="seconds the run may take")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.concurrency < 1 or args.requests < 1:
        ap.error("--concurrency and --requests must be at least 1")
    url = args.url.rstrip("/")
    if not args.model:
        parsed = urllib.parse.urlparse(url)
        conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=30)
        conn.request("GET", "/v1/models", headers={"Authorization": "Bearer " + args.api_key}
                     if args.api_key else {})
        args.model = json.loads(conn.getresponse().read())["data"][0]["id"]

    jobs = []  # (send at, body)
    if args.trace:
        for i, (t, n, m, ids) in enumerate(load_trace(args.trace, args.time_scale, args.max_requests)):
            m = min(m, args.max_tokens_cap) if args.max_tokens_cap else m
            jobs.append((t, body_of(args, prompt_of(i, max(1, n), ids), max(1, m), args.seed + i)))
    else:
        rng = random.Random(args.seed)
        for i in range(args.requests):
            jobs.append((0.0, body_of(args, words_for(rng, args.prompt_words), args.max_tokens,
                                      args.seed + i)))
    results = [None] * len(jobs)
    deadline = time.monotonic() + args.duration
    start = time.perf_counter()
    if args.trace:
        threads = []
        for i, (at, body) in enumerate(jobs):
            delay = at - (time.perf_counter() - start)
            if delay > 0:
                time.sleep(delay)
            if time.monotonic() > deadline:
                break
            th = threading.Thread(target=lambda i=i, b=body: results.__setitem__(i, one_request(args, url, b)))
            th.start()
            threads.append(th)
        for th in threads:
            th.join()
    else:
        lock = threading.Lock()
        next_job = [0]

        def worker():
            while time.monotonic() < deadline:
                with lock:
                    i = next_job[0]
                    next_job[0] += 1
                if i >= len(jobs):
                    return
                results[i] = one_request(args, url, jobs[i][1])
        threads = [threading.Thread(target=worker) for _ in range(args.concurrency)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    seconds = time.perf_counter() - start
    done = [r for r in results if r is not None]
    report = summarise(done, seconds)
    report["settings"] = {k: v for k, v in vars(args).items() if k != "api_key"}
    print("%d requests (%d failed) in %.1f s: %.1f output tokens/s, %.2f requests/s" %
          (report["requests"], report["failed"], seconds, report["output_tokens_per_s"],
           report["requests_per_s"]))
    fmt = lambda d: " / ".join("-" if d[k] is None else "%.1f" % d[k] for k in ("p50", "p90", "p99"))
    print("TTFT ms p50/p90/p99: %s; TPOT ms: %s; inter-token ms: %s" %
          (fmt(report["ttft_ms"]), fmt(report["tpot_ms"]), fmt(report["itl_ms"])))
    for e in report["errors"]:
        print("error:", e)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0 if report["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
