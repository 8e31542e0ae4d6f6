#!/usr/bin/env python3
"""freezeframe serve on a GPU with SmolLM2-135M-Instruct's GGUF, driven by real clients on
loopback:
 - greedy completions of eight prompts, one at a time, token for token what `freezeframe
   generate` prints for them (the server and generate each run one request at a time);
 - then a second server: concurrent streaming chats with random disconnects for --seconds,
   every request a 200 that ends in [DONE] (or a client that left), a shared system prompt
   found in the prefix cache, and every KV block free at the end; a clean exit on SIGTERM.

usage: server_gpu_test.py FREEZEFRAME GGUF [--seconds S] [--clients N]
(exit 77: no GPU or no model). Standard library only: the GPU machine has no openai package;
the CPU tests drive the same endpoints with it (server_clients_test.py).
"""
import argparse
import concurrent.futures
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request

from server_harness import Server

PROMPTS = ["The capital of France is", "def fibonacci(n):", "A GPU is", "Once upon a time",
           "The three primary colours are", "To make bread, first", "In 1969,",
           "The speed of light is"]

ap = argparse.ArgumentParser()
ap.add_argument("freezeframe")
ap.add_argument("gguf")
ap.add_argument("--seconds", type=float, default=60.0)
ap.add_argument("--clients", type=int, default=64)
args = ap.parse_args()
if not os.path.exists(args.gguf):
    print("skipped: no model at %s (scripts/fetch-smollm2)" % args.gguf)
    sys.exit(77)
if shutil.which("nvidia-smi") is None or \
        subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode != 0:
    print("skipped: no GPU here")
    sys.exit(77)

FAILURES = []


def check(ok, what):
    if not ok:
        FAILURES.append(what)
        print("FAILED:", what, flush=True)


def post(port, path, body, timeout=300):
    """The JSON answer of a whole request."""
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path),
                                 data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def stream(port, path, body, timeout=300):
    """The finish reasons of a streamed request's chunks, in order; [DONE] required."""
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path),
                                 data=json.dumps(dict(body, stream=True)).encode(),
                                 method="POST", headers={"Content-Type": "application/json"})
    reasons, done = [], False
    with urllib.request.urlopen(req, timeout=timeout) as r:
        for line in r:
            line = line.strip()
            if line == b"data: [DONE]":
                done = True
            elif line.startswith(b"data: "):
                chunk = json.loads(line[6:])
                if "error" in chunk:
                    raise RuntimeError(chunk["error"])
                reasons += [ch.get("finish_reason") for ch in chunk.get("choices", [])]
    if not done:
        raise RuntimeError("the stream did not end in [DONE]")
    return reasons


# 1. Greedy, one request at a time, against freezeframe generate.
server = Server(args.freezeframe, args.gguf, "--max-num-seqs", "1", "--max-model-len", "512")
port = server.port
for prompt in PROMPTS:
    served = post(port, "/v1/completions", {"prompt": prompt, "max_tokens": 32, "temperature": 0})
    generated = subprocess.run([args.freezeframe, "generate", args.gguf, "--prompt", prompt,
                                "--max-tokens", "32", "--temperature", "0", "--chat", "off"],
                               capture_output=True, text=True, timeout=300)
    check(generated.returncode == 0, "generate ran: " + generated.stderr[-300:])
    want = generated.stdout[:-1] if generated.stdout.endswith("\n") else generated.stdout
    text = served["choices"][0]["text"]
    check(text == want, "greedy %r: the server's %r, generate's %r" % (prompt, text, want))
check(server.stop(60) == 0, "the first server exits 0 on SIGTERM")

# 2. Concurrent streams with disconnects.
server = Server(args.freezeframe, args.gguf, "--max-num-seqs", "64")
port = server.port
system = "You are a concise assistant who answers in one short paragraph. " * 8
deadline = time.monotonic() + args.seconds
counts = {"done": 0, "left": 0, "errors": 0}
lock = threading.Lock()


def client(i):
    rng = random.Random(i)
    while time.monotonic() < deadline:
        leave_after = rng.choice([None, None, None, 1, 5])
        try:
            if leave_after is None:
                reasons = stream(port, "/v1/chat/completions", {
                    "max_tokens": rng.randint(16, 128), "temperature": 0.8,
                    "messages": [{"role": "system", "content": system},
                                 {"role": "user", "content": "Question %d: %s" % (i, rng.random())}]})
                ok = bool(reasons) and reasons[-1] in ("stop", "length")
                with lock:
                    counts["done" if ok else "errors"] += 1
            else:
                body = json.dumps({"prompt": "A long story: ", "max_tokens": 400,
                                   "stream": True}).encode()
                sock = socket.create_connection(("127.0.0.1", port), timeout=60)
                sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                             b"application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
                got = b""
                while got.count(b"data:") < leave_after:
                    part = sock.recv(4096)
                    if not part:
                        break
                    got += part
                sock.close()
                with lock:
                    counts["left"] += 1
        except Exception as e:  # noqa: BLE001
            with lock:
                counts["errors"] += 1
            print("client %d: %s" % (i, e), flush=True)


with concurrent.futures.ThreadPoolExecutor(args.clients) as pool:
    list(pool.map(client, range(args.clients)))
print("streams finished %(done)d, clients that left %(left)d, errors %(errors)d" % counts)
check(counts["errors"] == 0, "no errors under load")
check(counts["done"] > args.clients, "streams finished")
check(server.metric("freezeframe_prefix_cache_hits_total") > 0,
      "the shared system prompt is found in the prefix cache")
deadline = time.monotonic() + 30
while time.monotonic() < deadline and server.metric('freezeframe_kv_blocks{state="used"}') != 0:
    time.sleep(0.1)
check(server.metric('freezeframe_kv_blocks{state="used"}') == 0, "every KV block free at the end")
print("prefix cache hit rate %.3f" % server.metric("freezeframe_prefix_cache_hit_rate"))
check(server.stop(60) == 0, "the second server exits 0 on SIGTERM")

if FAILURES:
    print("%d checks failed" % len(FAILURES))
    sys.exit(1)
print("every check passed")
