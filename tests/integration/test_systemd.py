# weft-test: labels=integration,net timeout=300
"""weftd under a pretend systemd: the test owns the $NOTIFY_SOCKET datagram socket and checks
READY=1, STATUS= and WATCHDOG=1 arrive, then changes the API key file, sends SIGHUP and checks
the new key works on a keep-alive connection that stayed open. Bounded waits only."""
import http.client
import os
import signal
import socket
import tempfile
import time

import pytest

from conftest import Weftd


def collect(sock, until, timeout=60):
    """Datagrams until one contains `until` (or the deadline); returns them all."""
    got = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sock.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            msg = sock.recv(4096).decode()
        except socket.timeout:
            break
        got.append(msg)
        if until in msg:
            break
    return got


def get(conn, key):
    conn.request("GET", "/v1/models", headers={"Authorization": "Bearer " + key})
    r = conn.getresponse()
    r.read()
    return r.status


@pytest.mark.parametrize("abstract", [False, True])
def test_notify_watchdog_and_reload(abstract):
    with tempfile.TemporaryDirectory() as tmp:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        if abstract:
            name = "@weft-test-%d-%d" % (os.getpid(), time.monotonic_ns())
            sock.bind("\0" + name[1:])
        else:
            name = os.path.join(tmp, "notify")
            sock.bind(name)
        keys = os.path.join(tmp, "keys")
        with open(keys, "w") as f:
            f.write("# old key\nkey-one\n")
        env = dict(os.environ, NOTIFY_SOCKET=name, WATCHDOG_USEC="400000")
        env.pop("WATCHDOG_PID", None)
        d = Weftd("--api-key-file", keys, env=env)
        try:
            msgs = collect(sock, "READY=1")
            assert any("READY=1" in m for m in msgs), msgs
            assert any(m.startswith("STATUS=loading") or "\nSTATUS=loading" in m for m in msgs), msgs
            ready = next(m for m in msgs if "READY=1" in m)
            assert "STATUS=serving" in ready, ready
            # keep-alives every WATCHDOG_USEC/2 from the loop thread
            msgs = collect(sock, "WATCHDOG=1", timeout=10)
            assert any("WATCHDOG=1" in m for m in msgs), msgs

            conn = http.client.HTTPConnection("127.0.0.1", d.port, timeout=30)
            assert get(conn, "key-one") == 200
            assert get(conn, "key-two") == 401
            with open(keys, "w") as f:
                f.write("key-two\n")
            d.proc.send_signal(signal.SIGHUP)
            msgs = collect(sock, "READY=1", timeout=30)
            assert any("RELOADING=1" in m for m in msgs), msgs
            assert any("READY=1" in m for m in msgs), msgs
            assert get(conn, "key-two") == 200  # same connection: it was not dropped
            assert get(conn, "key-one") == 401
            conn.close()
            d.proc.send_signal(signal.SIGTERM)
            msgs = collect(sock, "STOPPING=1", timeout=30)
            assert any("STOPPING=1" in m for m in msgs), msgs
            assert d.proc.wait(60) == 0
        finally:
            d.stop()
            sock.close()
