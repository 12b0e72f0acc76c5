# weft-test: labels=integration,net timeout=900
"""weftd --prefill-workers N --decode-workers M: prompts are prefilled on prefill worker processes
and their KV blocks are put over UCX into blocks the scheduler reserved on a decode worker, which
decodes from there.

Greedy outputs equal the single-process daemon's for the golden prompts (the codec is off: the
KV arrives bit for bit). A prefill worker killed mid-prefill: its prompts are prefilled again on
the other prefill worker and every request completes. The decode worker killed while prompts are
being prefilled and shipped to it: every request ends with its tokens or a clear error, no KV
block stays taken on either side, and once it is back new requests are served. Bad flags get
clear errors. Every wait is bounded."""
import concurrent.futures
import json
import os
import signal
import time

import pytest

from conftest import (MODEL_ID, Weftd, admin_workers, assert_golden_equal_single_process,
                      assert_no_blocks_held, complete, golden_cases, groups, health, metric_sum,
                      post, run_weftd, wait_all_live)

# 800 tokens: a prefill that takes a while on 1 core; a sanitizer build is 5-15x slower, so 200
# tokens take as long there and keep the module's time in CI's budget.
SANITIZED = bool(os.environ.get("WEFT_SANITIZE", ""))
LONG = [504, 3575, 282, 4649, 314] * (40 if SANITIZED else 160)


@pytest.fixture(scope="module")
def pd():
    # A long worker time-out: a busy host must not turn a long prefill into a "silent" worker.
    d = Weftd("--prefill-workers", "2", "--decode-workers", "1", "--heartbeat-ms", "200",
              "--worker-timeout-ms", "300000")
    yield d
    assert d.stop() == 0, d.logtext()


def test_roles(pd):
    code, h = health(pd)
    assert code == 200 and h == {"status": "ok", "workers_live": 3, "workers_total": 3}
    ws = admin_workers(pd)
    assert [(w["rank"], w["role"]) for w in ws] == [(1, "prefill"), (2, "prefill"), (3, "decode")]
    assert ws[0]["group"] == -1 and ws[1]["group"] == -1 and ws[2]["group"] >= 0
    gs = groups(pd)
    assert [g["rank"] for g in gs if g["live"]] == [3]
    metrics = pd.status("/metrics")[1].decode()
    assert 'weft:worker_up{model_name="%s",rank="1",role="prefill"} 1' % MODEL_ID in metrics
    assert 'weft:worker_up{model_name="%s",rank="3",role="decode"} 1' % MODEL_ID in metrics
    assert "weft:kv_transfer_bytes_total" in metrics


def prefill_counters(d, queries_at_least=0):
    """The prefill workers' summed heartbeat counters (prefix_queries, prefix_hits,
    kv_layers_early), once their queries reach queries_at_least (heartbeats lag the batch)."""
    deadline = time.monotonic() + 30
    while True:
        ws = [w for w in admin_workers(d) if w["role"] == "prefill"]
        c = tuple(sum(w[k] for w in ws) for k in ("prefix_queries", "prefix_hits", "kv_layers_early"))
        if c[0] >= queries_at_least:
            return c
        assert time.monotonic() < deadline, ws
        time.sleep(0.1)


def test_golden_outputs_equal_single_process(pd):
    """Also a shared-prefix pair first, on a fresh daemon: the second prompt's 10 full blocks
    are in its prefill worker's prefix cache (the coordinator sends it where the first went), so
    only its tail is computed there; the whole prompt's KV still reaches the decode worker (the
    outputs equal the single-process daemon's)."""
    before = sum(w["transfers"] for w in admin_workers(pd))
    assert prefill_counters(pd)[:2] == (0, 0)
    prefix = [t for ids, _ in golden_cases()[-5:] for t in ids][:160]
    pair = [prefix + [504, 3575, 282], prefix + [4649, 314, 1122, 30]]

    def hit():
        queries, hits, _ = prefill_counters(pd, len(pair[0]) + len(pair[1]))
        assert hits == 160, (queries, hits)
        metrics = pd.status("/metrics")[1].decode()
        assert metric_sum(metrics, "weft:worker_prefix_cache_hits_total", 'role="prefill"') == 160
    assert_golden_equal_single_process(pd, first=pair, after_first=hit)
    ws = admin_workers(pd)
    # Every prompt went through a transfer; both prefill workers served (least busy first).
    assert sum(w["transfers"] for w in ws) > before
    assert all(w["transfers"] > 0 and w["transfer_bytes"] > 0 for w in ws if w["role"] == "prefill")
    assert all(w["transfers_failed"] == 0 for w in ws)
    assert_no_blocks_held(pd)


