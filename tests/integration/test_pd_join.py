# weft-test: labels=integration,net timeout=600
"""Workers joined from elsewhere (`weftd --role worker --join HOST:PORT --pd-role prefill|decode`)
declare the pool they serve when they join: the coordinator puts them there and fills the places
left with its own workers, whatever order they joined in. Declarations that do not fit the
coordinator's pools are refused with a message naming them. The joined workers are real
processes started here (the same binary, on 127.0.0.1 as another host would)."""
import os
import subprocess
import tempfile
import threading

from conftest import BIN_DIR, MODEL, Weftd, free_port
from test_workers import admin_workers, complete, health


def start_worker(port, world_size, *extra):
    log = tempfile.NamedTemporaryFile(prefix="weft-joined-", suffix=".log", delete=False)
    p = subprocess.Popen([os.path.join(BIN_DIR, "weftd"), "--role", "worker", "--join", f"127.0.0.1:{port}",
                          "--world-size", str(world_size), "--model", MODEL, "--kv-memory-mb", "256",
                          "--threads", "1", *extra], stdout=log, stderr=subprocess.STDOUT)
    return p, log


def stop_worker(p, log):
    try:
        p.wait(timeout=30)  # it leaves when its coordinator does
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
    os.unlink(log.name)


def coordinator_in_background(*args):
    box = {}

    def run():
        try:
            box["d"] = Weftd(*args)
        except Exception as e:  # noqa: BLE001 - re-raised by the caller
            box["error"] = e
    t = threading.Thread(target=run)
    t.start()
    return t, box


def test_joined_worker_serves_the_pool_it_declares():
    port = free_port()
    # One local worker, one joined in slot 1 that declares "decode": by rank, slot 1 would
    # prefill; the declaration wins and the local one (undeclared) takes the prefill place.
    t, box = coordinator_in_background("--prefill-workers", "1", "--decode-workers", "1", "--local-workers", "1",
                                       "--world-port", str(port), "--heartbeat-ms", "200")
    w, wlog = start_worker(port, 3, "--pd-role", "decode", "--rank", "1")
    t.join(300)
    assert "d" in box, box.get("error")
    d = box["d"]
    try:
        code, h = health(d)
        assert code == 200 and h["workers_live"] == 2, h
        ws = admin_workers(d)
        joined = [x for x in ws if x["pid"] == 0]  # not started by the coordinator
        local = [x for x in ws if x["pid"] != 0]
        assert len(joined) == 1 and len(local) == 1, ws
        assert joined[0]["rank"] == 1 and joined[0]["role"] == "decode" and joined[0]["group"] >= 0, ws
        assert local[0]["rank"] == 2 and local[0]["role"] == "prefill" and local[0]["group"] == -1, ws
        # Served across: prefilled on the local worker, its KV shipped to the joined decoder.
        text, used = complete(d.base, [504, 3575, 282, 4649, 314] * 20, 6)
        assert used == 6
        ws = admin_workers(d)
        assert [x for x in ws if x["pid"] != 0][0]["transfers"] > 0, ws
    finally:
        assert d.stop() == 0, d.logtext()
        stop_worker(w, wlog)


def test_declarations_beyond_the_pools_are_refused():
    port = free_port()
    t, box = coordinator_in_background("--prefill-workers", "1", "--decode-workers", "1", "--local-workers", "0",
                                       "--world-port", str(port), "--heartbeat-ms", "200")
    a = start_worker(port, 3, "--pd-role", "decode")
    b = start_worker(port, 3, "--pd-role", "decode")
    t.join(300)
    try:
        assert "d" not in box
        msg = str(box.get("error"))
        assert "2 decode, but the pools are --prefill-workers 1 and --decode-workers 1" in msg, msg
    finally:
        stop_worker(*a)
        stop_worker(*b)


def test_bad_pd_role_flags():
    from test_workers import run_weftd
    rc, out = run_weftd("--role", "worker", "--join", "127.0.0.1:9", "--world-size", "3", "--pd-role", "both")
    assert rc != 0 and "--pd-role must be prefill or decode (got 'both')" in out, out
    rc, out = run_weftd("--pd-role", "prefill")
    assert rc != 0 and "--pd-role is for --role worker" in out, out
