"""weftd --workers 2 with the default DiT: DENOISE chunks on real worker processes (ranks of
one UCX world), placed at every chunk boundary by --dit-policy; multi-rank chunks run with
sequence parallelism (engine/elastic/dit_sp.h) over real UCX, or guidance parallelism when
every image of a two-rank chunk is guided. The same seed gives the same PNG bytes in-process and
under static:1, static:2 (guided images CFG-parallel, the guidance_scale=1 one Ulysses) and elastic (a worker killed during multi-rank
steps: test_dit_workers_kill.py). A size other than the native one runs on the worker ranks too
(on two ranks under static:2), through the openai client, with the in-process bytes."""
import base64
import concurrent.futures
import http.client
import json
import os
import signal
import time

import openai
import pytest

from conftest import Weftd
from pngread import read_png

DIT = os.environ.get("WEFT_DIT_MODEL", "/usr/local/share/weft/models/weft-dit-digits")
DIT_ID = os.path.basename(DIT.rstrip("/"))
pytestmark = pytest.mark.skipif(not os.path.isdir(DIT), reason=f"{DIT} missing (run scripts/setup)")

# Small step counts keep every run quick under the sanitizers; guidance on and off, n > 1.
# (A two-rank step is a dozen all-to-alls between two processes: on a loaded machine each one
# waits for both to be scheduled, so the multi-rank runs stay short.)
REQUESTS = [
    dict(prompt="3", n=2, seed=7, num_inference_steps=4),
    dict(prompt="5", n=1, seed=9, num_inference_steps=3, guidance_scale=3),
    dict(prompt="8", n=1, seed=11, num_inference_steps=3, guidance_scale=1),
]
LONG = dict(prompt="3", n=1, seed=7, num_inference_steps=16)  # for the kill test
# A size other than the native 8x8 (twice as wide), through the openai client.
SIZED = dict(prompt="4", n=2, size="16x8", extra_body=dict(seed=13, num_inference_steps=3))
# As many latent floats as the native 8x8, on another grid (16 wide, 4 high): told apart by its
# grid, not its bytes.
SAME_BYTES = dict(prompt="6", n=1, size="16x4", extra_body=dict(seed=17, num_inference_steps=2))
# Worker daemons: the image scheduler calibrates with batches of --image-max-batch images.
WORKER_ARGS = ("--workers", "2", "--heartbeat-ms", "200", "--image-max-batch", "2")


