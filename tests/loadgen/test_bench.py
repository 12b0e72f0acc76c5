"""weft-bench end to end against a mock OpenAI server on loopback (deterministic token timing).
weft-test: labels=unit,net timeout=300

Timings are never asserted beyond lower bounds the mock guarantees (a shared, noisy machine);
counts, token totals, error tallies, bounds and file formats are asserted exactly.
"""
import csv
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from bench_cli import BIN, bench, have_binary, result  # noqa: E402,F401 (have_binary: autouse)
from mock_server import MockServer  # noqa: E402

DATA = os.path.join(os.path.dirname(__file__), "data")


def test_closed_loop_completions(tmp_path):
    out = tmp_path / "r.json"
    with MockServer(ttft_s=0.02, itl_s=0.001) as m:
        bench(m.port, "--concurrency", 4, "--num-requests", 20, "--input-len", 16,
              "--output-len", 8, "--json", out)
        bodies = m.state.bodies
    r = result(out)
    run = r["runs"][0]
    assert r["model"] == "mock-model"  # discovered through GET /v1/models
    assert run["mode"] == "closed" and run["concurrency"] == 4
    assert run["stop_reason"] == "count"
    assert run["completed"] == 20 and run["failed"] == 0 and run["issued"] == 20
    assert run["total_output_tokens"] == 160
    assert run["total_input_tokens"] == 20 * 16  # the mock counts words: one per token
    assert not run["tokens_estimated"]
    assert run["n_ttft"] == 20 and run["n_tpot"] == 20
    assert run["n_itl"] == 20 * 7  # every gap between the 8 chunks of each request
    assert run["min_ttft_ms"] >= 20.0  # the mock never answers sooner
    assert run["p99_ttft_ms"] >= run["median_ttft_ms"] >= run["min_ttft_ms"]
    assert run["mean_e2el_ms"] >= run["mean_ttft_ms"]
    assert run["connections"] <= 8  # keep-alive: about one connection per stream
    assert len(bodies) == 20
    for b in bodies:
        assert b["max_tokens"] == 8 and b["stream"] is True and b["ignore_eos"] is True
        assert b["stream_options"] == {"include_usage": True}
        assert b["model"] == "mock-model"
        assert len(b["prompt"].split()) == 16
        assert "slo" not in b  # no classes given