def test_kv_moves_during_the_prefill(pd):
    """The prefill worker posts a layer's puts as soon as the engine stored it (the engine's
    layer hook wakes the worker's loop), so the KV is on its way while the later layers compute:
    its counter of layers posted before the batch ended grows. The output is the one of the same
    prompt served again (the KV arrived whole; the second time from the prefill worker's prefix
    cache but for its last block)."""
    early = prefill_counters(pd)[2]
    results = {}
    for i in range(2):
        run_long(pd.base, 0, results)
        assert results[0][0] == "ok", results[0]
        if i == 0:
            first = results[0]
    assert results[0] == first
    deadline = time.monotonic() + 30
    while prefill_counters(pd)[2] == early:
        assert time.monotonic() < deadline, admin_workers(pd)
        time.sleep(0.1)
    metrics = pd.status("/metrics")[1].decode()
    assert metric_sum(metrics, "weft:kv_layers_overlapped_total", 'role="prefill"') > early
    assert_no_blocks_held(pd)


def run_long(base, i, results, max_tokens=8, codec=None):
    # A first token of its own: prompts of different i share no prefix (a prefill worker's
    # prefix cache would make their prefills short).
    body = {"model": MODEL_ID, "prompt": [300 + i] + LONG[1:], "max_tokens": max_tokens,
            "temperature": 0, "ignore_eos": True}
    if codec:
        body["kv_codec"] = codec
    try:
        r = post(base, "/v1/completions", body, timeout=300)
        results[i] = ("ok", r["usage"]["completion_tokens"], r["choices"][0]["text"])
    except Exception as e:  # noqa: BLE001 - recorded and asserted on below
        body = getattr(e, "read", lambda: b"")()
        results[i] = ("error", repr(e), body.decode(errors="replace"))


def test_nothing_sent_to_a_busy_worker(pd):
    """A worker running a batch gets no frame from the coordinator until it answers. A send
    blocks the coordinator's thread until the receiver progresses (a large frame, or heartbeats
    filling the FIFO), which a worker computing a batch does not: heartbeats sent during a long
    prefill blocked that thread until the world's 10 s bound failed the prefill worker, and the
    re-prefills ended "prefill task failed: closed" (seen under ThreadSanitizer, whose slowness
    made prefills that long). The old code sent a heartbeat every 200 ms here."""
    results = {}
    checked = 0

    def sample(rank):
        return [x for x in admin_workers(pd) if x["rank"] == rank][0]

    def same_batch(a, b):  # the worker answered no batch between the two samples (it does
        # send heartbeats while it computes, so frames_in may grow)
        return b["batches_running"] == 1 and b["batches"] == a["batches"]

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        futs = [pool.submit(run_long, pd.base, 10 + i, results) for i in range(4)]
        deadline = time.monotonic() + 120
        while checked < 3 and time.monotonic() < deadline and not all(f.done() for f in futs):
            for w in admin_workers(pd):
                if w["role"] != "prefill" or w["batches_running"] != 1:
                    continue
                # b settles the count: the batch's own dispatch may still have been on its way
                # at a. The old code sent a heartbeat in every 300 ms, so it never got past here.
                time.sleep(0.3)
                b = sample(w["rank"])
                if not same_batch(w, b) or b["frames_out"] != w["frames_out"]:
                    continue
                time.sleep(0.45)  # > 2 heartbeat periods
                c = sample(w["rank"])
                if same_batch(b, c):
                    assert c["frames_out"] == b["frames_out"], (b, c)
                    checked += 1
            time.sleep(0.01)
        concurrent.futures.wait(futs, timeout=300)
    assert checked > 0, "no prefill ran 0.75 s without a frame sent to its worker"
    for i in range(4):
        assert results[10 + i][0] == "ok", results[10 + i]
    assert_no_blocks_held(pd)


