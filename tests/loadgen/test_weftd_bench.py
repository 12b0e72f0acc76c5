"""weft-bench against a real weftd serving the default model: a short run completes and its
request and token counts agree with weftd's own /metrics counters.
weft-test: labels=slow,integration timeout=900

Skipped (with the reason) only when weftd cannot serve completions at all.
"""
import json
import os
import re
import socket
import subprocess
import time
import urllib.request

import pytest

BIN_DIR = os.environ.get("WEFT_BIN_DIR", os.path.join(os.path.dirname(__file__), "../../build/bin"))
BENCH = os.path.join(BIN_DIR, "weft-bench")
WEFTD = os.path.join(BIN_DIR, "weftd")
MODEL = os.environ.get("WEFT_MODEL", "/usr/local/share/weft/models/SmolLM2-135M-Instruct.Q4_1.gguf")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(port, path, timeout=10):
    with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=timeout) as r:
        return r.status, r.read().decode()


def metric_sum(text, name):
    """Sum of every sample of a Prometheus metric (all label sets)."""
    total, seen = 0.0, False
    for line in text.splitlines():
        m = re.match(r"^%s(\{[^}]*\})?\s+([0-9.eE+-]+)$" % re.escape(name), line)
        if m:
            total += float(m.group(2))
            seen = True
    return total if seen else None


@pytest.fixture(scope="module")
def weftd():
    if not os.path.exists(WEFTD):
        pytest.fail("weftd is not built at %s" % WEFTD)
    if not os.path.exists(MODEL):
        pytest.fail("default model missing: %s (run scripts/setup)" % MODEL)
    port = free_port()
    proc = subprocess.Popen([WEFTD, "--model", MODEL, "--port", str(port), "--threads", "2",
                             "--log-level", "warn"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 300
        while time.time() < deadline:
            if proc.poll() is not None:
                pytest.fail("weftd exited at start (%d): %s" % (proc.returncode, proc.stderr.read()[-500:]))
            try:
                if get(port, "/health", timeout=2)[0] == 200:
                    break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.fail("weftd did not become healthy within 300 s")
        # A daemon that cannot serve a completion fails here, before the benchmark run.
        body = json.dumps({"prompt": "Hello", "max_tokens": 2}).encode()
        req = urllib.request.Request("http://127.0.0.1:%d/v1/completions" % port, data=body,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                ok = r.status == 200 and "choices" in json.loads(r.read())
        except Exception as e:  # noqa: BLE001 - any failure means "cannot serve"
            ok, why = False, str(e)
        else:
            why = "no choices in the response"
        if not ok:
            pytest.fail("weftd cannot serve /v1/completions: %s" % why)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_counts_agree_with_weftd_metrics(weftd, tmp_path):
    port = weftd
    before = get(port, "/metrics")[1]
    out = tmp_path / "r.json"
    p = subprocess.run([BENCH, "--port", str(port), "--no-progress", "--concurrency", "2",
                        "--num-requests", "6", "--input-len", "24", "--output-len", "8",
                        "--slo-class", "std:60000:10000:1", "--duration", "240", "--json", str(out)],
                       capture_output=True, text=True, timeout=500)
    assert p.returncode == 0, p.stderr + p.stdout
    after = get(port, "/metrics")[1]
    run = json.load(open(out))["runs"][0]
    assert run["completed"] == 6 and run["failed"] == 0
    assert not run["tokens_estimated"], "weftd sent no usage in the stream"
    assert run["total_output_tokens"] == 6 * 8  # ignore_eos + max_tokens
    assert run["n_ttft"] == 6 and run["n_tpot"] == 6

    def delta(name):
        a, b = metric_sum(after, name), metric_sum(before, name)
        assert a is not None, "weftd /metrics has no %s" % name
        return a - (b or 0)

    assert delta("weft:request_success_total") == 6
    assert delta("weft:generation_tokens_total") == run["total_output_tokens"]
    prompt_sum = metric_sum(after, "weft:request_prompt_tokens_sum")
    if prompt_sum is not None:
        assert delta("weft:request_prompt_tokens_sum") == run["total_input_tokens"]
