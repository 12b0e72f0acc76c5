#!/usr/bin/env python3
"""A streaming client that never reads (n=16, logprobs=5, 2000 tokens, 4 KiB receive buffer)
against weftd with its default --max-output-bytes / --write-timeout-ms: how long until weftd
cuts it off, why, how many tokens were generated for it, and whether anything still runs.
    WEFT_BIN_DIR=build/bin python3 bench/http/stalled_reader.py [extra weftd flags]"""
import json
import os
import socket
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "integration"))
from conftest import Weftd  # noqa: E402

d = Weftd(*sys.argv[1:])
try:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", d.port))
    req = json.dumps({"prompt": "Once upon a time", "max_tokens": 2000, "n": 16, "logprobs": 5,
                      "stream": True, "ignore_eos": True}).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(req) + req)
    t0 = time.monotonic()
    cut = None
    while time.monotonic() - t0 < 300 and cut is None:
        time.sleep(0.25)
        lines = [l for l in d.logtext().splitlines() if "closing:" in l]
        if lines:
            cut = time.monotonic() - t0
    time.sleep(2)
    st = json.loads(d.status("/admin/stats")[1])
    print("cut after: %s s" % ("%.1f" % cut if cut is not None else "never (300 s)"))
    print("reason:", lines[0].split("closing: ", 1)[1] if cut is not None else "-")
    print("tokens generated: %d; sequences still running 2 s later: %d"
          % (st["totals"]["generation_tokens"], st["scheduler"]["running"]))
    s.close()
finally:
    d.stop()
