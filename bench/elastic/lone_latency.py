#!/usr/bin/env python3
"""One DiT request alone at a time against `weftd --workers 2` under static:1 and static:2,
for two builds in turn (before/after a change, interleaved on the same host): the median wall
time of REPS requests of 45 steps per daemon. What it isolates is the per-chunk path between
the coordinator and the workers (no queueing, no admission).

    bench/elastic/lone_latency.py BEFORE_BIN_DIR AFTER_BIN_DIR [REPS]   (default 20)
"""
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "integration"))
import conftest  # noqa: E402  (Weftd: starts a daemon on a free port, stops it)
import test_dit_workers as T  # noqa: E402

before, after = sys.argv[1], sys.argv[2]
reps = int(sys.argv[3]) if len(sys.argv) > 3 else 20
for pol in ("static:1", "static:2"):
    for side, bindir in (("before", before), ("after", after)):
        conftest.BIN_DIR = bindir
        d = conftest.Weftd("--model", T.DIT, "--workers", "2", "--dit-policy", pol, "--threads", "1")
        try:
            ts = []
            for i in range(reps):
                t0 = time.monotonic()
                T.generate(d, dict(prompt="3", n=1, seed=i, num_inference_steps=45))
                ts.append((time.monotonic() - t0) * 1e3)
            print(f"{pol} {side}: median {statistics.median(ts):.1f} ms, min {min(ts):.1f} ms "
                  f"({reps} requests of 45 steps, one at a time)", flush=True)
        finally:
            d.stop()