def test_prefill_worker_killed_mid_prefill(pd):
    ws = admin_workers(pd)
    victim = ws[0]
    assert victim["role"] == "prefill"
    reference = {}
    run_long(pd.base, 0, reference)
    assert reference[0][0] == "ok", reference
    results = {}
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        futs = [pool.submit(run_long, pd.base, i, results) for i in range(4)]
        # Both prefill workers take prompts (least busy first); kill the victim while it holds
        # a prefill batch (800-token prompts take it a while on its one core).
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            w = [x for x in admin_workers(pd) if x["rank"] == victim["rank"]][0]
            if w["batches_in_flight"] > 0:
                break
            time.sleep(0.01)
        assert w["batches_in_flight"] > 0
        os.kill(victim["pid"], signal.SIGKILL)
        concurrent.futures.wait(futs, timeout=300)
    assert all(f.done() for f in futs)
    # Re-prefilled on the other prefill worker: every request completes, the same tokens.
    for i in range(4):
        assert results[i][0] == "ok", results[i]
        assert results[i][1] == 8
    assert results[0][2] == reference[0][2]
    with open(pd.log.name, errors="replace") as f:
        assert "re-prefilling on another" in f.read()  # it was killed mid-prefill
    wait_all_live(pd, 3)
    assert_no_blocks_held(pd)
    back = [x for x in admin_workers(pd) if x["rank"] == victim["rank"]][0]
    assert back["restarts"] == 1 and back["pid"] != victim["pid"]


def test_decode_worker_killed_during_transfers(pd):
    ws = admin_workers(pd)
    victim = [w for w in ws if w["role"] == "decode"][0]
    shipped = sum(w["transfers"] for w in ws)
    results = {}
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        # Prompts never sent before: each is prefilled whole.
        futs = [pool.submit(run_long, pd.base, 20 + i, results, 64) for i in range(4)]
        deadline = time.monotonic() + 120
        # Kill it once the first prompt's KV has arrived: the others are being prefilled and
        # shipped to it, and that one is decoding there.
        while time.monotonic() < deadline:
            if sum(w["transfers"] for w in admin_workers(pd)) > shipped:
                break
            time.sleep(0.02)
        os.kill(victim["pid"], signal.SIGKILL)
        concurrent.futures.wait(futs, timeout=300)
    assert all(f.done() for f in futs)
    for o in results.values():
        if o[0] == "ok":
            assert o[1] == 64, o
        else:
            # A clear error (503 while no decode worker is live, or the lost rank named).
            assert "worker rank %d" % victim["rank"] in o[2] or "503" in o[1] or "no group" in o[2], (o, pd.logtext())
    assert any(o[0] == "error" for o in results.values())
    wait_all_live(pd, 3)
    assert_no_blocks_held(pd)
    # The replacement serves new requests.
    text, used = complete(pd.base, [504, 3575, 282, 4649, 314], 6)
    assert used == 6
    assert_no_blocks_held(pd)


@pytest.mark.parametrize("args, message", [
    (["--prefill-workers", "1"], "--prefill-workers and --decode-workers go together"),
    (["--decode-workers", "2"], "--prefill-workers and --decode-workers go together"),
    (["--prefill-workers", "1", "--decode-workers", "1", "--workers", "3"], "--workers 3 disagrees"),
])
def test_bad_pd_flags(args, message):
    rc, out = run_weftd(*args)
    assert rc != 0, out
    assert message in out, out
