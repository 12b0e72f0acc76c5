"""weft-bench's image workload end to end against a fake image server on loopback.
weft-test: labels=unit,net timeout=300

The fake server (image_server.py) returns real PNGs, refuses some requests with 429 and
Retry-After, delays others, and can answer a PNG of the wrong size: this tests the load
generator (arrivals, classes, deadlines, checks, report), not a server. Timings are asserted only
where the fake server guarantees them (a request it delays by 0.5 s cannot meet a 75 ms deadline).
"""
import csv
import os
import shutil
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from bench_cli import BIN, have_binary, result  # noqa: E402,F401 (have_binary: autouse)
from bench_cli import bench as run_bench  # noqa: E402
from image_server import ImageServer  # noqa: E402

PROFILE = """# two loaded phases and a gap
class S 16x8 steps=4 alpha=1.5 priority=100
class L 24x24 steps=20 alpha=6 priority=0
phase a    0.0 1.5  20/s S=1
phase gap  1.5 2.0  0
phase b    2.0 3.0  1200/min L=1
"""


def bench(port, *args, **kw):
    return run_bench(port, "--workload", "images", *args, **kw)


def test_profile_arrivals_classes_and_deadlines(tmp_path):
    prof = tmp_path / "two.profile"
    prof.write_text(PROFILE)
    out, rows = tmp_path / "r.json", tmp_path / "r.csv"
    with ImageServer(base_s=0.002, step_s=0.0005) as s:
        p = bench(s.port, "--profile", prof, "--t-single", "S=40,L=100", "--seed", 5,
                  "--json", out, "--csv", rows)
        bodies = s.state.bodies
    assert "calibrated" not in p.stdout  # both T_single given: no calibration requests
    r = result(out)
    assert r["workload"] == "images" and "profile two over 3 s" in r["profile"]
    run = r["runs"][0]
    assert run["mode"] == "open" and run["stop_reason"] == "count"
    # Poisson counts for seed 5 are fixed; 30 + 20 expected (4 sigma bounds hold for any seed)
    n_s = sum(1 for b in bodies if b["size"] == "16x8")
    n_l = sum(1 for b in bodies if b["size"] == "24x24")
    assert n_s + n_l == len(bodies) == run["issued"] == run["completed"]
    assert abs(n_s - 30) < 4 * 30 ** 0.5 and abs(n_l - 20) < 4 * 20 ** 0.5
    assert run["images"] == run["completed"] and run["refused"] == 0 and run["failed"] == 0
    classes = {c["name"]: c for c in run["classes"]}
    assert classes["S"]["issued"] == n_s and classes["L"]["issued"] == n_l
    assert classes["M"]["issued"] == 0  # a default class no phase uses
    phases = {x["name"]: x for x in run["phases"]}  # by arrival time on the profile clock
    assert (phases["a"]["issued"], phases["gap"]["issued"], phases["b"]["issued"]) == (n_s, 0, n_l)
    assert phases["gap"]["slo_attainment"] is None
    assert "phase" in p.stdout and "SLO met" in p.stdout
    assert classes["S"]["deadline_ms"] == pytest.approx(60.0)
    assert classes["L"]["deadline_ms"] == pytest.approx(600.0)
    for b in bodies:
        small = b["size"] == "16x8"
        assert b["response_format"] == "b64_json" and b["n"] == 1 and "stream" not in b
        assert b["num_inference_steps"] == (4 if small else 20)
        assert b["priority"] == (100 if small else 0)
        # the deadline left when sent: alpha x T_single, less any time spent before sending
        assert 0 < b["slo"]["deadline_ms"] <= (60 if small else 600)
        assert isinstance(b["seed"], int)
        assert "model" not in b  # no --model: the server's default image model
    with open(rows) as f:
        recs = list(csv.DictReader(f))
    assert len(recs) == run["issued"]
    # phase a sends only S, phase b only L: every L is due after every S. On weft-bench's own
    # schedule (arrival_s), not the server's clock: a loaded host may delay a send.
    first_l = min(float(x["arrival_s"]) for x in recs if x["slo_class"] == "L")
    last_s = max(float(x["arrival_s"]) for x in recs if x["slo_class"] == "S")
    assert first_l - last_s >= 0.5 - 1e-6  # the gap phase [1.5, 2.0) has no arrivals
    assert {x["slo_class"] for x in recs} == {"S", "L"}
    assert all(x["images"] == "1" and x["outcome"] == "ok" for x in recs)
    # L arrivals are scheduled at >= 2 s on the profile clock
    assert all(float(x["arrival_s"]) >= 1.9 for x in recs if x["slo_class"] == "L")
    # the same seed gives the same request sequence
    with ImageServer(base_s=0.002, step_s=0.0005) as s:
        bench(s.port, "--profile", prof, "--t-single", "S=40,L=100", "--seed", 5)
        again = s.state.bodies
    # (compared as sets: two arrivals a few ms apart may reach the server in either order)
    assert sorted((b["size"], b["seed"]) for b in again) == sorted((b["size"], b["seed"]) for b in bodies)