def test_chat_role_chunk_is_not_a_token(tmp_path):
    out, rows = tmp_path / "r.json", tmp_path / "r.csv"
    with MockServer(ttft_s=0.01, itl_s=0.001) as m:
        # --url names the endpoint; its path selects the chat body shape
        p = subprocess.run([BIN, "--url", "http://127.0.0.1:%d/v1/chat/completions" % m.port,
                            "--no-progress", "--concurrency", "2", "--num-requests", "6",
                            "--output-len", "5", "--json", str(out), "--csv", str(rows)],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        assert all("messages" in b and "prompt" not in b for b in m.state.bodies)
    run = result(out)["runs"][0]
    assert run["completed"] == 6 and run["total_output_tokens"] == 30
    assert run["n_itl"] == 6 * 4
    with open(rows) as f:
        recs = list(csv.DictReader(f))
    assert len(recs) == 6
    for rec in recs:
        assert rec["outcome"] == "ok" and rec["http_status"] == "200"
        assert rec["chunks"] == "5" and rec["output_tokens"] == "5"
        assert float(rec["ttft_ms"]) >= 10.0
        assert float(rec["e2e_ms"]) >= float(rec["ttft_ms"])


def test_errors_counted_by_status(tmp_path):
    out = tmp_path / "r.json"
    with MockServer(ttft_s=0.001, itl_s=0.0, fail_every={5: 429, 7: 500}) as m:
        p = bench(m.port, "--concurrency", 3, "--num-requests", 35, "--output-len", 3,
                  "--json", out)
        counts = dict(m.state.status_counts)
    run = result(out)["runs"][0]
    # Arrivals 5,10,..,35 get 429 (7 of them); 7,14,21,28 get 500 (35 is a 429 first).
    assert counts == {200: 24, 429: 7, 500: 4}
    assert run["errors"] == {"http_429": 7, "http_500": 4}
    assert run["completed"] == 24 and run["failed"] == 4 and run["refused"] == 7
    assert "http_429=7" in p.stdout and "http_500=4" in p.stdout
    assert "Refused requests (429/503):" in p.stdout


def test_retry_after_resends_refused_requests(tmp_path):
    out = tmp_path / "r.json"
    # Arrivals 3, 6, 9, ... get 429 with Retry-After: 0.1; re-sent, they arrive again (and a
    # re-sent request can be refused again): with --retry-after every request completes.
    with MockServer(ttft_s=0.001, itl_s=0.0, fail_every={3: 429}, retry_after="0.1") as m:
        bench(m.port, "--concurrency", 2, "--num-requests", 12, "--output-len", 2, "--retry-after",
              "--json", out)
        counts = dict(m.state.status_counts)
    run = result(out)["runs"][0]
    assert run["completed"] == 12 and run["refused"] == 0 and run["failed"] == 0
    assert counts[429] >= 4 and counts[200] == 12
    # without the option the refusals are counted, apart from failures
    with MockServer(ttft_s=0.001, itl_s=0.0, fail_every={3: 429}, retry_after="0.1") as m:
        bench(m.port, "--concurrency", 2, "--num-requests", 12, "--output-len", 2, "--json", out)
    run = result(out)["runs"][0]
    assert run["completed"] == 8 and run["refused"] == 4 and run["failed"] == 0


def test_all_failing_run_exits_nonzero(tmp_path):
    with MockServer(fail_every={1: 503}) as m:
        p = bench(m.port, "--num-requests", 3, check=False)
    assert p.returncode == 3 and "no request succeeded" in p.stderr


def test_huge_rate_stops_at_count(tmp_path):
    out = tmp_path / "r.json"
    with MockServer(ttft_s=0.001, itl_s=0.0) as m:
        bench(m.port, "--rate", 1000000, "--num-requests", 40, "--output-len", 2,
              "--max-concurrency", 8, "--json", out)
        assert m.state.arrivals == 40
    run = result(out)["runs"][0]
    assert run["mode"] == "open" and run["stop_reason"] == "count"
    assert run["issued"] == 40 and run["completed"] == 40


def test_huge_rate_stops_at_duration(tmp_path):
    # 1e6 requests offered at 1e6/s with 1 s per response: only the duration cap (0.5 s) and the
    # grace period (0.5 s) can end this run; requests in flight then are cancelled.
    out = tmp_path / "r.json"
    with MockServer(ttft_s=0.05, itl_s=0.01) as m:
        p = bench(m.port, "--rate", 1000000, "--num-requests", 1000000, "--duration", 0.5,
                  "--grace", 0.5, "--output-len", 100, "--max-concurrency", 16, "--json", out,
                  check=False, timeout=60)
        arrivals = m.state.arrivals
    assert p.returncode in (0, 3), p.stderr
    run = result(out)["runs"][0]
    assert run["stop_reason"] == "duration"
    assert 0 < run["issued"] < 1000000
    assert arrivals <= run["issued"]
    assert run["errors"].get("cancelled", 0) >= 1
    assert run["completed"] + run["failed"] + run["refused"] == run["issued"]


def test_slo_classes_sent_and_scored(tmp_path):
    out = tmp_path / "r.json"
    with MockServer(ttft_s=0.005, itl_s=0.0) as m:
        bench(m.port, "--num-requests", 40, "--concurrency", 4, "--output-len", 4,
              "--slo-class", "gold:5000:1000:1", "--slo-class", "impossible:0.001:0:1",
              "--json", out)
        slos = [b.get("slo") for b in m.state.bodies]
    run = result(out)["runs"][0]
    assert all(s in ({"ttft_ms": 5000.0, "tpot_ms": 1000.0}, {"ttft_ms": 0.001}) for s in slos)
    cls = {c["name"]: c for c in run["slo_classes"]}
    assert cls["gold"]["issued"] + cls["impossible"]["issued"] == 40
    assert cls["gold"]["issued"] > 0 and cls["impossible"]["issued"] > 0
    assert cls["gold"]["attainment"] == 1.0  # 5 s TTFT is always met here
    assert cls["impossible"]["good"] == 0    # no reply beats 1 microsecond
    assert run["good_requests"] == cls["gold"]["good"]
    assert run["goodput"] > 0

    with MockServer(ttft_s=0.0, itl_s=0.0) as m:
        bench(m.port, "--num-requests", 3, "--slo-class", "gold:100:10:1", "--no-slo-ext")
        assert all("slo" not in b for b in m.state.bodies)


def test_non_streaming(tmp_path):
    out = tmp_path / "r.json"
    with MockServer(ttft_s=0.01, itl_s=0.0) as m:
        bench(m.port, "--no-stream", "--num-requests", 5, "--output-len", 6, "--json", out)
        assert all(b["stream"] is False and "stream_options" not in b for b in m.state.bodies)
    run = result(out)["runs"][0]
    assert run["completed"] == 5 and run["total_output_tokens"] == 30
    assert run["n_tpot"] == 0 and run["n_itl"] == 0
    assert run["mean_ttft_ms"] == pytest.approx(run["mean_e2el_ms"])


def test_tokens_estimated_without_usage(tmp_path):
    out = tmp_path / "r.json"
    with MockServer(ttft_s=0.0, itl_s=0.0, usage=False) as m:
        bench(m.port, "--num-requests", 4, "--output-len", 7, "--json", out)
    run = result(out)["runs"][0]
    assert run["tokens_estimated"] is True
    assert run["total_output_tokens"] == 28  # counted chunks


def test_seed_reproducible(tmp_path):
    seqs = []
    for seed in (5, 5, 6):
        with MockServer(ttft_s=0.0, itl_s=0.0) as m:
            bench(m.port, "--seed", seed, "--num-requests", 8, "--input-len", "4:64",
                  "--output-len", "@" + os.path.join(DATA, "lengths.hist"))
            seqs.append([(b["prompt"], b["max_tokens"]) for b in m.state.bodies])
    assert seqs[0] == seqs[1]
    assert seqs[0] != seqs[2]
    assert all(mt == 16 or 32 <= mt <= 63 or mt == 128 for _, mt in seqs[0])


def test_fresh_prompts_per_load_point(tmp_path):
    """A sweep against one server must not replay a point's prompts in the next point (its
    prompt cache would then skip prefill): --fresh-prompts gives every point its own slice."""
    out = tmp_path / "r.json"
    with MockServer(ttft_s=0.0, itl_s=0.0) as m:
        bench(m.port, "--seed", 3, "--concurrency", "1,2,4", "--num-requests", 6,
              "--input-len", 24, "--output-len", 2, "--fresh-prompts", "--json", out)
        fresh = [b["prompt"] for b in m.state.bodies]
    with MockServer(ttft_s=0.0, itl_s=0.0) as m:
        bench(m.port, "--seed", 3, "--concurrency", "1,2,4", "--num-requests", 6,
              "--input-len", 24, "--output-len", 2)
        same = [b["prompt"] for b in m.state.bodies]
    assert len(fresh) == 18 and len(set(fresh)) == 18  # no prompt sent twice
    assert len(same) == 18 and len(set(same)) == 6     # the old behaviour: one set per point
    # The first point is unchanged (same seed), so results stay comparable with older runs.
    assert set(fresh[:6]) == set(same[:6])
    r = result(out)
    assert r["fresh_prompts"] is True
    assert [run["completed"] for run in r["runs"]] == [6, 6, 6]
    # Too many requests in total is refused up front, not truncated silently.
    p = bench(1, "--concurrency", "1,2", "--num-requests", 600000, "--fresh-prompts", check=False)
    assert p.returncode == 2 and "--fresh-prompts" in p.stderr


def test_datasets_via_cli(tmp_path):
    with MockServer(ttft_s=0.0, itl_s=0.0) as m:
        bench(m.port, "--dataset", "sharegpt", "--dataset-path",
              os.path.join(DATA, "sharegpt_sample.json"), "--num-requests", 6)
        prompts = {b["prompt"] for b in m.state.bodies}
    assert len(prompts) == 3 and any("sky" in p for p in prompts)
    with MockServer(ttft_s=0.0, itl_s=0.0) as m:
        bench(m.port, "--dataset", "prompts", "--dataset-path", os.path.join(DATA, "prompts.txt"),
              "--num-requests", 3, "--output-len", 2)
        prompts = {b["prompt"] for b in m.state.bodies}
    assert "What is the capital of France?" in prompts
    p = bench(1, "--dataset", "sharegpt", "--dataset-path", os.path.join(DATA, "bad_sharegpt.json"),
              check=False)
    assert p.returncode == 2 and "bad_sharegpt.json:" in p.stderr
    p = bench(1, "--output-len", "@" + os.path.join(DATA, "bad.hist"), check=False)
    assert p.returncode == 2 and "bad.hist:2" in p.stderr


def test_sweep_compare_and_plots(tmp_path):
    a, b, prefix = tmp_path / "a.json", tmp_path / "b.json", str(tmp_path / "plot")
    with MockServer(ttft_s=0.002, itl_s=0.0005) as m:
        p = bench(m.port, "--rate", "50,200", "--num-requests", 10, "--output-len", 4,
                  "--slo-class", "x:1000:100:1", "--label", "first", "--json", a, "--plot", prefix)
        bench(m.port, "--rate", "50,200", "--num-requests", 10, "--output-len", 4,
              "--label", "second", "--json", b)
    assert "load point" in p.stdout  # the sweep table
    ra = result(a)
    assert [r["label"] for r in ra["runs"]] == ["rate=50", "rate=200"]
    assert all(r["completed"] == 10 for r in ra["runs"])
    c = subprocess.run([BIN, "compare", str(a), str(b)], capture_output=True, text=True, timeout=30)
    assert c.returncode == 0, c.stderr
    assert "B/A" in c.stdout and "request_throughput" in c.stdout and "rate=200" in c.stdout
    bad = subprocess.run([BIN, "compare", str(a), os.path.join(DATA, "prompts.txt")],
                         capture_output=True, text=True, timeout=30)
    assert bad.returncode == 1 and "prompts.txt" in bad.stderr
    for name in ("_latency_cdf.png", "_throughput.png"):
        with open(prefix + name, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("args,msg", [
    (["--url", "https://127.0.0.1:1/"], "https"),
    (["--rate", "0"], "--rate"),
    (["--num-requests", "2000000"], "--num-requests"),
    (["--duration", "100000"], "--duration"),
    (["--concurrency", "2", "--rate", "3"], "not both"),
    (["--slo-class", "nope"], "slo-class"),
    (["--input-len", "0"], "length spec"),
])
def test_bad_options(args, msg):
    p = subprocess.run([BIN, *args], capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and msg in p.stderr, p.stderr


def test_connection_refused_is_transport_error(tmp_path):
    out = tmp_path / "r.json"
    with MockServer() as m:  # take a free port, then close it: nothing listens there
        port = m.port
    p = bench(port, "--num-requests", 3, "--model", "x", "--json", out, check=False)
    assert p.returncode == 3
    assert result(out)["runs"][0]["errors"] == {"transport": 3}


def test_close_delimited_stream_and_dropped_keepalive(tmp_path):
    out = tmp_path / "r.json"
    with MockServer(ttft_s=0.0, itl_s=0.0, close_delimited=True) as m:
        bench(m.port, "--num-requests", 6, "--concurrency", 2, "--output-len", 3, "--json", out)
    run = result(out)["runs"][0]
    assert run["completed"] == 6 and run["total_output_tokens"] == 18
    assert run["connections"] == 6  # one per response: the server closes each
    with MockServer(ttft_s=0.0, itl_s=0.0, drop_idle=True) as m:
        bench(m.port, "--num-requests", 10, "--concurrency", 1, "--output-len", 2, "--json", out)
        assert m.state.arrivals == 10
    run = result(out)["runs"][0]
    assert run["completed"] == 10 and run["failed"] == 0
