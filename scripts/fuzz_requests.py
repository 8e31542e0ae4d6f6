"""Request bodies for scripts/fuzz: OpenAI completion and chat bodies changed as JSON (parts
replaced, dropped and added at any depth), nested deeply, or changed byte by byte. Each takes a
seeded random.Random.
"""

import json

from fuzz_mutants import mutate_bytes

REQUEST_SEEDS = [
    ("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0.7,
                         "top_p": 0.9, "seed": 3, "stop": ["\n"], "stream": False}),
    ("/v1/completions", {"prompt": [1, 2, 3, 4], "max_tokens": 4, "stream": True,
                         "stream_options": {"include_usage": True}, "stop_token_ids": [2]}),
    ("/v1/chat/completions", {"model": "smollm2", "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
        "max_tokens": 6, "top_k": 20, "stream": True}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                              "max_completion_tokens": 3, "n": 1, "logprobs": False}),
]
REQUEST_VALUES = [
    None, True, False, 0, -1, 1, 2, 2**31, 2**63, -2**63 - 1, 10**30, 0.5, -0.0, 1e308, 1e-320,
    "", "x", "5", "\u0000", "\u202e", "\ud7ff", "a" * 5000, [], {}, [1], [[1]], [None],
    [{"role": "user"}], {"type": "text"}, ["a", "b"], [-5], [2**31], [1.5], {"include_usage": 1},
]
REQUEST_KEYS = ["prompt", "messages", "max_tokens", "max_completion_tokens", "temperature",
                "top_p", "top_k", "seed", "stop", "stop_token_ids", "stream", "stream_options",
                "n", "best_of", "tools", "logprobs", "echo", "model", "ignore_eos",
                "response_format", "frequency_penalty", "role", "content", "type", "text"]


def mutate_request_value(rng, value, depth=0):
    """The value with one of its parts (at any depth) replaced, dropped or added."""
    if isinstance(value, dict) and value and rng.random() < 0.7:
        key = rng.choice(sorted(value))
        choice = rng.random()
        out = dict(value)
        if choice < 0.2:
            del out[key]
        elif choice < 0.4:
            out[rng.choice(REQUEST_KEYS)] = rng.choice(REQUEST_VALUES)
        else:
            out[key] = mutate_request_value(rng, value[key], depth + 1)
        return out
    if isinstance(value, list) and value and rng.random() < 0.7:
        out = list(value)
        i = rng.randrange(len(out))
        if rng.random() < 0.3:
            out.append(out[i])
        else:
            out[i] = mutate_request_value(rng, out[i], depth + 1)
        return out
    return rng.choice(REQUEST_VALUES)


def request_mutant(rng):
    """(path, body bytes) of a request: a seed body mutated as JSON, or as bytes."""
    path, body = rng.choice(REQUEST_SEEDS)
    for _ in range(1 + rng.randrange(3)):
        body = mutate_request_value(rng, body)
    choice = rng.random()
    if choice < 0.1:
        # Deep nesting.
        depth = rng.choice([30, 64, 65, 200, 100000])
        return path, ('{"prompt": ' + "[" * depth + "1" + "]" * depth + "}").encode()
    text = json.dumps(body, ensure_ascii=rng.random() < 0.5).encode("utf-8", "surrogatepass")
    if choice < 0.35:
        text = mutate_bytes(rng, text)
    if isinstance(text, str):
        text = text.encode("latin-1", "replace")
    return path, text