def test_calibration_refusals_and_slow_requests(tmp_path):
    out = tmp_path / "r.json"
    # every 5th arrival is refused (429, Retry-After), every 4th is 0.5 s slower
    with ImageServer(base_s=0.01, step_s=0.001, refuse_every=5, slow_every=4, slow_s=0.5) as s:
        p = bench(s.port, "--image-class", "S:8x8:5:1.5", "--image-class", "L:8x8:40:6",
                  "--image-mix", "S=1,M=0,L=1", "--rate", 10, "--num-requests", 20,
                  "--class-labels", 10, "--calibrate-reps", 1, "--json", out)
        bodies = s.state.bodies
        counts = dict(s.state.status_counts)
    # calibration: one warm-up + one request per class the run uses (S, L; M has no weight),
    # alone, without deadlines
    assert "calibrated T_single of class S (8x8, 5 steps): " in p.stdout
    assert "(median of 1, " in p.stdout
    assert p.stdout.count("calibrated T_single") == 2
    assert all("slo" not in b for b in bodies[:3]) and all("slo" in b for b in bodies[3:])
    run = result(out)["runs"][0]
    assert run["issued"] == 20 and run["refused"] + run["completed"] + run["failed"] == 20
    # the server's arrivals 5, 10, ... are refused; 1-3 are the calibration requests
    assert counts[429] == run["refused"] == run["errors"]["http_429"] >= 3
    assert run["failed"] == 0
    assert "Refused requests (429/503):" in p.stdout and "SLO attainment:" in p.stdout
    classes = {c["name"]: c for c in run["classes"]}
    assert classes["M"]["issued"] == 0
    for c in ("S", "L"):
        assert classes[c]["t_single_ms"] > (10 + (5 if c == "S" else 40)) * 1.0  # the server sleeps that long
    # every delayed request misses: 0.5 s is far beyond both deadlines
    slow = sum(1 for k in range(4, 24) if k % 4 == 0 and k % 5 != 0)
    assert run["slo_met"] <= run["completed"] - slow
    assert all(0 <= b["class_label"] < 10 for b in bodies[3:])
    assert run["mean_normalized_latency"] >= 0.5


def test_retry_after_resends(tmp_path):
    out = tmp_path / "r.json"
    with ImageServer(base_s=0.002, step_s=0.0, refuse_every=3, retry_after="0.05") as s:
        bench(s.port, "--t-single", "S=1000,M=1000,L=1000", "--concurrency", 2, "--num-requests", 12,
              "--retry-after", "--json", out)
        counts = dict(s.state.status_counts)
        bodies = s.state.bodies
    run = result(out)["runs"][0]
    assert run["completed"] == 12 and run["refused"] == 0 and run["failed"] == 0
    assert counts[429] >= 4 and counts[200] == 12
    # a re-sent request carries what is left of its deadline: >= 50 ms less after Retry-After
    by_seed = {}
    for b in bodies:
        by_seed.setdefault(b["seed"], []).append(b["slo"]["deadline_ms"])
    resent = [d for d in by_seed.values() if len(d) > 1]
    assert sum(len(d) - 1 for d in resent) == counts[429]  # every refusal was sent again
    for d in resent:
        assert all(later <= earlier - 50 for earlier, later in zip(d, d[1:])), d
    # a refusal whose Retry-After ends past the deadline (S: 1.5 x 20 ms < 50 ms) stands
    with ImageServer(base_s=0.002, step_s=0.0, refuse_every=3, retry_after="0.05") as s:
        bench(s.port, "--t-single", "S=20", "--image-mix", "S=1", "--concurrency", 2,
              "--num-requests", 12, "--retry-after", "--json", out)
        seeds = [b["seed"] for b in s.state.bodies]
    run = result(out)["runs"][0]
    assert len(seeds) == len(set(seeds)) == 12  # nothing re-sent
    assert run["refused"] == 4 and run["completed"] == 8
    # the same without weft's extension (a peer knows no deadline): re-sent
    with ImageServer(base_s=0.002, step_s=0.0, refuse_every=3, retry_after="0.05") as s:
        bench(s.port, "--t-single", "S=20", "--image-mix", "S=1", "--concurrency", 2,
              "--num-requests", 12, "--retry-after", "--no-slo-ext", "--json", out)
    run = result(out)["runs"][0]
    assert run["refused"] == 0 and run["completed"] == 12


