# weft-test: labels=integration timeout=600
"""Virtual models with worker processes, through a real weftd --workers N and the official
`openai` client: the worker loads the --vmodel declarations and binds them to the
coordinator's numbers (greedy tokens equal llama.cpp's with the adapter, tests/engine/data/lora
fixtures); virtual models added at run time (POST /admin/models) reach every worker (VMODEL
frames) before the answer, a worker killed and restarted after the add gets them when it
rejoins, and DELETE drains and removes them from the workers."""
import concurrent.futures
import os
import re
import shutil
import signal
import tempfile
import threading
import time

import openai

from conftest import MODEL_ID, Weftd, admin_workers
from test_vmodels import GGUF, LORA, PEFT, call, fixture_cases, stream_text_chunks

F16 = os.path.join(LORA, "smollm2-f16.gguf")


def stacked_cases():
    """(ids, tokens) of llama.cpp with smollm2.gguf at 0.7 and smollm2-f16.gguf at 0.5 stacked
    (scripts/make_lora_fixtures.py), every case."""
    cases, ids = [], None
    with open(os.path.join(LORA, "smollm2-stacked.txt")) as f:
        for line in f:
            if line.startswith("I "):
                ids = [int(x) for x in line[2:].split()]
            elif line.startswith("G "):
                cases.append((ids, [int(x) for x in line[2:].split()]))
    return cases


def check_stacked(d, c, model, parallel=2):
    """Every stacked case, `parallel` at a time (so both workers serve), equals llama.cpp's
    text."""
    def one(case):
        ids, gen = case
        r = c.completions.create(model=model, prompt=ids, max_tokens=len(gen), temperature=0,
                                 extra_body={"ignore_eos": True})
        code, want = call(d, "POST", "/detokenize", {"tokens": gen})
        assert code == 200
        return r.choices[0].text, want["content"]
    with concurrent.futures.ThreadPoolExecutor(parallel) as pool:
        outs = list(pool.map(one, stacked_cases()))
    assert len(outs) >= 3
    for got, want in outs:
        assert got == want


def wait_live(d, n, timeout=90):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ws = admin_workers(d)
        if sum(w["state"] == "live" for w in ws) == n:
            return ws
        time.sleep(0.2)
    raise AssertionError("workers not live: %r" % admin_workers(d))


def test_vmodels_with_workers():
    """--workers 1 with --vmodel: the worker process loads the adapters and binds them to the
    coordinator's number; greedy tokens equal llama.cpp's with the adapter."""
    d = Weftd("--workers", "1", "--vmodel", f"id=sql,adapter={GGUF}",
              "--vmodel", f"id=half,adapter={PEFT}:0.5,max_running=1")
    try:
        c = openai.OpenAI(base_url=d.base + "/v1", api_key="unused", max_retries=0, timeout=300)
        assert {m.id for m in c.models.list().data} == {MODEL_ID, "sql", "half"}
        checked = 0
        for scale, ids, gen in fixture_cases("smollm2"):
            if min(gen) <= 2:
                continue
            checked += 1
            r = c.completions.create(model="sql", prompt=ids, max_tokens=len(gen), temperature=0,
                                     extra_body={"ignore_eos": True})
            code, want = call(d, "POST", "/detokenize", {"tokens": gen})
            assert code == 200 and r.choices[0].text == want["content"]
        assert checked >= 2
        half = c.completions.create(model="half", prompt="The capital of France is",
                                    max_tokens=4, temperature=0, logprobs=1)
        bare = c.completions.create(model=MODEL_ID, prompt="The capital of France is",
                                    max_tokens=4, temperature=0, logprobs=1)
        assert half.choices[0].logprobs.token_logprobs != bare.choices[0].logprobs.token_logprobs
    finally:
        assert d.stop() == 0


