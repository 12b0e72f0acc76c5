# weft-test: labels=integration,net timeout=600
"""Sliding-window KV in worker processes (Gemma 3): with --workers 2 each worker splits its KV
store by layer kind as the in-process engine does (kv/kv_store.h), the coordinator's pool gives
its group two tables and the tasks carry the local one (TASK_DISPATCH 1.3). Two sequences longer
than the window, one per worker: the first is llama.cpp's greedy continuation of its 520-token
prompt (the stored golden fixture), the second equals a single-process daemon's; every worker's
group released the local blocks behind the window (counted per group in /admin/stats) and holds
none afterwards; a worker killed and restarted comes back with the same split store."""
import concurrent.futures
import json
import os
import signal
import time
import urllib.request

import pytest

from conftest import TESTS, Weftd, admin_workers, post

GEMMA = os.environ.get("WEFT_TEST_GEMMA_MODEL",
                       "/usr/local/share/weft/models/gemma-3-270m-q4_k_m.gguf")
MODEL_ID = os.path.basename(GEMMA)[:-5]
FIXTURE = os.path.join(TESTS, "engine", "data", "golden", "gemma-3-270m-q4_k_m.long.txt")
BLOCK = 16
WINDOW_BLOCKS = 512 // BLOCK + 1  # Gemma 3 270M: window 512; a sequence holds at most this many
N_GEN = 64

pytestmark = pytest.mark.skipif(not os.path.exists(GEMMA), reason=f"{GEMMA} missing (scripts/setup fetches it)")


def fixture_case():
    prompt = gen = None
    with open(FIXTURE) as f:
        for line in f:
            if line.startswith("I "):
                prompt = [int(t) for t in line.split()[1:]]
            elif line.startswith("G "):
                gen = [int(t) for t in line.split()[1:]]
    assert prompt and gen and len(prompt) > 512
    return prompt, gen


def complete(d, ids):
    r = post(d.base, "/v1/completions", {"model": MODEL_ID, "prompt": ids, "max_tokens": N_GEN,
                                         "temperature": 0}, timeout=300)
    return r["choices"][0]["text"], r["usage"]["completion_tokens"]


def sched_stats(d):
    with urllib.request.urlopen(d.base + "/admin/stats", timeout=30) as r:
        return json.load(r)["scheduler"]


def released_at_least(n_tokens):
    """Local blocks lying wholly behind the window of a sequence's last position."""
    return max(0, (n_tokens - 1 - 512 + 1) // BLOCK)


def test_workers_split_store_matches_llama_cpp_and_releases_per_worker():
    prompt, gen = fixture_case()
    other = prompt[1:]  # shares no prefix block with the first: each worker computes its own
    d = Weftd("--workers", "2", "--max-running", "4", "--heartbeat-ms", "200", model=GEMMA)
    try:
        st = sched_stats(d)
        groups = [g for g in st["groups"] if g["live"]]
        assert len(groups) == 2
        assert all(g["kv_swa_blocks_total"] > 0 and g["kv_blocks_total"] > 0 for g in groups)
        assert st["kv_swa_blocks_total"] == sum(g["kv_swa_blocks_total"] for g in groups)
        # at once: least-loaded routing gives one to each worker
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            a, b = pool.map(lambda ids: complete(d, ids), [prompt, other])
        text, used = a
        assert used > 0
        want = post(d.base, "/detokenize", {"tokens": gen[:used]})["content"]
        assert text == want  # llama.cpp's tokens past the window
        st = sched_stats(d)
        groups = [g for g in st["groups"] if g["live"]]
        per_group = [g["kv_swa_blocks_released"] for g in groups]
        print("local blocks released per worker group:", per_group)
        assert all(g["iterations"] > 0 for g in groups)
        # each worker released the local blocks behind the window of the sequence it served
        # (chunked prefill releases too, so at least the last position's count)
        least = min(released_at_least(len(prompt) + a[1]), released_at_least(len(other) + b[1]))
        assert least >= 3
        assert all(r >= least for r in per_group), per_group
        assert st["kv_swa_blocks_released"] == sum(per_group)
        assert all(g["kv_swa_blocks_used"] == 0 and g["kv_blocks_used"] == 0 for g in groups)
        # a replacement process splits its store again and its new group gets a split pool
        totals = {g["rank"]: (g["kv_blocks_total"], g["kv_swa_blocks_total"]) for g in groups}
        victim = admin_workers(d)[0]
        os.kill(victim["pid"], signal.SIGKILL)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            w = [w for w in admin_workers(d) if w["rank"] == victim["rank"]][0]
            if w["state"] == "live" and w["pid"] != victim["pid"] and w["group"] >= 0:
                break
            time.sleep(0.2)
        else:
            raise AssertionError(f"worker rank {victim['rank']} did not come back:\n{d.logtext()}")
        back = [g for g in sched_stats(d)["groups"] if g["live"] and g["rank"] == victim["rank"]]
        assert len(back) == 1 and back[0]["id"] == w["group"]
        assert (back[0]["kv_blocks_total"], back[0]["kv_swa_blocks_total"]) == totals[victim["rank"]]
    finally:
        assert d.stop() == 0, d.logtext()
    single = Weftd("--max-running", "4", model=GEMMA)
    try:
        assert complete(single, other) == b
        assert sched_stats(single)["kv_swa_blocks_total"] > 0
    finally:
        assert single.stop() == 0, single.logtext()
