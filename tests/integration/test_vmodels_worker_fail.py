# weft-test: labels=integration,net timeout=600
"""A worker fails to load a virtual model the coordinator accepted (POST /admin/models).

The coordinator checks an adapter by loading it itself, then every worker loads the same path
on its own host. Here one of two workers is a real process joined from "another host": it runs
in its own mount namespace (unshare -m) where the adapter's path holds a truncated copy of the
file, as a host with a stale or half-copied adapter would. Nothing is injected: the worker's
own GGUF reader rejects the file. The POST must answer an error naming that worker's rank and
its reader's message, the add is undone on every worker (the local one, which loaded it,
unbinds it), the coordinator holds no adapter memory for it, and the daemon keeps serving:
the bare model and the same id added again from a good file (greedy tokens equal
llama.cpp's) through the official `openai` client."""
import os
import re
import shutil
import subprocess
import tempfile
import time

import openai
import pytest

from conftest import BIN_DIR, MODEL, MODEL_ID, free_port
from test_pd_join import coordinator_in_background, stop_worker
from test_vmodels import GGUF, call, fixture_cases
from test_workers import admin_workers


def can_unshare_mounts():
    try:
        return subprocess.run(["unshare", "-m", "true"], capture_output=True,
                              timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def start_worker_seeing(port, world_size, real, seen):
    """A joined worker whose view of the path `real` is the file `seen` (a bind mount in a
    mount namespace of its own; the rest of the filesystem is shared)."""
    log = tempfile.NamedTemporaryFile(prefix="weft-joined-", suffix=".log", delete=False)
    args = [os.path.join(BIN_DIR, "weftd"), "--role", "worker", "--join", f"127.0.0.1:{port}",
            "--world-size", str(world_size), "--model", MODEL, "--kv-memory-mb", "256",
            "--threads", "1"]
    script = 'mount --bind "$1" "$2" && shift 2 && exec "$@"'
    p = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh",
                          seen, real, *args], stdout=log, stderr=subprocess.STDOUT)
    return p, log


def wait_log(d, pattern, n, timeout=60):
    deadline = time.monotonic() + timeout
    while len(re.findall(pattern, d.logtext())) < n and time.monotonic() < deadline:
        time.sleep(0.1)
    return len(re.findall(pattern, d.logtext()))


@pytest.mark.skipif(not can_unshare_mounts(), reason="needs mount namespaces (unshare -m)")
def test_worker_failing_an_accepted_load():
    tmp = tempfile.mkdtemp(prefix="weft-vmfail-")
    adapter = os.path.join(tmp, "sql.gguf")      # what the coordinator (and local worker) read
    truncated = os.path.join(tmp, "stale.gguf")  # what the joined worker reads at that path
    shutil.copyfile(GGUF, adapter)
    with open(GGUF, "rb") as f, open(truncated, "wb") as g:
        g.write(f.read()[:20000])
    port = free_port()
    t, box = coordinator_in_background("--workers", "2", "--local-workers", "1",
                                       "--world-port", str(port), "--heartbeat-ms", "200")
    w, wlog = start_worker_seeing(port, 3, adapter, truncated)
    t.join(300)
    assert "d" in box, box.get("error")
    d = box["d"]
    try:
        c = openai.OpenAI(base_url=d.base + "/v1", api_key="unused", max_retries=0, timeout=300)
        ws = admin_workers(d)
        joined = [x for x in ws if x["pid"] == 0]
        assert len(joined) == 1 and all(x["state"] == "live" for x in ws), ws
        rank = joined[0]["rank"]
        code, stats = call(d, "GET", "/admin/stats")
        held_before = stats["adapter_bytes"]

        code, body = call(d, "POST", "/admin/models", {"id": "sql", "adapter": adapter})
        assert 400 <= code < 600, (code, body)
        msg = body["error"]["message"]
        # names the model, the worker, the file and the worker's reader's complaint
        assert "'sql'" in msg and f"worker rank {rank}" in msg and adapter in msg, msg
        assert "runs past the end of the data section" in msg, msg
        # undone everywhere: not listed, not served, no adapter memory held here
        assert "sql" not in {m.id for m in c.models.list().data}
        with pytest.raises(openai.NotFoundError):
            c.completions.create(model="sql", prompt="x", max_tokens=1)
        code, stats = call(d, "GET", "/admin/stats")
        assert stats["adapter_bytes"] == held_before, stats
        assert "sql" not in {v["id"] for v in stats["vmodels"]}
        # the local worker had bound it and unbinds it; the joined one bound nothing
        assert wait_log(d, r"virtual model sql \(\d+\): 1 adapter\(s\) bound", 1) == 1, \
            d.logtext()[-3000:]
        assert wait_log(d, r"virtual model \d+ removed", 1) == 1, d.logtext()[-3000:]
        with open(wlog.name, errors="replace") as f:
            wtext = f.read()
        assert not re.search(r"adapter\(s\) bound", wtext) and adapter in wtext, wtext[-3000:]
        # both workers still live and serving
        assert all(x["state"] == "live" for x in admin_workers(d)), admin_workers(d)
        r = c.completions.create(model=MODEL_ID, prompt="The capital of France is",
                                 max_tokens=4, temperature=0, extra_body={"ignore_eos": True})
        assert r.usage.completion_tokens == 4
        # the same id from a file every worker reads whole: accepted, llama.cpp's tokens
        code, body = call(d, "POST", "/admin/models", {"id": "sql", "adapter": GGUF})
        assert code == 201, body
        checked = 0
        for scale, ids, gen in fixture_cases("smollm2"):
            if scale != 1.0 or min(gen) <= 2:
                continue
            r = c.completions.create(model="sql", prompt=ids, max_tokens=len(gen),
                                     temperature=0, extra_body={"ignore_eos": True})
            code, want = call(d, "POST", "/detokenize", {"tokens": gen})
            assert code == 200 and r.choices[0].text == want["content"]
            checked += 1
        assert checked >= 2
        assert all(x["state"] == "live" for x in admin_workers(d)), admin_workers(d)
    finally:
        assert d.stop() == 0, d.logtext()
        stop_worker(w, wlog)
        shutil.rmtree(tmp, ignore_errors=True)
