# weft-test: labels=integration timeout=600
"""Virtual models on one backbone, through a real weftd socket and the official `openai` client:
--vmodel flags, GET /v1/models (parent/root), greedy output equal to llama.cpp's with the same
adapter (tests/engine/data/lora fixtures), the prefix cache kept apart per adapter, POST/DELETE
/admin/models under load (the removed one drains and then 404s, the other is undisturbed),
adapter loads off the event loop, one adapter file shared by the virtual models naming it, the
adapter memory budget (507) and bad adapter files (400 naming the file)."""
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
        s = client.completions.create(model="quota1", prompt="Tell me a story.", max_tokens=40,
                                      temperature=0, stream=True, extra_body={"ignore_eos": True})
        n = 0
        for chunk in s:
            if chunk.choices and chunk.choices[0].text:
                n += 1
                started.set()
        done["n"] = n

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


def test_admin_add_loads_off_the_event_loop(weftd, client, tmpdir):
    """POST /admin/models reads the adapter on a work thread: while the load is stuck on a pipe
    nobody writes to yet, a chat request is served start to end and the POST stays unanswered;
    the same id meanwhile gets 409; once the bytes arrive the POST answers 201."""
    fifo = os.path.join(str(tmpdir), "piped.gguf")
    os.mkfifo(fifo)
    result = {}

    def post():
        result["r"] = call(weftd, "POST", "/admin/models", {"id": "piped", "adapter": fifo})

    t = threading.Thread(target=post)
    t.start()
    # the write end opens only once the server's loader opened the read end: from then on the
    # load is under way and blocked until we write
    for _ in range(12000):
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            break
        except OSError:  # ENXIO: no reader yet
            assert t.is_alive(), result
            threading.Event().wait(0.01)
    else:
        pytest.fail("the server never opened the adapter pipe")
    os.set_blocking(fd, True)
    w = os.fdopen(fd, "wb")
    try:
        r = client.chat.completions.create(model="peft-half", max_tokens=4, temperature=0,
                                           messages=[{"role": "user", "content": "Hi"}])
        assert r.model == "peft-half" and r.usage.completion_tokens >= 1
        assert "r" not in result and t.is_alive()     # the load is still waiting on the pipe
        assert "piped" not in [m.id for m in client.models.list().data]
        code, body = call(weftd, "POST", "/admin/models", {"id": "piped", "adapter": GGUF})
        assert code == 409 and "being added" in body["error"]["message"], body
        with open(GGUF, "rb") as f:
            w.write(f.read())
    finally:
        w.close()
    t.join(120)
    code, body = result["r"]
    assert code == 201, body
    assert body["id"] == "piped" and body["adapter_bytes"] > 0
    # a pipe is read once: the same bytes as the file give the same greedy tokens
    a = client.completions.create(model="piped", prompt="SELECT", max_tokens=6, temperature=0)
    b = client.completions.create(model="sql", prompt="SELECT", max_tokens=6, temperature=0)
    assert a.choices[0].text == b.choices[0].text
    _, piped = stats_of(weftd, "piped")
    assert piped["adapter_bytes"] == body["adapter_bytes"]
    code, _ = call(weftd, "DELETE", "/admin/models/piped")
    assert code == 200


def test_shared_adapter_file_is_loaded_once(weftd, client):
    """Two virtual models naming the same file (spelled differently) share one copy: the held
    memory does not grow; removing one keeps the adapter for the other."""
    before, sql = stats_of(weftd, "sql")
    other_spelling = os.path.join(LORA, "..", "lora", os.path.basename(GGUF))
    code, body = call(weftd, "POST", "/admin/models",
                      {"id": "sql-twin", "adapters": [{"path": other_spelling, "scale": 1.0}]})
    assert code == 201, body
    after, twin = stats_of(weftd, "sql-twin")
    assert after["adapter_bytes"] == before["adapter_bytes"]
    assert twin["adapter_bytes"] == sql["adapter_bytes"] > 0
    # each file once, with the virtual models sharing it
    files = after["adapter_files"]
    assert sum(f["bytes"] for f in files) == after["adapter_bytes"]
    gguf = [f for f in files if f["path"] == os.path.realpath(GGUF)]
    assert len(gguf) == 1 and gguf[0]["vmodels"] == 2, files
    want = client.completions.create(model="sql", prompt="SELECT name", max_tokens=6,
                                     temperature=0).choices[0].text
    got = client.completions.create(model="sql-twin", prompt="SELECT name", max_tokens=6,
                                    temperature=0).choices[0].text
    assert got == want
    code, _ = call(weftd, "DELETE", "/admin/models/sql-twin")
    assert code == 200
    gone, _ = stats_of(weftd, "sql")
    assert gone["adapter_bytes"] == before["adapter_bytes"]      # still held for "sql"
    assert client.completions.create(model="sql", prompt="SELECT name", max_tokens=6,
                                     temperature=0).choices[0].text == want


