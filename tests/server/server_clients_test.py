#!/usr/bin/env python3
"""freezeframe serve driven by real clients (the openai package and curl), on loopback only:
whole and streamed completions and chats, stop strings, seeds, 50 concurrent clients, clients
that go away, every bad request with its status, an API key, the connection limit, a slow
client, and in the end every KV block free and a clean exit on SIGTERM. The server runs with
--token-source hash: no GPU, no model; its text is a function of the prompt and seed.

usage: server_clients_test.py FREEZEFRAME CHECKPOINT   (exit 77: a client is not installed)
"""
import concurrent.futures
import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import server_harness

try:
    import openai
except ImportError:
    print("skipped: the openai package is not installed (scripts/test installs it in "
          "build/pyenv)")
    sys.exit(77)
if shutil.which("curl") is None:
    print("skipped: curl is not installed")
    sys.exit(77)

FREEZEFRAME, CHECKPOINT = sys.argv[1], sys.argv[2]
FAILURES = []


def check(condition, what):
    if not condition:
        FAILURES.append(what)
        print("FAILED:", what, flush=True)


def Server(*extra):
    """The hash-token server on the fixture's tokenizer, a context of 1024."""
    return server_harness.Server(FREEZEFRAME, CHECKPOINT, "--token-source", "hash",
                                 "--max-model-len", "1024", *extra)


def client(server, **kw):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=kw.get("key", "none"),
                         max_retries=0, timeout=30)


def curl(*args):
    return subprocess.run(["curl", "-sS", "--max-time", "30", *args], capture_output=True,
                          text=True).stdout


