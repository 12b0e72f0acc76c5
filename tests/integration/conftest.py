"""Starts real weftd processes for the integration tests (and weft-bench's tests against weftd
in tests/loadgen, which import this file), and the helpers they share to talk to them.

Each test module gets its own daemon on 127.0.0.1 and a free port, serving $WEFT_MODEL with
the programs in $WEFT_BIN_DIR. The scheduler's cost model is given on the command line so
start-up does not spend minutes calibrating on a busy machine; admission control is left on
but with a generous default TTFT target, so only the tests that ask for overload get 429.
"""
import concurrent.futures
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import pytest

TESTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
BIN_DIR = os.environ.get("WEFT_BIN_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "build", "bin"))
MODEL = os.environ.get("WEFT_MODEL", "/usr/local/share/weft/models/SmolLM2-135M-Instruct.Q4_1.gguf")
MODEL_ID = os.path.basename(MODEL)[:-5] if MODEL.endswith(".gguf") else os.path.basename(MODEL)
COST = "0.5,0.05,2,0.0005"  # step_ms = a + b*prefill + c*decode + d*context; a rough CPU fit
# The scheduler settings every LLM daemon here starts with (see above).
LLM_FLAGS = ("--cost-model", COST, "--fixed-cost-model", "--default-ttft-ms", "600000",
             "--kv-memory-mb", "256")
GOLDEN = os.path.join(TESTS, "engine", "data", "golden", "SmolLM2-135M-Instruct.Q4_1.txt")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Weftd:
    """A weftd on 127.0.0.1 and a free port, ready (GET /health 200) when built; its output goes
    to a log file (logtext()). model: what it serves (default $WEFT_MODEL); llm_flags: the
    scheduler settings above (False for a daemon of a DiT)."""

    def __init__(self, *extra, ready_timeout=300, env=None, model=MODEL, llm_flags=True):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.NamedTemporaryFile(prefix="weftd-", suffix=".log", delete=False)
        args = [os.path.join(BIN_DIR, "weftd"), "--model", model or MODEL, "--host", "127.0.0.1",
                "--port", str(self.port), *(LLM_FLAGS if llm_flags else ()), "--threads", "2",
                *extra]
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self.wait_ready(ready_timeout)

    def status(self, path="/health", headers=None):
        req = urllib.request.Request(self.base + path, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def wait_ready(self, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"weftd exited with {self.proc.returncode}:\n{self.logtext()}")
            try:
                code, _ = self.status()
                if code == 200:
                    return
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            time.sleep(0.2)
        raise RuntimeError(f"weftd not ready after {timeout} s:\n{self.logtext()}")

    def logtext(self, tail=4000):
        with open(self.log.name, errors="replace") as f:
            return f.read()[-tail:]

    def stop(self, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.returncode != 0:
            # What made it fail (a sanitizer's report ends the log) goes with the test's output.
            sys.stderr.write(f"weftd exited with {self.proc.returncode}; the end of its log:\n{self.logtext(16000)}\n")
        os.unlink(self.log.name)
        return self.proc.returncode


@pytest.fixture(scope="module")
def weftd():
    d = Weftd()
    yield d
    rc = d.stop()
    assert rc == 0, f"weftd exited with {rc}"


# ---- talking to a daemon -----------------------------------------------------------------------

def http_get(port, path, timeout=10):
    """GET 127.0.0.1:port/path: (status, text)."""
    with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=timeout) as r:
        return r.status, r.read().decode()


def post(base, path, body, timeout=120):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def complete(base, ids, n):
    r = post(base, "/v1/completions", {"model": MODEL_ID, "prompt": ids, "max_tokens": n,
                                       "temperature": 0})
    return r["choices"][0]["text"], r["usage"]["completion_tokens"]


def admin_workers(d):
    code, body = d.status("/admin/stats")
    assert code == 200
    return json.loads(body)["scheduler"]["workers"]


def health(d):
    code, body = d.status("/health")
    return code, json.loads(body)


def groups(d):
    code, body = d.status("/admin/stats")
    assert code == 200
    return json.loads(body)["scheduler"]["groups"]


def assert_no_blocks_held(d):
    """Scratch blocks on the prefill workers (their heartbeats say) and the decode groups'
    blocks in the scheduler all come back once nothing runs."""
    deadline = time.monotonic() + 30
    while True:
        ws = admin_workers(d)
        used = [w["kv_blocks_used"] for w in ws] + [g["kv_blocks_used"] for g in groups(d) if g["live"]]
        if all(u == 0 for u in used):
            return
        assert time.monotonic() < deadline, (ws, groups(d))
        time.sleep(0.2)


def wait_all_live(d, n):
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        code, h = health(d)
        if h == {"status": "ok", "workers_live": n, "workers_total": n}:
            return
        time.sleep(0.2)
    raise AssertionError(health(d))


def run_weftd(*args, timeout=60):
    """weftd with bad flags: its exit code and output."""
    p = subprocess.run([os.path.join(BIN_DIR, "weftd"), "--model", MODEL, "--port", "0", *args],
                       capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout + p.stderr


def golden_cases():
    """llama.cpp's greedy tokens for the default model: [(prompt ids, generated ids)]."""
    cases, prompt = [], None
    with open(GOLDEN) as f:
        for line in f:
            if line.startswith("I "):
                prompt = [int(t) for t in line.split()[1:]]
            elif line.startswith("G ") and prompt is not None:
                cases.append((prompt, [int(t) for t in line.split()[1:]]))
                prompt = None
    return cases


def assert_golden_equal_single_process(d, n=24, first=(), after_first=None):
    """d's greedy outputs for the golden prompts (8 at once) equal a single-process daemon's,
    and both are llama.cpp's tokens (the golden file) as far as they go. Before them, the
    prompts `first` one after the other (e.g. two with a shared prefix: the second hits the
    prefix cache) give the same outputs on both; after_first() is called then."""
    cases = golden_cases()
    assert len(cases) >= 20
    single = Weftd()
    try:
        for ids in first:
            assert complete(d.base, ids, n) == complete(single.base, ids, n), ids
        if after_first:
            after_first()
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            got = list(pool.map(lambda c: complete(d.base, c[0], n), cases))
            want = list(pool.map(lambda c: complete(single.base, c[0], n), cases))
    finally:
        assert single.stop() == 0
    assert got == want
    for (text, used), (_, gen) in zip(got, cases):
        ref = post(d.base, "/detokenize", {"tokens": gen[:used]})["content"]
        assert text == ref


def metric_sum(text, name, label=""):
    """Sum of the samples of a Prometheus metric whose labels contain `label` (None: absent)."""
    total, seen = 0.0, False
    for line in text.splitlines():
        m = re.match(r"^%s(\{[^}]*\})?\s+([0-9.eE+-]+)$" % re.escape(name), line)
        if m and label in (m.group(1) or ""):
            total += float(m.group(2))
            seen = True
    return total if seen else None
