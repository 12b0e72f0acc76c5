"""weft-bench's image workload against a real weftd serving the default DiT (weft-dit-digits):
calibration, a piecewise-Poisson profile with deadlines, a streamed run; weft-bench's counts
agree with weftd's own /metrics counters.
weft-test: labels=slow,integration timeout=900

Skipped (with the reason) only when this weftd serves no image model at all (a build from
before POST /v1/images/generations); any other failure fails.
"""
import json
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from conftest import BIN_DIR, Weftd, http_get, metric_sum  # noqa: E402  (the integration tests' helper)

BENCH = os.path.join(BIN_DIR, "weft-bench")
DIT = os.environ.get("WEFT_DIT", "/usr/local/share/weft/models/weft-dit-digits")

PROFILE = """# a light phase, a burst of short requests, a drain
phase light 0 3 4/s S=1 M=1 L=1
phase burst 3 5 12/s S=8 M=1 L=1
phase drain 5 6 0
"""


@pytest.fixture(scope="module")
def weftd():
    if not os.path.isdir(DIT):
        pytest.fail("default DiT missing: %s (run scripts/setup)" % DIT)
    helptext = subprocess.run([os.path.join(BIN_DIR, "weftd"), "--help"], capture_output=True,
                              text=True).stdout
    if "--image-" not in helptext:  # the image serving options (--image-batching, ...)
        pytest.skip("this weftd has no image serving (POST /v1/images/generations) yet")
    d = Weftd("--log-level", "warn", "--metrics-open", model=DIT, llm_flags=False)
    try:
        models = json.loads(http_get(d.port, "/v1/models")[1])["data"]
        if not any(m.get("type") == "image" for m in models):
            pytest.fail("weftd loaded %s but lists no image model: %s" % (DIT, models))
        yield d.port
    finally:
        d.stop()


def bench(port, *args):
    cmd = [BENCH, "--workload", "images", "--port", str(port), "--no-progress", *map(str, args)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, "weft-bench failed (%d): %s\n%s" % (p.returncode, " ".join(cmd), p.stderr + p.stdout)
    return p


def counters(port):
    text = http_get(port, "/metrics")[1]
    return {
        "success": metric_sum(text, "weft:image_requests_total", 'status="success"') or 0,
        "rejected": metric_sum(text, "weft:image_requests_rejected_total") or 0,
        "images": metric_sum(text, "weft:images_generated_total") or 0,
    }


def test_profile_run_agrees_with_weftd(weftd, tmp_path):
    prof = tmp_path / "burst.profile"
    prof.write_text(PROFILE)
    out = tmp_path / "r.json"
    before = counters(weftd)
    p = bench(weftd, "--profile", prof, "--calibrate-reps", 2, "--seed", 3, "--json", out)
    after = counters(weftd)
    # no --model: weft-bench takes the image model weftd lists, its size and its classes
    r = json.load(open(out))
    assert r["model"] == "weft-dit-digits"
    assert p.stdout.count("calibrated T_single") == 3  # S, M, L all used by the profile
    run = r["runs"][0]
    assert run["failed"] == 0, run["errors"]
    assert run["issued"] == run["completed"] + run["refused"] and run["completed"] >= 1
    assert run["images"] == run["completed"]
    for c in run["classes"]:
        assert c["t_single_ms"] > 0 and c["deadline_ms"] == pytest.approx(c["alpha"] * c["t_single_ms"])
    # weftd saw exactly what weft-bench reports: calibration (1 warm-up + 2 x 3 classes) + run
    assert after["success"] - before["success"] == run["completed"] + 7
    assert after["images"] - before["images"] == run["completed"] + 7
    assert after["rejected"] - before["rejected"] == run["refused"]


def test_streamed_run(weftd, tmp_path):
    out = tmp_path / "r.json"
    bench(weftd, "--stream", "--image-n", 2, "--concurrency", 2, "--num-requests", 6,
          "--t-single", "S=100,M=200,L=400", "--no-slo-ext", "--json", out)
    run = json.load(open(out))["runs"][0]
    assert run["completed"] == 6 and run["images"] == 12 and run["failed"] == 0
    assert run["mean_first_event_ms"] is not None
