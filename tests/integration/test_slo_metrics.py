# weft-test: labels=integration timeout=600
"""SLO attainment and goodput in /metrics and /admin/stats, through a real weftd: requests whose
targets are easy count as met, requests whose TPOT target no server can meet count as missed,
overall and per priority."""
import json
import re
import urllib.request

import pytest

from conftest import MODEL_ID, Weftd


@pytest.fixture(scope="module")
def weftd():
    d = Weftd("--admission-factor", "1000000000")
    yield d
    assert d.stop() == 0


def complete(base, body):
    req = urllib.request.Request(base + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def metric(text, name, priority):
    m = re.search(r'^%s\{model_name="[^"]*",priority="%s"\} (\S+)$' % (re.escape(name), priority), text, re.M)
    assert m, f"{name}{{priority={priority}}} missing"
    return float(m.group(1))


def test_attainment_and_goodput(weftd):
    easy = {"model": MODEL_ID, "prompt": "Count: one two", "max_tokens": 8, "temperature": 0,
            "ignore_eos": True, "slo": {"ttft_ms": 600000, "tpot_ms": 600000}}
    # 1 microsecond per token after the first: never met.
    hard = dict(easy, priority=5, slo={"ttft_ms": 600000, "tpot_ms": 0.001})
    for _ in range(3):
        assert complete(weftd.base, easy)["usage"]["completion_tokens"] == 8
    for _ in range(2):
        assert complete(weftd.base, hard)["usage"]["completion_tokens"] == 8
    code, body = weftd.status("/metrics")
    assert code == 200
    text = body.decode()
    assert metric(text, "weft:slo_requests_total", "all") == 5
    assert metric(text, "weft:slo_met_total", "all") == 3
    assert metric(text, "weft:slo_requests_total", "0") == 3
    assert metric(text, "weft:slo_met_total", "0") == 3
    assert metric(text, "weft:slo_requests_total", "5") == 2
    assert metric(text, "weft:slo_met_total", "5") == 0
    assert metric(text, "weft:slo_ttft_met_total", "5") == 2
    assert metric(text, "weft:slo_tpot_met_total", "5") == 0
    assert metric(text, "weft:slo_attainment_ratio", "all") == pytest.approx(0.6)
    assert metric(text, "weft:slo_attainment_ratio", "5") == 0
    assert metric(text, "weft:goodput_requests_per_second", "all") == pytest.approx(3 / 60)
    code, body = weftd.status("/admin/stats")
    slo = json.loads(body)["slo"]
    assert slo["window_s"] == 60
    assert slo["overall"]["finished"] == 5 and slo["overall"]["met"] == 3
    assert slo["overall"]["window_met"] == 3 and slo["overall"]["attainment"] == pytest.approx(0.6)
    by = {c["priority"]: c for c in slo["by_priority"]}
    assert by[0]["met"] == 3 and by[5]["met"] == 0 and by[5]["tpot_met"] == 0


def test_refused_requests_are_not_judged(weftd):
    code, body = weftd.status("/admin/stats")
    before = json.loads(body)["slo"]["overall"]["finished"]
    # A request refused before it runs (bad input) is never judged.
    req = urllib.request.Request(weftd.base + "/v1/completions", data=json.dumps(
        {"model": MODEL_ID, "prompt": "x", "max_tokens": -1}).encode(),
        headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError):
        urllib.request.urlopen(req, timeout=30)
    code, body = weftd.status("/admin/stats")
    assert json.loads(body)["slo"]["overall"]["finished"] == before
