# weft-test: labels=integration timeout=600
"""Sliding-window KV release (Gemma 3) through a real weftd and the official `openai` client:
the local layers keep their own blocks, only the window's (kv/paged.h), so while a sequence
longer than the window decodes it holds all its global blocks but at most window/16 + 1 local
ones; the released blocks show in /admin/stats and /metrics; the greedy output is the same as
with every layer keeping the whole context (--kv-window-release=false), and a repeated prompt
reuses the prefix cache (global and local blocks of the window) with the same output."""
import json
import os
import urllib.request

import openai
import pytest

from conftest import Weftd

GEMMA = os.environ.get("WEFT_TEST_GEMMA_MODEL",
                       "/usr/local/share/weft/models/gemma-3-270m-q4_k_m.gguf")
MODEL_ID = os.path.basename(GEMMA)[:-5]
WINDOW_BLOCKS = 512 // 16 + 1  # Gemma 3 270M: window 512, blocks of 16
# ~700 tokens: past the window, short enough for sanitizer builds
PROMPT = " ".join(f"Item {i} costs {i * 3 % 17} coins." for i in range(90))
N_GEN = 24

pytestmark = pytest.mark.skipif(not os.path.exists(GEMMA), reason=f"{GEMMA} missing (scripts/setup fetches it)")


def stats(d):
    with urllib.request.urlopen(d.base + "/admin/stats", timeout=30) as r:
        return json.load(r)["scheduler"]


def run(d, check_midway=None):
    client = openai.OpenAI(base_url=d.base + "/v1", api_key="unused", max_retries=0, timeout=300)
    text, usage, checked = "", None, False
    stream = client.completions.create(model=MODEL_ID, prompt=PROMPT, max_tokens=N_GEN,
                                       temperature=0, stream=True,
                                       stream_options={"include_usage": True})
    for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].text
            if check_midway and not checked and text:
                check_midway(stats(d))  # the sequence is decoding: its blocks are held
                checked = True
        if chunk.usage:
            usage = chunk.usage
    assert usage is not None and usage.completion_tokens == N_GEN
    return text, usage


@pytest.fixture(scope="module")
def unsplit():
    d = Weftd("--kv-window-release=false", "--max-running", "4", model=GEMMA)
    try:
        st = stats(d)
        assert st["kv_swa_blocks_total"] == 0
        text, usage = run(d)
        assert usage.prompt_tokens > 600
        assert stats(d)["kv_swa_blocks_released"] == 0
    finally:
        assert d.stop() == 0
    return text, st["kv_blocks_total"]


def test_split_holds_window_and_matches_unsplit(unsplit):
    unsplit_text, unsplit_blocks = unsplit
    # 4 running: 4 windows of local blocks, so the global layers get more than unsplit
    d = Weftd("--max-running", "4", model=GEMMA)
    try:
        st = stats(d)
        assert st["kv_swa_blocks_total"] > 0
        assert st["kv_blocks_total"] > unsplit_blocks  # the budget left over holds context
        seen = {}

        def midway(s):
            seen.update(s)

        text, usage = run(d, midway)
        n = usage.prompt_tokens
        assert n > 600
        # while decoding: every global block of the context, at most the window's local ones
        assert seen["kv_blocks_used"] >= n // 16
        assert 0 < seen["kv_swa_blocks_used"] <= WINDOW_BLOCKS
        assert text == unsplit_text
        st = stats(d)
        ctx_blocks = (n + N_GEN - 1 + 15) // 16
        assert st["kv_swa_blocks_released"] >= ctx_blocks - WINDOW_BLOCKS
        assert st["kv_swa_blocks_used"] == 0 and st["kv_blocks_used"] == 0
        assert st["groups"][0]["kv_swa_blocks_total"] == st["kv_swa_blocks_total"]
        # the same prompt again: served from the prefix cache (both kinds), same output
        text2, usage2 = run(d)
        assert usage2.prompt_tokens_details.cached_tokens > 512
        assert text2 == unsplit_text
        with urllib.request.urlopen(d.base + "/metrics", timeout=30) as r:
            metrics = r.read().decode()
        assert "weft:group_kv_swa_blocks_total{" in metrics
    finally:
        assert d.stop() == 0
