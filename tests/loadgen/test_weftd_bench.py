"""weft-bench against a real weftd serving the default model: a short run completes and its
request and token counts agree with weftd's own /metrics counters.
weft-test: labels=slow,integration timeout=900

Skipped (with the reason) only when weftd cannot serve completions at all.
"""
import json
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from conftest import BIN_DIR, MODEL, Weftd, http_get, metric_sum, post  # noqa: E402  (the integration tests' helper)

BENCH = os.path.join(BIN_DIR, "weft-bench")


@pytest.fixture(scope="module")
def weftd():
    if not os.path.exists(MODEL):
        pytest.fail("default model missing: %s (run scripts/setup)" % MODEL)
    d = Weftd("--log-level", "warn")
    try:
        # A daemon that cannot serve a completion fails here, before the benchmark run.
        try:
            ok, why = "choices" in post(d.base, "/v1/completions", {"prompt": "Hello", "max_tokens": 2}), \
                "no choices in the response"
        except Exception as e:  # noqa: BLE001 - any failure means "cannot serve"
            ok, why = False, str(e)
        if not ok:
            pytest.fail("weftd cannot serve /v1/completions: %s" % why)
        yield d.port
    finally:
        d.stop()


def test_counts_agree_with_weftd_metrics(weftd, tmp_path):
    port = weftd
    before = http_get(port, "/metrics")[1]
    out = tmp_path / "r.json"
    p = subprocess.run([BENCH, "--port", str(port), "--no-progress", "--concurrency", "2",
                        "--num-requests", "6", "--input-len", "24", "--output-len", "8",
                        "--slo-class", "std:60000:10000:1", "--duration", "240", "--json", str(out)],
                       capture_output=True, text=True, timeout=500)
    assert p.returncode == 0, p.stderr + p.stdout
    after = http_get(port, "/metrics")[1]
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
