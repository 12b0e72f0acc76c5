# weft-test: labels=integration timeout=600
"""Virtual models on one backbone, through a real weftd socket and the official `openai` client:
--vmodel flags, GET /v1/models (parent/root), greedy output equal to llama.cpp's with the same
adapter (tests/engine/data/lora fixtures), the prefix cache kept apart per adapter, POST/DELETE
/admin/models under load (the removed one drains and then 404s, the other is undisturbed), the
adapter memory budget (507; a file already held costs nothing more) and bad adapter files (400
naming the file). Run-time additions: test_vmodels_admin.py; --workers: test_vmodels_workers.py."""
import json
import os
import shutil
import tempfile
import threading
import urllib.error
import urllib.request

import openai
import pytest

from conftest import MODEL_ID, Weftd

SRC = os.environ.get("WEFT_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
LORA = os.path.join(SRC, "tests", "engine", "data", "lora")
GGUF = os.path.join(LORA, "smollm2.gguf")
PEFT = os.path.join(LORA, "smollm2.peft")
SYSTEM = "You answer with SQL only, no prose."


@pytest.fixture(scope="module")
def weftd():
    # each adapter holds ~1.24 MiB: three fit in 4 MiB, a fourth does not
    d = Weftd("--vmodel", f"id=sql,adapter={GGUF},weight=2,ttft_ms=1500,system={SYSTEM}",
              "--vmodel", f"id=peft-half,adapter={PEFT}:0.5",
              "--adapter-memory-mb", "4", "--max-running", "8")
    yield d
    rc = d.stop()
    assert rc == 0, f"weftd exited with {rc}"


@pytest.fixture(scope="module")
def client(weftd):
    return openai.OpenAI(base_url=weftd.base + "/v1", api_key="unused", max_retries=0, timeout=120)


def stream_text_chunks(client, model, prompt, max_tokens, started):
    """Streams a greedy completion that ignores EOS; sets `started` at the first text chunk and
    returns how many text chunks arrived."""
    s = client.completions.create(model=model, prompt=prompt, max_tokens=max_tokens, temperature=0,
                                  stream=True, extra_body={"ignore_eos": True})
    n = 0
    for chunk in s:
        if chunk.choices and chunk.choices[0].text:
            n += 1
            started.set()
    return n


def call(weftd, method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(weftd.base + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def fixture_cases(name):
    cases, scale = [], None
    with open(os.path.join(LORA, name + ".txt")) as f:
        for line in f:
            if line.startswith("S "):
                scale = float(line[2:])
            elif line.startswith("I "):
                ids = [int(x) for x in line[2:].split()]
            elif line.startswith("G "):
                cases.append((scale, ids, [int(x) for x in line[2:].split()]))
    return cases


def test_models_list_has_parent_and_root(client):
    data = {m.id: m for m in client.models.list().data}
    assert set(data) == {MODEL_ID, "sql", "peft-half"}
    assert data["sql"].model_dump()["weight"] == 2
    assert data["sql"].model_dump()["slo"]["ttft_ms"] == 1500
    for vm in ("sql", "peft-half"):
        m = data[vm].model_dump()
        assert m["parent"] == MODEL_ID and m["root"] == MODEL_ID
    assert client.models.retrieve("sql").id == "sql"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("nope")


def test_greedy_equals_llama_cpp_with_the_adapter(weftd, client):
    """Prompt ids in, text out: the fixture's tokens (llama.cpp with smollm2.gguf at scale 1),
    detokenized by the server, must be what the virtual model generates. Cases where llama.cpp
    drew a control token (ids 0-2: <|endoftext|>, <|im_start|>, <|im_end|>) are left to
    tests/engine/test_lora.c: the server ends there, or with ignore_eos suppresses it."""
    checked = 0
    for scale, ids, gen in fixture_cases("smollm2"):
        assert scale == 1.0
        if min(gen) <= 2:
            continue
        checked += 1
        r = client.completions.create(model="sql", prompt=ids, max_tokens=len(gen), temperature=0,
                                      extra_body={"ignore_eos": True})
        assert r.model == "sql"
        code, want = call(weftd, "POST", "/detokenize", {"tokens": gen})
        assert code == 200
        assert r.choices[0].text == want["content"]
        assert r.usage.completion_tokens == len(gen)
    assert checked >= 2


def test_adapter_changes_output_and_system_prompt(client):
    msgs = [{"role": "user", "content": "List the users older than 30."}]
    base = client.chat.completions.create(model=MODEL_ID, messages=msgs, max_tokens=12, temperature=0)
    sql = client.chat.completions.create(model="sql", messages=msgs, max_tokens=12, temperature=0)
    assert sql.model == "sql"
    # the virtual model's system prompt replaces the template's default one: the prompt is
    # the one a client sending that system message itself gets
    own = client.chat.completions.create(model=MODEL_ID, max_tokens=1, temperature=0,
                                         messages=[{"role": "system", "content": SYSTEM}] + msgs)
    assert sql.usage.prompt_tokens == own.usage.prompt_tokens != base.usage.prompt_tokens
    # a half-scale adapter on 4 of 30 layers may keep the greedy tokens: its log-probabilities
    # still move
    half = client.completions.create(model="peft-half", prompt="The capital of France is",
                                     max_tokens=4, temperature=0, logprobs=1)
    bare = client.completions.create(model=MODEL_ID, prompt="The capital of France is",
                                     max_tokens=4, temperature=0, logprobs=1)
    assert half.choices[0].logprobs.token_logprobs != bare.choices[0].logprobs.token_logprobs


def test_prefix_cache_is_per_adapter(client):
    prompt = "Once upon a time in a land far away, " * 8  # several full KV blocks
    def cached(model):
        r = client.completions.create(model=model, prompt=prompt, max_tokens=1, temperature=0)
        return r.usage.model_dump().get("prompt_tokens_details", {}).get("cached_tokens", 0)
    cached(MODEL_ID)
    assert cached(MODEL_ID) > 0          # the backbone reuses its own blocks
    assert cached("peft-half") == 0      # never the backbone's K/V under an adapter
    assert cached("peft-half") > 0       # but its own


def test_quota_429_for_that_model_only(weftd, client):
    code, body = call(weftd, "POST", "/admin/models",
                      {"id": "quota1", "adapter": PEFT, "max_in_flight": 1, "weight": 1})
    assert code == 201, body
    started, done = threading.Event(), {}

    def stream():
        done["n"] = stream_text_chunks(client, "quota1", "Tell me a story.", 40, started)

    t = threading.Thread(target=stream)
    t.start()
    assert started.wait(120)
    with pytest.raises(openai.RateLimitError) as e:
        client.completions.create(model="quota1", prompt="hi", max_tokens=2)
    assert e.value.response.headers.get("retry-after") == "1"
    assert "quota1" in e.value.message
    # the others are not limited by quota1's quota
    assert client.completions.create(model="sql", prompt="hi", max_tokens=2).model == "sql"
    t.join(300)
    assert done["n"] > 30
    assert client.completions.create(model="quota1", prompt="hi", max_tokens=2).model == "quota1"
    code, stats = call(weftd, "GET", "/admin/stats")
    q = [v for v in stats["vmodels"] if v["id"] == "quota1"][0]
    assert q["rejected_quota_total"] == 1 and q["max_in_flight"] == 1


def stats_of(weftd, vm):
    code, stats = call(weftd, "GET", "/admin/stats")
    assert code == 200
    return stats, ([v for v in stats["vmodels"] if v["id"] == vm] or [None])[0]


def test_admin_add_errors(weftd, tmpdir):
    # the budget (4 MiB) holds the two adapter files loaded so far (quota1 shares peft-half's)
    # and one more copy, not two
    copies = []
    for k in range(2):
        copies.append(os.path.join(str(tmpdir), f"copy{k}.gguf"))
        shutil.copyfile(GGUF, copies[-1])
    code, body = call(weftd, "POST", "/admin/models", {"id": "third", "adapter": copies[0]})
    assert code == 201, body
    code, body = call(weftd, "POST", "/admin/models", {"id": "fourth", "adapter": copies[1]})
    assert code == 507, body
    assert "budget" in body["error"]["message"]
    # a file already held costs nothing more: accepted with the budget full
    code, body = call(weftd, "POST", "/admin/models", {"id": "fourth", "adapter": copies[0]})
    assert code == 201, body
    for vm in ("third", "fourth"):
        assert call(weftd, "DELETE", "/admin/models/" + vm)[0] == 200
    code, body = call(weftd, "POST", "/admin/models", {"id": "sql", "adapter": GGUF})
    assert code == 409, body
    bad = os.path.join(str(tmpdir), "trunc.gguf")
    with open(GGUF, "rb") as f, open(bad, "wb") as g:
        g.write(f.read()[:4096])
    code, body = call(weftd, "POST", "/admin/models", {"id": "bad", "adapter": bad})
    assert code == 400, body
    assert "trunc.gguf" in body["error"]["message"]
    code, body = call(weftd, "POST", "/admin/models", {"id": "bad", "adapters": "x"})
    assert code == 400 and "adapters" in body["error"]["message"], body
    code, body = call(weftd, "POST", "/admin/models", {"id": "bad", "adaptr": GGUF})
    assert code == 400 and "adaptr" in body["error"]["message"], body
    code, _ = call(weftd, "DELETE", "/admin/models/never-added")
    assert code == 404


def test_remove_under_load_then_readd(weftd, client):
    """DELETE one virtual model while both stream: its in-flight stream completes, new requests
    get 404 at once, the other model's stream is undisturbed; adding it back works."""
    results = {}
    started = {"sql": threading.Event(), "peft-half": threading.Event()}

    def stream(model):
        results[model] = stream_text_chunks(client, model, "Write a long story about a dragon.", 48,
                                            started[model])

    ts = [threading.Thread(target=stream, args=(m,)) for m in ("sql", "peft-half")]
    for t in ts:
        t.start()
    assert started["sql"].wait(120) and started["peft-half"].wait(120)
    code, body = call(weftd, "DELETE", "/admin/models/sql")
    assert code == 200 and body["deleted"] is True, body
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="sql", prompt="hi", max_tokens=2)
    assert "sql" not in [m.id for m in client.models.list().data]
    for t in ts:
        t.join(300)
    assert results.get("sql", 0) > 40 and results.get("peft-half", 0) > 40, results
    # drained and freed: the budget has room again, and the id is free
    code, body = call(weftd, "POST", "/admin/models",
                      {"id": "sql", "adapters": [{"path": GGUF, "scale": 1.0}]})
    assert code == 201, body
    assert body["parent"] == MODEL_ID
    r = client.completions.create(model="sql", prompt="SELECT", max_tokens=4, temperature=0)
    assert r.model == "sql"
    code, stats = call(weftd, "GET", "/admin/stats")
    assert code == 200
    assert {v["id"] for v in stats["vmodels"]} == {"sql", "peft-half", "quota1"}
    assert stats["adapter_bytes"] <= stats["adapter_budget_bytes"]


def test_per_vmodel_metrics(weftd, client):
    client.completions.create(model="peft-half", prompt="Hello", max_tokens=3, temperature=0)
    req = urllib.request.Request(weftd.base + "/metrics")
    with urllib.request.urlopen(req, timeout=30) as r:
        text = r.read().decode()
    lines = {l.split(" ")[0]: float(l.split(" ")[1]) for l in text.splitlines()
             if l.startswith("weft:vmodel_")}
    key = 'weft:vmodel_requests_total{model_name="%s",vmodel="peft-half"}' % MODEL_ID
    assert lines[key] >= 1
    gen = 'weft:vmodel_generation_tokens_total{model_name="%s",vmodel="peft-half"}' % MODEL_ID
    assert lines[gen] >= 3
    assert lines['weft:vmodel_weight{model_name="%s",vmodel="peft-half"}' % MODEL_ID] == 1.0


def test_fair_policy_serves_concurrent_virtual_models():
    """weftd --policy fair: streams of three virtual models with different weights and the bare
    backbone, at once, all complete with their full token counts."""
    d = Weftd("--policy", "fair", "--max-running", "4",
              "--vmodel", f"id=a,adapter={GGUF},weight=1",
              "--vmodel", f"id=b,adapter={PEFT},weight=3")
    try:
        c = openai.OpenAI(base_url=d.base + "/v1", api_key="unused", max_retries=0, timeout=300)
        out = {}

        def run(model, k):
            r = c.completions.create(model=model, prompt="Count to ten: one, two,", max_tokens=12,
                                     temperature=0, extra_body={"ignore_eos": True})
            out[(model, k)] = r.usage.completion_tokens

        ts = [threading.Thread(target=run, args=(m, k)) for m in ("a", "b", MODEL_ID)
              for k in range(3)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(300)
        assert len(out) == 9 and set(out.values()) == {12}, out
    finally:
        assert d.stop() == 0


def test_bad_vmodel_flag_is_a_startup_error():
    with pytest.raises(RuntimeError) as e:
        Weftd("--vmodel", "id=x,adapter=/nonexistent/a.gguf", ready_timeout=120)
    assert "/nonexistent/a.gguf" in str(e.value)
