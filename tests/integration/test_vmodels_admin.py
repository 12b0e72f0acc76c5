# weft-test: labels=integration timeout=600
"""Virtual models added at run time, through a real weftd socket and the official `openai`
client: POST /admin/models loads adapters off the event loop (a chat request is served while a
load waits on a pipe), one adapter file is shared by the virtual models naming it, per-vmodel
default sampling parameters, and the running/queued quotas (429 for that virtual model only).
A module of its own (its own weftd) so each test file stays short under the sanitizers."""
import os
import threading

import openai
import pytest

# The same daemon flags and client as test_vmodels.py: its module-scoped fixtures, imported, give
# this module a weftd of its own.
from test_vmodels import (GGUF, LORA, PEFT, call, client, stats_of,  # noqa: F401
                          stream_text_chunks, weftd)


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
        out["first"] = stream_text_chunks(client, "q2", "Tell me a long story.", 100, started)

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