def test_vmodel_default_sampling_parameters(weftd, client):
    """A virtual model's defaults (POST "defaults") fill the fields a request leaves unset; a
    request's own values win; they are listed and checked as a request's fields are."""
    code, body = call(weftd, "POST", "/admin/models",
                      {"id": "terse", "adapter": PEFT,
                       "defaults": {"max_tokens": 5, "temperature": 0, "seed": 3}})
    assert code == 201, body
    assert body["defaults"] == {"max_tokens": 5, "temperature": 0, "seed": 3}
    prompt = "Tell me a story about a cat."
    r = client.completions.create(model="terse", prompt=prompt, extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 5                       # the default max_tokens
    again = client.completions.create(model="terse", prompt=prompt, temperature=0, max_tokens=5,
                                      extra_body={"ignore_eos": True})
    assert again.choices[0].text == r.choices[0].text           # the default temperature 0
    own = client.completions.create(model="terse", prompt=prompt, max_tokens=3,
                                    extra_body={"ignore_eos": True})
    assert own.usage.completion_tokens == 3                     # the request's value wins
    chat = client.chat.completions.create(model="terse", messages=[{"role": "user", "content": "Hi"}])
    assert chat.usage.completion_tokens <= 5
    # a default stop sequence: the text ends before it
    text = r.choices[0].text
    assert len(text) >= 6, text
    stop = text[len(text) // 2:len(text) // 2 + 3]
    code, body = call(weftd, "POST", "/admin/models",
                      {"id": "terse-stop", "adapter": PEFT,
                       "defaults": {"max_tokens": 5, "temperature": 0, "stop": [stop]}})
    assert code == 201, body
    st = client.completions.create(model="terse-stop", prompt=prompt,
                                   extra_body={"ignore_eos": True})
    assert st.choices[0].finish_reason == "stop"
    assert st.choices[0].text == text[:text.index(stop)]
    code, body = call(weftd, "POST", "/admin/models",
                      {"id": "hot", "adapter": PEFT, "defaults": {"temperature": 9}})
    assert code == 400 and "temperature" in body["error"]["message"], body
    for vm in ("terse", "terse-stop"):
        assert call(weftd, "DELETE", "/admin/models/" + vm)[0] == 200


def test_running_and_queued_quotas(weftd, client):
    """max_running=1: the scheduler runs one of its requests at a time (never two generating in
    one /admin/stats snapshot; the second waits while the first generates); max_queued=1: a
    third request while one runs and one waits gets 429 naming the quota, for this virtual
    model only."""
    code, body = call(weftd, "POST", "/admin/models",
                      {"id": "q2", "adapter": PEFT, "max_running": 1, "max_queued": 1})
    assert code == 201, body
    assert body["max_running"] == 1 and body["max_queued"] == 1
    started, out = threading.Event(), {}

    def first():
        s = client.completions.create(model="q2", prompt="Tell me a long story.", max_tokens=100,
                                      temperature=0, stream=True, extra_body={"ignore_eos": True})
        n = 0
        for chunk in s:
            if chunk.choices and chunk.choices[0].text:
                n += 1
                started.set()
        out["first"] = n

    def second():
        r = client.completions.create(model="q2", prompt="Hi", max_tokens=4, temperature=0,
                                      extra_body={"ignore_eos": True})
        out["second"] = r.usage.completion_tokens

    ta = threading.Thread(target=first)
    ta.start()
    assert started.wait(120)
    tb = threading.Thread(target=second)
    tb.start()
    saw_queued = False
    for _ in range(3000):  # until the server holds both (condition, not a timing assertion)
        stats, q2 = stats_of(weftd, "q2")
        if q2["in_flight"] == 2:
            break
        threading.Event().wait(0.01)
    else:
        pytest.fail("the second request never reached the server")
    # the first runs 100 tokens, so it still runs and the second still waits here
    with pytest.raises(openai.RateLimitError) as e:
        client.completions.create(model="q2", prompt="hi", max_tokens=2)
    assert "max_queued" in e.value.message and "q2" in e.value.message
    assert e.value.response.headers.get("retry-after") == "1"
    # another virtual model is not limited by q2's quotas
    assert client.completions.create(model="sql", prompt="hi", max_tokens=2).model == "sql"
    while ta.is_alive() or tb.is_alive():
        stats, q2 = stats_of(weftd, "q2")
        gens = [g for g in stats["requests"] if g["model"] == "q2"]
        states = {g["stream"]: g["state"] for g in gens}
        assert [g["state"] for g in gens].count("generating") <= 1, gens
        if states.get(True) == "generating" and states.get(False) == "waiting":
            saw_queued = True
        threading.Event().wait(0.01)
    ta.join()
    tb.join()
    assert out == {"first": 100, "second": 4}, out
    assert saw_queued
    _, q2 = stats_of(weftd, "q2")
    assert q2["rejected_quota_total"] == 1 and q2["in_flight"] == 0
    assert call(weftd, "DELETE", "/admin/models/q2")[0] == 200


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
        s = client.completions.create(model=model, prompt="Write a long story about a dragon.",
                                      max_tokens=48, temperature=0, stream=True,
                                      extra_body={"ignore_eos": True})
        n = 0
        for chunk in s:
            if chunk.choices and chunk.choices[0].text:
                n += 1
                started[model].set()
        results[model] = n

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