def test_vmodels_added_at_run_time_with_workers():
    """--workers 2: POST /admin/models answers once both workers hold the stacked adapters
    (their greedy tokens equal llama.cpp's at once, on both workers); a worker killed after the
    add rejoins with it and serves it; DELETE drains, then 404; bad adapters get 400 naming the
    file; a --vmodel declared at start can be removed and added back."""
    d = Weftd("--workers", "2", "--vmodel", f"id=sql,adapter={GGUF}")
    try:
        c = openai.OpenAI(base_url=d.base + "/v1", api_key="unused", max_retries=0, timeout=300)
        code, body = call(d, "POST", "/admin/models", {
            "id": "stack", "adapters": [{"path": GGUF, "scale": 0.7}, {"path": F16, "scale": 0.5}]})
        assert code == 201, body
        assert {m.id for m in c.models.list().data} == {MODEL_ID, "sql", "stack"}
        check_stacked(d, c, "stack")
        # a worker killed after the add: its replacement is given "stack" before it serves
        victim = admin_workers(d)[0]
        os.kill(victim["pid"], signal.SIGKILL)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            back = [w for w in admin_workers(d) if w["rank"] == victim["rank"]][0]
            if back["state"] == "live" and back["pid"] != victim["pid"]:
                break
            time.sleep(0.2)
        assert back["state"] == "live" and back["restarts"] == 1, back
        # bound on both workers at the add, then on the replacement when it joined
        assert d.logtext().count("virtual model stack (") == 3, d.logtext()[-3000:]
        before = back["batches"]
        check_stacked(d, c, "stack", parallel=4)
        back = [w for w in admin_workers(d) if w["rank"] == victim["rank"]][0]
        assert back["batches"] > before  # the replacement served some of them
        # bad adapters: the coordinator's check names the file; nothing reaches the workers
        code, body = call(d, "POST", "/admin/models", {"id": "bad", "adapter": "/nonexistent.gguf"})
        assert code == 400 and "/nonexistent.gguf" in body["error"]["message"], body
        # a pipe is read once, here: the workers could not read it too
        tmp = tempfile.mkdtemp()
        fifo = os.path.join(tmp, "ad.gguf")
        os.mkfifo(fifo)

        def feed():
            with open(fifo, "wb") as w, open(GGUF, "rb") as r:
                w.write(r.read())
        feeder = threading.Thread(target=feed)
        feeder.start()
        code, body = call(d, "POST", "/admin/models", {"id": "piped", "adapter": fifo})
        feeder.join(timeout=30)
        shutil.rmtree(tmp)
        assert code == 400 and "regular file" in body["error"]["message"], body
        assert "piped" not in {m.id for m in c.models.list().data}
        # removal: drains (a stream in flight ends whole), then 404; the workers unbind it
        started = threading.Event()
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            fut = pool.submit(stream_text_chunks, c, "stack", "Once upon a time", 48, started)
            assert started.wait(120)
            code, body = call(d, "DELETE", "/admin/models/stack")
            assert code == 200 and body["deleted"] is True and body["draining_requests"] == 1, body
            assert fut.result(timeout=300) > 40  # every token (a few chunks may carry no text)
        try:
            c.completions.create(model="stack", prompt="x", max_tokens=1)
            raise AssertionError("a removed virtual model answered")
        except openai.NotFoundError:
            pass
        deadline = time.monotonic() + 30
        unbound = re.compile(r"virtual model \d+ removed")  # each worker's log line
        while len(unbound.findall(d.logtext())) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(unbound.findall(d.logtext())) == 2, d.logtext()[-3000:]
        # a start-time one removed and added back (same adapters: the same number)
        code, body = call(d, "DELETE", "/admin/models/sql")
        assert code == 200, body
        code, body = call(d, "POST", "/admin/models", {"id": "sql", "adapter": GGUF})
        assert code == 201, body
        r = c.completions.create(model="sql", prompt="The capital of France is", max_tokens=4,
                                 temperature=0, extra_body={"ignore_eos": True})
        assert r.usage.completion_tokens == 4
        wait_live(d, 2)
    finally:
        assert d.stop() == 0
