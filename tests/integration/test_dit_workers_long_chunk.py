# weft-test: labels=integration,net timeout=600
"""weftd --workers 2 with the larger bundled DiT (weft-dit-fmnist): a DENOISE chunk that runs longer than
--worker-timeout-ms does not take its workers down. The coordinator sends nothing to a worker
running a batch, so the worker shows it is alive itself: a single-rank chunk runs on the DiT
executor's thread while the worker's loop sends heartbeats, a multi-rank one (sequence or
guidance parallel, on the world's thread) sends them between its rounds. Before that, a chunk
longer than four time-outs (a started worker's slack while it holds a batch) was taken for a
dead worker: both ranks were killed and the request failed with "no live DiT worker rank".
Here the time-out is 300 ms (1.2 s of slack) and one chunk is 999 steps (--image-chunk-steps
1000; fewer under the sanitizers) of the larger bundled DiT on two workers sharing one core:
over a second each even on an idle host."""
import base64
import json
import os
import time

import pytest

from conftest import Weftd, health
from test_dit_workers import admin, post

# The larger bundled DiT (32x32, 64 tokens a step): its chunks are the long ones.
DIT = os.environ.get("WEFT_DIT_MODEL_LARGE", "/usr/local/share/weft/models/weft-dit-fmnist")
DIT_ID = os.path.basename(DIT.rstrip("/"))
pytestmark = pytest.mark.skipif(not os.path.isdir(DIT), reason=f"{DIT} missing (run scripts/setup)")

# Fewer steps under the sanitizers, whose chunks are several times slower anyway (still well
# past the slack), so that the test stays within a minute there too.
SANITIZE = os.environ.get("WEFT_SANITIZE", "")
STEPS = 120 if "thread" in SANITIZE else 300 if SANITIZE else 999
TIMEOUT_MS = 300
ARGS = ("--workers", "2", "--worker-cores", "0:0", "--heartbeat-ms", "50",
        "--worker-timeout-ms", str(TIMEOUT_MS), "--image-chunk-steps", "1000", "--image-max-batch", "2")


@pytest.mark.parametrize("policy,size,guidance,group", [
    ("static:1", "64x32", 2, 1),   # another size than the native one: one rank, from home and back
    ("static:2", "32x32", 2, 2),     # guided on two ranks: guidance-parallel
    ("static:2", "32x32", 1, 2),     # unguided on two ranks: Ulysses
])
def test_long_chunk_keeps_its_workers(policy, size, guidance, group):
    d = Weftd(*ARGS, "--dit-policy", policy, model=DIT, llm_flags=False)
    try:
        before = {w["rank"]: w for w in admin(d)["scheduler"]["workers"]}
        chunks0 = admin(d)["images"]["chunks_by_group_size"].get(str(group), 0)
        t0 = time.monotonic()
        code, data = post(d, dict(model=DIT_ID, prompt="1", size=size, seed=5, guidance_scale=guidance,
                                  num_inference_steps=STEPS), timeout=300)
        print(f"{policy} {size} guidance {guidance}: {time.monotonic() - t0:.2f} s")
        assert code == 200, (data[:500], d.logtext())
        png = base64.b64decode(json.loads(data)["data"][0]["b64_json"])
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        st = admin(d)
        # Its chunk ran on a group of the policy's size (the image scheduler's idle probes may
        # add chunks of their own).
        assert st["images"]["chunks_by_group_size"].get(str(group), 0) > chunks0, st["images"]
        assert st["images"]["running"] == 0 and st["images"]["failed"] == 0, st["images"]
        for w in st["scheduler"]["workers"]:
            # Never taken for dead: live, not restarted, the same process, no error.
            assert w["state"] == "live" and w["restarts"] == 0, (w, d.logtext())
            assert w["pid"] == before[w["rank"]]["pid"] and not w["last_error"], w
        code, h = health(d)
        assert code == 200 and h["status"] == "ok", h
        assert "silent for" not in d.logtext(100000)
    finally:
        assert d.stop() == 0
