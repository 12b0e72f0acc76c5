# weft-test: labels=integration,net timeout=600
"""A worker joined by hand without the coordinator's DiT (`weftd --role worker --join ...` given
only the LLM): it answers DiT chunks with "no DiT model on this worker". Before, every image
request whose chunk the policy put there failed with that error although another rank had the
DiT, and the start-up calibration of two ranks waited out the world's 10 s time-out in a
collective with it. Now the router probes each worker once at start and marks one that answers
so (that process: a replacement started right is used again): its chunks run on the other
ranks, the log says which worker lacks the model, and with no rank left the request ends with
an error naming the cause."""
import base64
import json

import pytest

from conftest import free_port
from test_dit_workers import DIT, DIT_ID, admin, post
from test_pd_join import coordinator_in_background, start_worker, stop_worker

pytestmark = pytest.mark.skipif(not __import__("os").path.isdir(DIT), reason=f"{DIT} missing (run scripts/setup)")


def joined_world(n_workers, n_local, policy):
    port = free_port()
    t, box = coordinator_in_background("--model", DIT, "--workers", str(n_workers), "--local-workers", str(n_local),
                                       "--world-port", str(port), "--heartbeat-ms", "200", "--dit-policy", policy)
    w = start_worker(port, n_workers + 1)  # the LLM only: no DiT
    t.join(300)
    if "error" in box:
        stop_worker(*w)
        raise box["error"]
    return box["d"], w


@pytest.mark.parametrize("policy", ["static:1", "elastic"])
def test_chunks_avoid_a_worker_without_the_dit(policy):
    d, w = joined_world(2, 1, policy)
    try:
        for seed in (1, 2, 3):
            code, data = post(d, dict(model=DIT_ID, prompt="3", n=2, seed=seed, num_inference_steps=4))
            assert code == 200, data[:400]
            for x in json.loads(data)["data"]:
                assert base64.b64decode(x["b64_json"])[:8] == b"\x89PNG\r\n\x1a\n"
        ws = admin(d)["scheduler"]["workers"]
        joined = [x for x in ws if x["pid"] == 0]  # not started by the coordinator (its slot: either)
        local = [x for x in ws if x["pid"] != 0]
        assert len(joined) == 1 and len(local) == 1, ws
        assert local[0]["dit_chunks"] > 0 and joined[0]["dit_chunks"] == 0, ws
        assert joined[0]["state"] == "live"  # it still serves text
        assert f"worker rank {joined[0]['rank']} has no DiT model" in d.logtext(200000)
    finally:
        assert d.stop() == 0
        stop_worker(*w)


def test_no_worker_with_the_dit_is_a_clear_error():
    d, w = joined_world(1, 0, "static:1")
    try:
        code, data = post(d, dict(model=DIT_ID, prompt="3", seed=1, num_inference_steps=2))
        assert code >= 500, data[:400]
        msg = json.loads(data)["error"]["message"]
        assert "no live DiT worker rank" in msg and "1 without the DiT model" in msg, msg
        # the batch failed, not the image's ENCODE (which ran; it said "encode failed")
        assert "image 0: its batch failed" in msg, msg
    finally:
        assert d.stop() == 0
        stop_worker(*w)
