"""End to end through the scheduler with the real engine (issue: scheduler).

- 16 concurrent greedy requests give exactly the tokens the same requests give one at a time
  (continuous batching, chunked prefill and paged KV must not change results).
- A repeated long system prompt is served from the prefix cache, visible in /metrics and in
  usage.prompt_tokens_details.cached_tokens.
weft-test: labels=integration,slow timeout=900
"""
import concurrent.futures
import json
import re
import urllib.request

from conftest import MODEL_ID, Weftd

import pytest

PROMPTS = [
    "The quick brown fox", "Write a haiku about rain:", "def fibonacci(n):",
    "The capital of Japan is", "1, 2, 3, 4,", "Once upon a time in a small village",
    "Translate to French: good morning", "A list of prime numbers: 2, 3, 5,",
    "In physics, energy is", "My favourite recipe for pancakes starts with",
    "SELECT name FROM users WHERE", "The three laws of robotics are",
    "Dear hiring manager,", "import numpy as np\n", "Q: Why is the sky blue?\nA:",
    "Roses are red, violets are blue,",
]
MAX_TOKENS = 24


def complete(base, prompt, max_tokens=MAX_TOKENS):
    body = json.dumps({"model": MODEL_ID, "prompt": prompt, "max_tokens": max_tokens,
                       "temperature": 0, "logprobs": 1}).encode()
    req = urllib.request.Request(base + "/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        out = json.load(r)
    choice = out["choices"][0]
    # The token sequence, not only the text: two token sequences can decode to the same text.
    return choice["logprobs"]["tokens"], choice["text"], out["usage"]


def metric(base, name):
    with urllib.request.urlopen(base + "/metrics", timeout=30) as r:
        text = r.read().decode()
    total = 0.0
    for line in text.splitlines():
        m = re.match(re.escape(name) + r"(\{[^}]*\})? ([0-9.eE+-]+)$", line)
        if m:
            total += float(m.group(2))
    return total


@pytest.fixture(scope="module")
def server():
    # A small token budget forces prompts to be split into chunks that share iterations with
    # running decodes: the batched path is exercised, not just the single-sequence one.
    d = Weftd("--max-batch-tokens", "64")
    yield d
    assert d.stop() == 0


def test_concurrent_greedy_equals_sequential(server):
    sequential = [complete(server.base, p) for p in PROMPTS]
    running_before = metric(server.base, "weft:request_success_total")
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(PROMPTS)) as pool:
        concurrent_results = list(pool.map(lambda p: complete(server.base, p), PROMPTS))
    for prompt, seq, conc in zip(PROMPTS, sequential, concurrent_results):
        assert conc[0] == seq[0], f"prompt {prompt!r}: concurrent {conc[1]!r} != sequential {seq[1]!r}"
        assert conc[2]["completion_tokens"] == seq[2]["completion_tokens"]
    assert metric(server.base, "weft:request_success_total") - running_before == len(PROMPTS)


def test_repeated_system_prompt_hits_prefix_cache(server):
    system = ("You are a meticulous assistant for a company that sells garden tools. " * 12).strip()
    hits_before = metric(server.base, "weft:prefix_cache_hits_total")
    usages = []
    for question in ["Which rake is best for leaves?", "How do I sharpen shears?"]:
        body = json.dumps({"model": MODEL_ID, "max_tokens": 8, "temperature": 0,
                           "messages": [{"role": "system", "content": system},
                                        {"role": "user", "content": question}]}).encode()
        req = urllib.request.Request(server.base + "/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=600) as r:
            usages.append(json.load(r)["usage"])
    hits = metric(server.base, "weft:prefix_cache_hits_total") - hits_before
    prompt_tokens = usages[1]["prompt_tokens"]
    assert prompt_tokens > 150
    # The shared system prompt is well over a hundred tokens: at least that many come from cache
    # (whole 16-token blocks only, so allow for the partial last block).
    assert hits >= 100, f"prefix-cache hits grew by {hits}"
    cached = usages[1].get("prompt_tokens_details", {}).get("cached_tokens")
    if cached is not None:
        assert cached >= 100
