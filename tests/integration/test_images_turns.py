"""Text and image work sharing the cores (--share-cores, sched/gate.h) through a real socket: a
mixed load of chat streams with TTFT/TPOT targets, image requests with tight and loose
deadlines and priorities, and streamed image requests dropped mid-way, with the unified turns
(--share-turns edf: one earliest-deadline-first order, batches composed when the turn comes; and
--share-turns ahead, weftd's default: the same, the next claim granted while a batch runs) and
with composed batches (--share-turns batch; here pure EDF with --share-min 0). Every request completes
or gets a clear error (429 with Retry-After in OpenAI's envelope); both classes took turns
(/admin/stats "cores"); afterwards the server still serves both kinds (no turn left held).
Timings go to bench/images/order.sh, not here."""
import base64
import http.client
import json
import os
import subprocess
import threading

import pytest

from conftest import BIN_DIR, MODEL_ID, Weftd
from pngread import read_png

DIT = os.environ.get("WEFT_DIT_MODEL", "/usr/local/share/weft/models/weft-dit-digits")
DIT_ID = os.path.basename(DIT.rstrip("/"))
pytestmark = pytest.mark.skipif(not os.path.isdir(DIT), reason=f"{DIT} missing (run scripts/setup)")

MODES = {"edf": ("--share-turns", "edf"), "ahead": ("--share-turns", "ahead"),
         "batch": ("--share-turns", "batch", "--share-min", "0")}


@pytest.fixture(scope="module", params=sorted(MODES))
def weftd(request):
    d = Weftd("--model", DIT, "--image-max-batch", "2", *MODES[request.param])
    d.mode = request.param
    yield d
    rc = d.stop()
    assert rc == 0, f"weftd exited with {rc}"


def post(d, path, body, timeout=120):
    c = http.client.HTTPConnection("127.0.0.1", d.port, timeout=timeout)
    c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, dict(r.getheaders()), data


def clear_refusal(status, headers, data):
    """A refusal names its reason in OpenAI's error envelope; a 429 says when to retry."""
    err = json.loads(data)["error"]
    assert err["message"], err
    if status == 429:
        assert float(headers["Retry-After"]) >= 0
    return status in (429, 503)


def chat(d, i, out):
    body = {"model": MODEL_ID, "max_tokens": 12, "temperature": 0,
            "messages": [{"role": "user", "content": f"Count to {i}"}],
            "slo": {"ttft_ms": 300 if i % 2 else 5000, "tpot_ms": 50 if i % 2 else 500}}
    st, h, data = post(d, "/v1/chat/completions", body)
    if st == 200:
        r = json.loads(data)
        out[("chat", i)] = r["choices"][0]["finish_reason"] in ("stop", "length") and r["usage"]["completion_tokens"] > 0
    else:
        out[("chat", i)] = clear_refusal(st, h, data)


def image(d, i, out):
    # tight (S-like) and loose deadlines, high and low priorities
    body = {"model": DIT_ID, "class_label": i % 10, "seed": i, "n": 1 + i % 2,
            "num_inference_steps": 4 if i % 3 == 0 else 12,
            "slo": {"deadline_ms": 150 if i % 3 == 0 else 20000}, "priority": 100 if i % 3 == 0 else 0}
    st, h, data = post(d, "/v1/images/generations", body)
    if st == 200:
        r = json.loads(data)
        pngs = [base64.b64decode(x["b64_json"]) for x in r["data"]]
        out[("image", i)] = len(pngs) == body["n"] and all(read_png(p).shape == (8, 8, 1) for p in pngs)
    else:
        out[("image", i)] = clear_refusal(st, h, data)


def dropped_stream(d, i, out):
    """A streamed image whose client leaves after the first event: cancelled at a step boundary,
    its turn and buffers given back."""
    c = http.client.HTTPConnection("127.0.0.1", d.port, timeout=120)
    c.request("POST", "/v1/images/generations", headers={"Content-Type": "application/json"},
              body=json.dumps({"model": DIT_ID, "class_label": 3, "seed": 100 + i, "n": 2,
                               "num_inference_steps": 30, "stream": True}))
    r = c.getresponse()
    if r.status == 200:
        r.fp.readline()
    else:
        r.read()
    c.close()
    out[("drop", i)] = r.status in (200, 429)


def test_mixed_load_every_request_answered(weftd):
    out = {}
    threads = [threading.Thread(target=chat, args=(weftd, i, out)) for i in range(6)]
    threads += [threading.Thread(target=image, args=(weftd, i, out)) for i in range(12)]
    threads += [threading.Thread(target=dropped_stream, args=(weftd, i, out)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(out) == 20 and all(out.values()), out
    # Both classes had turns on the shared cores, in the mode asked for.
    st, body = weftd.status("/admin/stats")
    assert st == 200
    cores = json.loads(body)["cores"]
    assert cores["turns_mode"] == weftd.mode
    assert cores["turns"]["text"] > 0 and cores["turns"]["images"] > 0, cores
    if weftd.mode == "batch":
        assert cores["share_turns"] == {"text": 0, "images": 0}  # --share-min 0: EDF alone
    # Each turn that ran a batch was timed, per class; hand-overs are a subset of them.
    tu = cores["turn_us"]
    assert tu["compute_text"]["n"] + tu["compute_images"]["n"] == tu["compute"]["n"] == tu["end_to_release"]["n"], tu
    assert 0 < tu["compute_text"]["n"] <= cores["turns"]["text"], tu
    assert 0 < tu["compute_images"]["n"] <= cores["turns"]["images"], tu
    assert tu["handover"]["n"] == tu["to_grant"]["n"] == tu["grant_to_run"]["n"] <= tu["compute"]["n"], tu
    for h in tu.values():
        assert h["p50"] <= h["p90"] <= h["p99"], tu
    # No turn left held: both kinds still run, one at a time.
    st, h, data = post(weftd, "/v1/chat/completions", {"model": MODEL_ID, "max_tokens": 4, "temperature": 0,
                                                       "messages": [{"role": "user", "content": "hi"}]})
    assert st == 200, data
    st, h, data = post(weftd, "/v1/images/generations", {"model": DIT_ID, "class_label": 1, "seed": 5,
                                                         "num_inference_steps": 3})
    assert st == 200, data


@pytest.mark.parametrize("flag,value,word", [("--share-turns", "sometimes", "--share-turns"),
                                             ("--share-min", "0.9", "share-min")])
def test_bad_turn_flags_refused(flag, value, word):
    p = subprocess.run([os.path.join(BIN_DIR, "weftd"), "--model", DIT, flag, value, "--port", "0"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert word in p.stderr + p.stdout, p.stderr