def test_held_back_requests_send_the_deadline_left(tmp_path):
    # 6 arrivals at once, one in flight at a time, 50 ms each at the server: the k-th request
    # waits >= k x 50 ms in weft-bench before it is sent, and its deadline_ms says so
    with ImageServer(base_s=0.05, step_s=0.0) as s:
        bench(s.port, "--t-single", "S=1000", "--image-mix", "S=1", "--rate", "inf",
              "--num-requests", 6, "--max-concurrency", 1)
        sent = [b["slo"]["deadline_ms"] for b in s.state.bodies]
    assert len(sent) == 6 and sent[0] <= 1500
    for k, d in enumerate(sent):
        assert d <= 1500 - 50 * k, sent


def test_bad_png_is_a_failure_and_peer_mode(tmp_path):
    out = tmp_path / "r.json"
    with ImageServer(base_s=0.002, step_s=0.0, bad_size_every=3) as s:
        p = bench(s.port, "--t-single", "S=50,M=50,L=50", "--num-requests", 9, "--no-slo-ext",
                  "--no-image-seed", "--model", "qwen-image", "--image-prompt", "a cat",
                  "--json", out)
        bodies = s.state.bodies
    run = result(out)["runs"][0]
    assert run["completed"] == 6 and run["failed"] == 3 and run["errors"] == {"stream_error": 3}
    assert "stream_error=3" in p.stdout
    for b in bodies:
        assert "slo" not in b and "priority" not in b and "seed" not in b
        assert b["model"] == "qwen-image" and b["prompt"] == "a cat"


def test_streamed_images(tmp_path):
    out = tmp_path / "r.json"
    with ImageServer(base_s=0.01, step_s=0.002) as s:
        bench(s.port, "--t-single", "S=100,M=100,L=200", "--stream", "--concurrency", 2,
              "--num-requests", 6, "--image-n", 2, "--json", out)
        bodies = s.state.bodies
    run = result(out)["runs"][0]
    assert all(b["stream"] is True and b["n"] == 2 for b in bodies)
    assert run["completed"] == 6 and run["images"] == 12
    assert run["mean_first_event_ms"] is not None and run["mean_first_event_ms"] <= run["mean_latency_ms"]


def test_sweep_and_plots(tmp_path):
    prof = tmp_path / "p.profile"
    prof.write_text("phase only 0 1 10/s S=1 M=1 L=1\n")
    out, plot = tmp_path / "r.json", tmp_path / "img"
    with ImageServer(base_s=0.002, step_s=0.0002) as s:
        p = bench(s.port, "--profile", prof, "--t-single", "S=20,M=40,L=80", "--target-load",
                  "0.2,0.6", "--json", out, "--plot", plot, check=False)
    assert p.returncode == 0 or (p.returncode == 1 and "gnuplot" in p.stderr), p.stderr
    runs = result(out)["runs"]
    assert [x["label"] for x in runs] == ["p load=0.2", "p load=0.6"]
    # load = rate x mean T_single / 1 server: 0.2 = 10/s x k x (20+40+80)/3 ms
    assert runs[0]["rate_scale"] == pytest.approx(0.2 / (10 * 0.140 / 3))
    assert runs[1]["rate_scale"] == pytest.approx(0.6 / (10 * 0.140 / 3))
    assert "load point" in p.stdout and "img/s" in p.stdout
    if shutil.which("gnuplot"):
        assert (tmp_path / "img_latency_cdf.png").stat().st_size > 1000
        assert (tmp_path / "img_throughput.png").stat().st_size > 1000


