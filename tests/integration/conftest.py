"""Starts real weftd processes for the integration tests.

Each test module gets its own daemon on 127.0.0.1 and a free port, serving $WEFT_MODEL with
the programs in $WEFT_BIN_DIR. The scheduler's cost model is given on the command line so
start-up does not spend minutes calibrating on a busy machine; admission control is left on
but with a generous default TTFT target, so only the tests that ask for overload get 429.
"""
import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

import pytest

BIN_DIR = os.environ.get("WEFT_BIN_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "build", "bin"))
MODEL = os.environ.get("WEFT_MODEL", "/usr/local/share/weft/models/SmolLM2-135M-Instruct.Q4_1.gguf")
MODEL_ID = os.path.basename(MODEL)[:-5] if MODEL.endswith(".gguf") else os.path.basename(MODEL)
COST = "0.5,0.05,2,0.0005"  # step_ms = a + b*prefill + c*decode + d*context; a rough CPU fit


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Weftd:
    def __init__(self, *extra, ready_timeout=300, env=None, model=None):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.NamedTemporaryFile(prefix="weftd-", suffix=".log", delete=False)
        args = [os.path.join(BIN_DIR, "weftd"), "--model", model or MODEL, "--host", "127.0.0.1",
                "--port", str(self.port), "--cost-model", COST, "--fixed-cost-model", "--default-ttft-ms", "600000",
                "--kv-memory-mb", "256", "--threads", "2", *extra]
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

    def logtext(self):
        with open(self.log.name, errors="replace") as f:
            return f.read()[-4000:]

    def stop(self, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        os.unlink(self.log.name)
        return self.proc.returncode


@pytest.fixture(scope="module")
def weftd():
    d = Weftd()
    yield d
    rc = d.stop()
    assert rc == 0, f"weftd exited with {rc}"