def main():
    s = Server("--max-concurrent-requests", "64", "--timeout", "2", "--step-us", "200")
    c = client(s)
    model = c.models.list().data[0].id
    check(model == "smollm2", "the model's id is its checkpoint's name: " + model)

    # Whole and streamed, completions and chats, through the openai package.
    whole = c.completions.create(model=model, prompt="Once upon a time", max_tokens=16,
                                 temperature=0)
    check(whole.choices[0].finish_reason == "length", "a completion ends by length")
    check(whole.usage.completion_tokens == 16, "usage counts 16 tokens")
    check(whole.usage.prompt_tokens > 0, "usage counts the prompt")
    streamed = "".join(chunk.choices[0].text for chunk in c.completions.create(
        model=model, prompt="Once upon a time", max_tokens=16, temperature=0, stream=True)
        if chunk.choices)
    check(streamed == whole.choices[0].text, "streamed text equals the whole text (greedy)")
    chat = c.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hi"}],
                                     max_tokens=12, temperature=0)
    check(chat.choices[0].message.role == "assistant", "a chat answers as the assistant")
    chunks = list(c.chat.completions.create(model=model,
                                            messages=[{"role": "user", "content": "Hi"}],
                                            max_tokens=12, temperature=0, stream=True,
                                            stream_options={"include_usage": True}))
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    check(text == chat.choices[0].message.content, "a streamed chat equals the whole chat")
    check(chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 12,
          "include_usage gives a last chunk with the usage")
    check(any(ch.choices and ch.choices[0].finish_reason == "length" for ch in chunks),
          "the streamed chat's finish_reason")

    # curl, whole and streamed: the raw protocol.
    body = curl(s.url + "/v1/completions", "-d",
                json.dumps({"prompt": "abc", "max_tokens": 5, "temperature": 0}))
    check(json.loads(body)["object"] == "text_completion", "curl: a whole completion")
    events = curl("-N", s.url + "/v1/chat/completions", "-d",
                  json.dumps({"messages": [{"role": "user", "content": "x"}], "max_tokens": 5,
                              "stream": True}))
    lines = [l for l in events.split("\n") if l.startswith("data: ")]
    check(lines and lines[-1] == "data: [DONE]", "curl: server-sent events end in [DONE]")

    # Seeds: the same seed, the same text; another seed, another.
    def sampled(seed):
        return c.completions.create(model=model, prompt="Seeds", max_tokens=24, temperature=1,
                                    seed=seed).choices[0].text
    check(sampled(7) == sampled(7), "the same seed gives the same text")
    check(sampled(7) != sampled(8), "another seed gives another text")

    # Stop strings: the text up to the first, never the stop string itself, also streamed
    # and across token boundaries.
    base = c.completions.create(model=model, prompt="Stop here", max_tokens=40,
                                temperature=0).choices[0].text
    for stop in (base[10:16], base[3:4], base[-5:]):
        got = c.completions.create(model=model, prompt="Stop here", max_tokens=40,
                                   temperature=0, stop=[stop])
        check(got.choices[0].text == base[:base.find(stop)],
              "stop %r cuts the text before it" % stop)
        check(got.choices[0].finish_reason == "stop", "a stop string's finish_reason is stop")
        streamed = "".join(ch.choices[0].text for ch in c.completions.create(
            model=model, prompt="Stop here", max_tokens=40, temperature=0, stop=[stop],
            stream=True) if ch.choices)
        check(streamed == base[:base.find(stop)], "streamed, stop %r" % stop)

    # 50 concurrent clients, streamed: each gets what it gets alone.
    def one(i):
        chunks = c.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "client %d" % i}],
            max_tokens=20, temperature=1, seed=i, stream=True)
        return "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    with concurrent.futures.ThreadPoolExecutor(50) as pool:
        together = list(pool.map(one, range(50)))
    alone = [one(i) for i in range(0, 50, 7)]
    check(together[::7] == alone, "50 concurrent clients each get their own text")

    # A client that goes away: its request is aborted and its blocks come back.
    aborted = s.metric('freezeframe_requests_total{outcome="abort"}')
    sock = socket.create_connection(("127.0.0.1", s.port))
    payload = json.dumps({"prompt": "long", "max_tokens": 900, "stream": True}).encode()
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                 b"\r\nContent-Length: %d\r\n\r\n" % len(payload) + payload)
    sock.settimeout(10)
    received = b""
    while b"data:" not in received:
        part = sock.recv(4096)
        if not part:
            break
        received += part
    check(b"data:" in received, "the stream starts")
    sock.close()
    deadline = time.time() + 10
    while time.time() < deadline and \
            s.metric('freezeframe_requests_total{outcome="abort"}') == aborted:
        time.sleep(0.05)
    check(s.metric('freezeframe_requests_total{outcome="abort"}') == aborted + 1,
          "a client that went away is counted as aborted")

    # A shared system prompt: later chats find its blocks in the prefix cache.
    hits = s.metric("freezeframe_prefix_cache_hits_total")
    system = "You are a careful assistant. " * 20
    for question in ("first?", "second?", "third?"):
        c.chat.completions.create(model=model, max_tokens=4, messages=[
            {"role": "system", "content": system}, {"role": "user", "content": question}])
    check(s.metric("freezeframe_prefix_cache_hits_total") >= hits + 2 * 16 * 8,
          "a shared system prompt is found in the prefix cache")
    check(0 < s.metric("freezeframe_prefix_cache_hit_rate") <= 1, "a hit rate in (0, 1]")

    # Bad requests, each with its status and OpenAI's error object.
    def refused(body, status, param=None, path="/v1/completions", headers=None):
        code, text = s.post(path, body, headers)
        check(code == status, "%r gives %d, got %d %s" % (body if len(str(body)) < 80
                                                          else "a large body", status, code,
                                                          text[:200]))
        try:
            error = json.loads(text)["error"]
            check(isinstance(error["message"], str), "an error object with a message")
            if param is not None:
                check(error["param"] == param, "the error names %s: %s" % (param, error))
        except (ValueError, KeyError):
            check(False, "an OpenAI error body for %d: %r" % (status, text[:200]))
    refused(b"{not json", 400)
    refused({"prompt": "x", "max_tokens": 0}, 400, "max_tokens")
    refused({"prompt": "x", "max_tokens": "5"}, 400, "max_tokens")
    refused({"prompt": "x", "temperature": -1}, 400, "temperature")
    refused({"prompt": "x", "n": 3}, 400, "n")
    refused({"prompt": "word " * 2000}, 400, "prompt")
    refused({"prompt": "x", "max_tokens": 5000}, 400, "max_tokens")
    refused({"prompt": "x", "model": "gpt-4"}, 404, "model")
    refused({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, 400,
            "messages[0].content[0].type", path="/v1/chat/completions")
    refused({"messages": [{"role": "user", "content": "x"}], "tools": [{}]}, 400, "tools",
            path="/v1/chat/completions")
    refused(b"{\"prompt\": \"" + b"a" * (9 << 20) + b"\"}", 413)
    code, _ = s.post("/v1/nothing", {})
    check(code == 404, "an unknown path gives 404")

    # A slow client: headers that never end are dropped after the timeout (2 s here).
    slow = socket.create_connection(("127.0.0.1", s.port))
    slow.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
    slow.settimeout(10)
    start = time.time()
    try:
        closed = slow.recv(4096) is not None
    except (ConnectionResetError, socket.timeout):
        closed = True
    check(closed and time.time() - start < 8, "a slow client is dropped after the timeout")
    slow.close()
    check(s.get("/health")[0] == 200, "the server is healthy after all of it")

    # The load generator (bench/serve_load.py) against it: every request streamed and timed.
    import os
    import tempfile
    load = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench",
                        "serve_load.py")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "load.json")
        ran = subprocess.run([sys.executable, load, "--url", s.url, "--concurrency", "8",
                              "--requests", "24", "--max-tokens", "16", "--ignore-eos", "--json",
                              out, "--timeout", "60"], capture_output=True, text=True, timeout=120)
        check(ran.returncode == 0, "serve_load.py runs: " + ran.stdout + ran.stderr)
        report = json.load(open(out))
        check(report["succeeded"] == 24 and report["output_tokens"] == 24 * 16,
              "serve_load.py: 24 requests of 16 tokens: %s" % {k: report[k] for k in
                                                               ("succeeded", "output_tokens")})
        check(report["ttft_ms"]["p50"] > 0 and report["output_tokens_per_s"] > 0,
              "serve_load.py times them")

    # Every request done: every block free, nothing running or waiting.
    deadline = time.time() + 10
    while time.time() < deadline and s.metric('freezeframe_kv_blocks{state="used"}') != 0:
        time.sleep(0.05)
    check(s.metric('freezeframe_kv_blocks{state="used"}') == 0, "every KV block free")
    check(s.metric("freezeframe_num_requests_running") == 0, "nothing running")

    # SIGTERM while a request streams: it finishes, then the server exits 0.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        running = pool.submit(lambda: list(c.completions.create(
            model=model, prompt="last", max_tokens=200, stream=True)))
        time.sleep(0.3)
        code = s.stop()
        chunks = running.result(timeout=30)
    check(code == 0, "SIGTERM: exit 0, got %s" % code)
    reasons = [ch.choices[0].finish_reason for ch in chunks if ch.choices]
    check("length" in reasons, "the request in flight at SIGTERM finishes")

    # An API key, and the limit on requests at once.
    k = Server("--api-key", "sesame", "--max-concurrent-requests", "2", "--step-us", "2000")
    code, _ = k.post("/v1/completions", {"prompt": "x", "max_tokens": 2})
    check(code == 401, "no key: 401")
    code, _ = k.post("/v1/completions", {"prompt": "x", "max_tokens": 2},
                     {"Authorization": "Bearer wrong"})
    check(code == 401, "a wrong key: 401")
    ok = client(k, key="sesame").completions.create(model="smollm2", prompt="x", max_tokens=2)
    check(ok.usage.completion_tokens == 2, "the right key is served")
    keyed = client(k, key="sesame")
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        long_ones = [pool.submit(lambda: keyed.completions.create(
            model="smollm2", prompt="hold", max_tokens=900)) for _ in range(2)]
        time.sleep(0.5)
        code, text = k.post("/v1/completions", {"prompt": "x", "max_tokens": 2},
                            {"Authorization": "Bearer sesame"})
        check(code == 503, "past the limit of requests at once: 503, got %d" % code)
        for f in long_ones:
            f.result(timeout=60)
    check(k.stop() == 0, "the second server exits 0")

    if FAILURES:
        print("%d checks failed" % len(FAILURES))
        return 1
    print("every check passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
