"""Runs the weft-bench binary for the tests of this folder (against the fake servers of
fake_http.py). Importing have_binary into a test module makes every test there fail clearly
when weft-bench is not built."""
import json
import os
import subprocess

import pytest

BIN = os.path.join(os.environ.get("WEFT_BIN_DIR", os.path.join(os.path.dirname(__file__), "../../build/bin")),
                   "weft-bench")


def bench(port, *args, check=True, timeout=120):
    """weft-bench against 127.0.0.1:port with args; raises with its output when it fails and
    check is set."""
    cmd = [BIN, "--port", str(port), "--no-progress", *map(str, args)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError("weft-bench failed (%d): %s\n%s" % (p.returncode, " ".join(cmd), p.stderr + p.stdout))
    return p


def result(path):
    with open(path) as f:
        return json.load(f)


@pytest.fixture(scope="module", autouse=True)
def have_binary():
    if not os.path.exists(BIN):
        pytest.fail("weft-bench not built at %s" % BIN)