def post(d, body, timeout=120):
    c = http.client.HTTPConnection("127.0.0.1", d.port, timeout=timeout)
    c.request("POST", "/v1/images/generations", body=json.dumps(body),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


def generate(d, req):
    code, data = post(d, dict(model=DIT_ID, **req))
    assert code == 200, data
    return [base64.b64decode(x["b64_json"]) for x in json.loads(data)["data"]]


def admin(d):
    code, body = d.status("/admin/stats")
    assert code == 200
    return json.loads(body)


def run_all(d):
    # Concurrently, so that chunks of several requests share the ranks.
    with concurrent.futures.ThreadPoolExecutor(len(REQUESTS)) as pool:
        return list(pool.map(lambda r: generate(d, r), REQUESTS))


def latent_bytes(d):
    """Latent bytes per path summed over the worker ranks, and reshards."""
    ws = admin(d)["scheduler"]["workers"]
    out = {k: sum(w["dit_latent_bytes"][k] for w in ws)
           for k in ("worker", "from_rank0", "to_rank0", "mid_trajectory_rank0")}
    out["reshards"] = sum(w["dit_reshards"] for w in ws)
    return out


def dit_cost(d, policy):
    """/admin/stats' cost model, checked for shape and consistency."""
    c = admin(d)["dit_cost"]
    assert c["policy"] == policy and c["source"] == "measured" and c["tokens"] > 0, c
    degrees = {g["ranks"]: g for g in c["degrees"]}
    # Calibrated at start on 1 and 2 ranks: an unguided and a guided step each, the guided
    # one on 2 ranks guidance-parallel (CFG), as the workers run it.
    assert set(degrees) == {1, 2}, c
    assert set(degrees[1]["modes"]) == {"plain", "guided"}, c
    assert {"plain", "cfg"} <= set(degrees[2]["modes"]), c
    for g in c["degrees"]:
        assert g["correction"] > 0, g
        for mode in g["modes"].values():
            assert mode["measured_ms"] > 0, g
            assert mode["predicted_ms"] == pytest.approx(mode["measured_ms"] * g["correction"], rel=1e-6), g
    assert c["chunk_ms"] >= 0 and c["chunk_observations"] >= 0 and c["request_ms"] >= 0, c
    assert c["request_observations"] > 0, c  # the start-up requests at least
    assert c["reshard"]["latency_ms"] > 0 and c["reshard"]["ms_per_mib"] > 0, c
    assert c["group_form_ms"] == 0, c  # group-free collectives
    # The calibrated points: the native size's and a larger size's (the native grid doubled per
    # side: 16x16 within the default largest image, 4 x the native pixels), unguided on 1 and 2
    # ranks, where the cost model interpolates T(tokens, P) from; each with its class's correction.
    pts = {(p["tokens"], p["ranks"], p["mode"]): p for p in c["points"]}
    big = 4 * c["tokens"]
    for key in ((c["tokens"], 1, "plain"), (c["tokens"], 2, "plain"), (big, 1, "plain"), (big, 2, "plain")):
        assert key in pts and pts[key]["measured_ms"] > 0 and pts[key]["correction"] > 0, (key, c["points"])
    assert pts[(c["tokens"], 1, "plain")]["measured_ms"] == pytest.approx(degrees[1]["modes"]["plain"]["measured_ms"],
                                                                            rel=1e-6), c
    return c


def generate_openai(d, req):
    client = openai.OpenAI(base_url=d.base + "/v1", api_key="unused", max_retries=0, timeout=120)
    r = client.images.generate(model=DIT_ID, **req)
    return [base64.b64decode(x.b64_json) for x in r.data]


@pytest.fixture(scope="module")
def references():
    d = Weftd("--model", DIT)
    try:
        assert "dit_cost" not in admin(d)  # in-process: no worker ranks, no policy
        yield [generate(d, r) for r in REQUESTS], generate_openai(d, SIZED), generate_openai(d, SAME_BYTES)
    finally:
        assert d.stop() == 0


@pytest.fixture(scope="module")
def reference(references):
    return references[0]


@pytest.fixture(scope="module")
def reference_sized(references):
    return references[1], references[2]


@pytest.mark.parametrize("policy,sizes", [("static:1", {"1"}), ("static:2", {"2"}), ("elastic", None)])
def test_same_png_bytes_on_worker_ranks(reference, reference_sized, policy, sizes):
    d = Weftd("--model", DIT, *WORKER_ARGS, "--dit-policy", policy)
    try:
        moved0 = latent_bytes(d)
        assert run_all(d) == reference
        # Latents stayed on the workers between chunks: none passed rank 0 in mid-trajectory;
        # those whose group changed moved worker to worker.
        moved = {k: v - moved0[k] for k, v in latent_bytes(d).items()}
        assert moved["mid_trajectory_rank0"] == 0, moved
        assert (moved["reshards"] > 0) == (moved["worker"] > 0), moved
        im = admin(d)["images"]
        chunks = im["chunks_by_group_size"]
        total = sum(r["n"] * r["num_inference_steps"] for r in REQUESTS)
        assert sum(chunks.values()) == total, chunks
        if sizes is not None:
            assert set(chunks) == sizes, chunks
        assert im["last_group_size"] in (1, 2)
        # The chunks ran on the worker processes (a two-rank chunk counts on both).
        ranks = [w["dit_chunks"] for w in admin(d)["scheduler"]["workers"]]
        # (at least: the image scheduler's start-up calibration runs chunks too)
        assert sum(ranks) >= sum(int(p) * n for p, n in chunks.items()), (ranks, chunks)
        if policy != "elastic":
            assert all(n > 0 for n in ranks), ranks
        if policy == "static:2":
            # Another size runs on two worker ranks too (its 4 patch rows split in halves, or
            # its guided images' halves: its max_P is Ulysses' rule for its grid), its latent
            # from home to both and back each chunk: the openai client gets PNGs of that size,
            # the bytes of in-process.
            models = {m["id"]: m for m in json.loads(d.status("/v1/models")[1])["data"]}
            assert models[DIT_ID]["size_multiple"] == 2, models[DIT_ID]
            before = admin(d)
            got = generate_openai(d, SIZED)
            assert got == reference_sized[0]
            assert all(read_png(p).shape == (8, 16, 1) for p in got)
            same = generate_openai(d, SAME_BYTES)
            assert same == reference_sized[1]
            assert read_png(same[0]).shape == (4, 16, 1)
            after = admin(d)
            grown = {k: v - before["images"]["chunks_by_group_size"].get(k, 0)
                     for k, v in after["images"]["chunks_by_group_size"].items()}
            sized_chunks = sum(r["n"] * r["extra_body"]["num_inference_steps"] for r in (SIZED, SAME_BYTES))
            assert grown.get("2", 0) == sized_chunks, grown
            assert grown.get("1", 0) == 0, grown
            assert after["images"]["failed"] == before["images"]["failed"]
            ran = [a["dit_chunks"] - b["dit_chunks"] for a, b in
                   zip(after["scheduler"]["workers"], before["scheduler"]["workers"])]
            assert sum(ran) >= sized_chunks, ran
        if policy == "static:1":  # one rank: the executor runs it by its slot's grid
            assert generate_openai(d, SAME_BYTES) == reference_sized[1]
        # Which mode ran: two-rank chunks of guided images run guidance-parallel (counted on
        # both members), the unguided request's run Ulysses; one rank is neither.
        ws = admin(d)["scheduler"]["workers"]
        cfg, ranks = [w["dit_cfg_chunks"] for w in ws], [w["dit_chunks"] for w in ws]
        if policy == "static:1":
            assert cfg == [0, 0], cfg
        if policy == "static:2":
            assert cfg[0] == cfg[1] > 0, (cfg, ranks)
            assert all(c < n for c, n in zip(cfg, ranks)), (cfg, ranks)
        metrics = d.status("/metrics")[1].decode()
        assert "weft:image_group_size{" in metrics
        assert "weft:image_chunks_by_group_size_total{" in metrics
        # The DiT's chunks carry the DiT's name (they carried the LLM's beside it)
        for fam in ("weft:worker_dit_chunks_total", "weft:worker_dit_cfg_chunks_total"):
            assert f'{fam}{{model_name="{DIT_ID}",rank="1"' in metrics, metrics
        assert "weft:worker_dit_chunks_total{model_name=\"SmolLM2" not in metrics
    finally:
        assert d.stop() == 0


def test_latents_stay_on_workers_between_chunks(reference):
    # static:1 with one step per chunk: each image's 4 chunks run on one rank, and its latent
    # stays there between them; only x_T goes out and the final latent comes home.
    d = Weftd("--model", DIT, *WORKER_ARGS, "--dit-policy", "static:1")
    try:
        before = latent_bytes(d)
        cost0 = dit_cost(d, "static:1")
        chunks0 = sum(w["dit_chunks"] for w in admin(d)["scheduler"]["workers"])
        assert generate(d, REQUESTS[0]) == reference[0]
        # Every wave that ran steps taught the model its chunk overhead (one per chunk
        # boundary at least: 4 one-step chunks).
        cost = dit_cost(d, "static:1")
        assert cost["chunk_observations"] >= cost0["chunk_observations"] + REQUESTS[0]["num_inference_steps"], (cost0, cost)
        after = latent_bytes(d)
        delta = {k: after[k] - before[k] for k in after}
        chunks = sum(w["dit_chunks"] for w in admin(d)["scheduler"]["workers"]) - chunks0
        assert chunks >= REQUESTS[0]["n"] * REQUESTS[0]["num_inference_steps"], chunks
        # Not one byte of a latent through rank 0 between two chunks: x_T goes out with the
        # first chunk and the latent comes home with the last (should a lane hand an image to
        # the other, its rows move worker to worker).
        assert delta["mid_trajectory_rank0"] == 0, delta
        assert delta["from_rank0"] > 0 and delta["to_rank0"] > 0, delta
        assert (delta["reshards"] > 0) == (delta["worker"] > 0), delta
        metrics = d.status("/metrics")[1].decode()
        for path in ("worker", "from_rank0", "to_rank0"):
            assert f'path="{path}"' in metrics
            assert f'weft:worker_dit_latent_bytes_total{{model_name="{DIT_ID}",rank="1",role="worker",path="{path}"}}' in metrics
        assert f'weft:worker_dit_reshards_total{{model_name="{DIT_ID}"' in metrics
        assert f'weft:worker_dit_latent_mid_rank0_bytes_total{{model_name="{DIT_ID}"' in metrics
    finally:
        assert d.stop() == 0


def test_bad_dit_policy_is_refused_at_start():
    import subprocess
    from conftest import BIN_DIR
    exe = os.path.join(BIN_DIR, "weftd")
    r = subprocess.run([exe, "--model", DIT, "--dit-policy", "elastic"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--dit-policy needs --workers" in r.stderr, r.stderr
    r = subprocess.run([exe, "--model", DIT, "--workers", "2", "--dit-policy", "fastest"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and "--dit-policy 'fastest'" in r.stderr, r.stderr


def test_worker_to_worker_reshard_keeps_png_bytes():
    # Elastic on 2 ranks: an image alone may get both (its best fit is 1 rank; the leftover
    # goes to it when the measured model says 2 ranks are faster); a second request arriving
    # mid-way takes a rank of its own, so the first one's group changes and its rows move
    # worker to worker. The PNG bytes are those of the in-process run all the same. Whether
    # 2 ranks beat 1 for this tiny DiT is the machine's own measurement (close on a loaded
    # host), so the pattern is tried a few times and the test is skipped, saying so, when the
    # policy never moved a latent.
    long_req = dict(LONG, num_inference_steps=200, guidance_scale=1)
    short_req = REQUESTS[0]
    ref = Weftd("--model", DIT)
    try:
        want = [generate(ref, long_req), generate(ref, short_req)]
    finally:
        assert ref.stop() == 0
    # A daemon's calibration decides whether 2 ranks beat 1: a few daemons, a few tries each.
    for _ in range(3):
        d = Weftd("--model", DIT, *WORKER_ARGS, "--dit-policy", "elastic")
        try:
            for attempt in range(3):
                before = latent_bytes(d)
                with concurrent.futures.ThreadPoolExecutor(2) as pool:
                    first = pool.submit(generate, d, long_req)
                    # Wait until the first image runs, with most of its steps left.
                    give_up = time.monotonic() + 60
                    while time.monotonic() < give_up:
                        reqs = admin(d)["images"]["requests"]
                        if reqs and reqs[0]["steps_done"] >= 2:
                            break
                        time.sleep(0.005)  # leave the cores to the daemon between polls
                    else:
                        pytest.fail("the first image never started")
                    second = pool.submit(generate, d, short_req)
                    got = [first.result(), second.result()]
                assert got == want
                moved = {k: v - before[k] for k, v in latent_bytes(d).items()}
                assert moved["mid_trajectory_rank0"] == 0, moved
                assert (moved["reshards"] > 0) == (moved["worker"] > 0), moved
                if moved["worker"] > 0:
                    return
            degrees = admin(d)["dit_cost"]["degrees"]
        finally:
            assert d.stop() == 0
    pytest.skip("the elastic policy kept every latent on its rank in 3 daemons x 3 tries (2 ranks "
                f"not faster in the measured model: {degrees})")


def test_worker_ranks_take_the_coordinators_batch_size():
    # --image-max-batch above the DiT's default (8): the workers open the DiT with the
    # coordinator's batch size and latent slots (the same rule, wf_dit_exec_options_set_batch),
    # so a chunk of 10 unguided images is one forward pass on a worker rank, and the PNG bytes
    # are those of the in-process run.
    big = dict(prompt="7", n=10, seed=5, num_inference_steps=2, guidance_scale=1)  # 10 rows
    ref = Weftd("--model", DIT)
    try:
        want = generate(ref, big)
    finally:
        assert ref.stop() == 0
    d = Weftd("--model", DIT, "--workers", "2", "--heartbeat-ms", "200", "--image-max-batch", "10",
              "--dit-policy", "static:1")
    try:
        assert generate(d, big) == want
        assert admin(d)["images"]["chunks_by_group_size"].get("1", 0) >= 20
    finally:
        assert d.stop() == 0


def test_stop_is_clean():
    """SIGTERM to a daemon whose workers ran two-rank chunks: every worker leaves by itself, and
    no UCX error is logged. Its workers closed their endpoints gracefully, and a graceful close
    to a rank that no longer progresses (the coordinator waiting for them) or has left (the
    other worker) spun out UCX's time-out: the coordinator killed them after 2 s, then its own
    closes to them logged "error during flush: Endpoint timeout" (workers with a DiT run
    without CMA, so these endpoints were TCP's)."""
    # (the daemon as users start it: the LLM's cost model calibrated on the workers too)
    d = Weftd("--model", DIT, *WORKER_ARGS, "--dit-policy", "static:2", llm_flags=False)
    try:
        generate(d, REQUESTS[2])  # Ulysses on both ranks: the workers' endpoints to each other are up
    finally:
        d.proc.send_signal(signal.SIGTERM)
        d.proc.wait(60)
        log = d.logtext(200000)
        assert d.stop() == 0
    assert "did not leave" not in log, log[-3000:]
    assert "UCX  ERROR" not in log and "error during flush" not in log, log[-3000:]