def test_trace_out_matches_the_run(tmp_path):
    prof = tmp_path / "two.profile"
    prof.write_text(PROFILE)
    trace = tmp_path / "trace.json"
    args = ["--profile", prof, "--t-single", "S=40,L=100", "--seed", 9, "--trace-out", trace]
    with ImageServer(base_s=0.002, step_s=0.0) as s:
        p = bench(s.port, *args, "--dry-run")
        assert s.state.arrivals == 0  # --dry-run sends nothing
    t = result(trace)
    n = len(t["requests"])
    assert "%d requests written to" % n in p.stdout
    meta = t["metadata"]
    assert meta["profile"] == "two" and meta["seed"] == 9 and meta["rate_scale"] == 1
    assert [ph["name"] for ph in meta["phases"]] == ["a", "gap", "b"]
    assert meta["phases"][2]["arrival_rate_per_min"] == pytest.approx(1200)
    assert meta["class_counts"]["S"] + meta["class_counts"]["L"] == n
    arrivals = [r["arrival_ms"] for r in t["requests"]]
    assert arrivals == sorted(arrivals)
    for r in t["requests"]:
        small = r["request_class"] == "S"
        assert (r["width"], r["height"], r["num_steps"]) == ((16, 8, 4) if small else (24, 24, 20))
        assert r["deadline_ms"] == pytest.approx(r["arrival_ms"] + (60 if small else 600))
        assert r["profiled_optimal_latency_ms"] == (40 if small else 100)
        assert (r["arrival_ms"] < 1500) if small else (2000 <= r["arrival_ms"] < 3000)
    # the run sends exactly the requests of the trace
    with ImageServer(base_s=0.002, step_s=0.0) as s:
        bench(s.port, *args)
        sent = sorted((b["seed"], b["num_inference_steps"]) for b in s.state.bodies)
    assert sent == sorted((r["seed"], r["num_steps"]) for r in t["requests"])


def test_trace_replay(tmp_path):
    prof = tmp_path / "two.profile"
    prof.write_text(PROFILE)
    trace = tmp_path / "trace.json"
    with ImageServer() as s:
        bench(s.port, "--profile", prof, "--t-single", "S=40,L=100", "--seed", 4, "--trace-out",
              trace, "--dry-run")
    t = result(trace)
    out = tmp_path / "r.json"
    # replayed twice as fast, the L class mapped to another size (a replaced class needs its
    # T_single again: given here, else calibrated); S keeps T_single and alpha from the trace;
    # every request is sent with its seed, steps and deadline
    with ImageServer(base_s=0.002, step_s=0.0) as s:
        p = bench(s.port, "--trace", trace, "--rate-scale", 2, "--image-class", "L:12x12:20:6",
                  "--t-single", "L=100", "--json", out)
        bodies = s.state.bodies
    assert "calibrated" not in p.stdout
    run = result(out)["runs"][0]
    assert run["label"] == "trace x2" and run["completed"] == len(t["requests"]) == len(bodies)
    assert sorted((b["seed"], b["num_inference_steps"]) for b in bodies) == \
        sorted((r["seed"], r["num_steps"]) for r in t["requests"])
    sizes = {b["size"] for b in bodies}
    assert sizes == {"16x8", "12x12"}
    classes = {c["name"]: c for c in run["classes"]}
    assert classes["S"]["t_single_ms"] == 40 and classes["S"]["alpha"] == pytest.approx(1.5)
    assert classes["L"]["t_single_ms"] == 100 and classes["L"]["deadline_ms"] == pytest.approx(600)
    assert all(0 < b["slo"]["deadline_ms"] <= (60 if b["size"] == "16x8" else 600) for b in bodies)
    assert result(out)["profile"].startswith("trace ")
    bad = tmp_path / "bad.json"
    bad.write_text('{"requests": [{"request_class": "S", "arrival_ms": 5}]}')
    p = bench(1, "--trace", bad, check=False)
    assert p.returncode == 2 and "request 0 needs request_class (1..15 characters), arrival_ms >= 0" in p.stderr


def test_bad_options():
    cases = [
        (["--profile", "no_such_profile"], "not a built-in profile"),
        (["--image-class", "S:8x8"], "bad image class 'S:8x8'"),
        (["--rate-scale", "2"], "go with --profile"),
        (["--profile", "short", "--rate", "3"], "--profile sets the arrivals"),
        (["--t-single", "Q=5"], "bad --t-single"),
        (["--image-mix", "X=1"], "unknown class 'X'"),
        (["--trace-out", "t.json"], "go with --profile"),
        (["--profile", "short", "--image-mix", "S=1"], "--image-mix is for --rate/--concurrency"),
        (["--output-len", "5"], "--output-len does not apply to --workload images"),
        (["--profile", "short", "--burstiness", "0.5"], "with --profile or --trace"),
        (["--trace", "/nonexistent.json"], "trace /nonexistent.json"),
        (["--trace", "x.json", "--rate", "2"], "--trace sets the arrivals"),
        (["--profile", "short", "--dry-run", "--trace-out", "t.json"], "give --t-single for class S"),
    ]
    for args, msg in cases:
        p = bench(1, *args, check=False)
        assert p.returncode == 2 and msg in p.stderr, (args, p.stderr)
    for args in (["--profile", "short"], ["--image-n", "2"], ["--class-labels", "10"]):
        p = subprocess.run([BIN, *args], capture_output=True, text=True)
        assert p.returncode == 2 and "go with --workload images" in p.stderr, args
