# weft-test: labels=integration,net timeout=600
"""weftd --workers: a worker that keeps dying gets a new scheduler group per restart, in the slot
of the group that went down, so the group list stays one slot per worker however often it
flaps (the slots are bounded at 64; before, every restart took a new one and after 64 restarts
the worker could not come back), and /admin/stats lists every group. Group ids are never given
twice: each restart's group has a new id, which /admin/stats shows for the worker too. Every
wait is bounded."""
import json
import os
import signal
import time

import pytest

from conftest import Weftd, admin_workers, complete, health

RESTARTS = 4  # the respawn back-off doubles from 0.5 s: 4 restarts take ~7.5 s of back-off


@pytest.fixture(scope="module")
def workers():
    d = Weftd("--workers", "2", "--heartbeat-ms", "200")
    yield d
    assert d.stop() == 0, d.logtext()


def sched_stats(d):
    code, body = d.status("/admin/stats")
    assert code == 200
    return json.loads(body)["scheduler"]


def wait_live(d, rank, old_pid, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        w = [w for w in admin_workers(d) if w["rank"] == rank][0]
        if w["state"] == "live" and w["pid"] != old_pid and w["group"] >= 0:
            return w
        time.sleep(0.1)
    raise AssertionError("worker rank %d did not come back: %s\n%s" % (rank, w, d.logtext()))


def test_flapping_worker_reuses_its_slot(workers):
    s = sched_stats(workers)
    assert [g["slot"] for g in s["groups"]] == [0, 1]
    ids = {g["id"] for g in s["groups"]}
    victim = admin_workers(workers)[0]
    for n in range(1, RESTARTS + 1):
        os.kill(victim["pid"], signal.SIGKILL)
        back = wait_live(workers, victim["rank"], victim["pid"])
        assert back["restarts"] == n and back["incarnation"] == n + 1
        s = sched_stats(workers)
        groups = s["groups"]
        # One slot per worker: the new group took the down group's slot.
        assert len(groups) == 2 and [g["slot"] for g in groups] == [0, 1], groups
        assert s["groups_live"] == 2 and all(g["live"] for g in groups), groups
        mine = [g for g in groups if g["rank"] == victim["rank"]]
        assert len(mine) == 1 and mine[0]["id"] == back["group"], (groups, back)
        assert back["group"] not in ids  # a new id per restart, never a reused one
        ids.add(back["group"])
        victim = back
    # The last incarnation serves: parallel requests reach both groups.
    before = victim["batches"]
    for i in range(6):
        text, used = complete(workers.base, [504, 3575, 282, 4649, 314 + i], 6)
        assert used == 6
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        back = [w for w in admin_workers(workers) if w["rank"] == victim["rank"]][0]
        if back["batches"] > before:
            break
        complete(workers.base, [504, 3575, 282, 4649, 999], 6)
    assert back["batches"] > before
    code, h = health(workers)
    assert code == 200 and h == {"status": "ok", "workers_live": 2, "workers_total": 2}
