# weft-test: labels=integration,net timeout=600
"""HTTP behaviour found by outside probing (issue #18), checked over real sockets against a
real weftd: lingering close after 413/431, half-closed clients, slow readers of streams,
the SIGTERM drain, protocol violations, error bodies. Every wait is bounded."""
import json
import select
import signal
import socket
import time
import urllib.parse

import pytest

from conftest import MODEL_ID, Weftd


@pytest.fixture(scope="module")
def weftd():
    d = Weftd("--max-body-bytes", "65536", "--max-header-bytes", "8192", "--max-connections", "40",
              "--max-output-bytes", "65536", "--write-timeout-ms", "3000", "--api-key", "k1")
    yield d
    assert d.stop() == 0


AUTH = b"Authorization: Bearer k1\r\n"


def post(path, body, extra=b"", version=b"HTTP/1.1"):
    host = b"Host: x\r\n" if version == b"HTTP/1.1" else b""
    return (b"POST %s %s\r\n%s%sContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
            % (path.encode(), version, host, AUTH + extra, len(body)) + body)


def read_all(s, timeout=60):
    """Everything until EOF (or until the deadline); a reset counts as EOF but is reported."""
    out, reset = b"", False
    deadline = time.monotonic() + timeout
    s.settimeout(max(0.1, deadline - time.monotonic()))
    while time.monotonic() < deadline:
        try:
            chunk = s.recv(65536)
        except ConnectionResetError:
            reset = True
            break
        except socket.timeout:
            break
        if not chunk:
            break
        out += chunk
    return out, reset


def one(port, data, timeout=30):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        return read_all(s, timeout)[0]
    finally:
        s.close()


def status_of(resp):
    assert resp.startswith(b"HTTP/1.1 "), resp[:300]
    return int(resp[9:12])


def body_json(resp):
    return json.loads(resp.split(b"\r\n\r\n", 1)[1])


def test_oversized_body_gets_413_not_reset(weftd):
    # The client sends the whole 4 MB body before it reads (as curl and most libraries do).
    # Without a lingering close the server's close() resets the connection and the 413 is lost.
    body = b"x" * (4 << 20)
    for _ in range(3):
        s = socket.create_connection(("127.0.0.1", weftd.port), timeout=30)
        try:
            s.sendall(post("/v1/completions", body))
            out, reset = read_all(s)
        finally:
            s.close()
        assert status_of(out) == 413, out[:200]
        assert not reset


def test_oversized_header_gets_431_not_reset(weftd):
    big = b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-H%d: %s\r\n" % (i, b"v" * 1000) for i in range(1000)) + b"\r\n"
    s = socket.create_connection(("127.0.0.1", weftd.port), timeout=30)
    try:
        s.sendall(big)
        out, reset = read_all(s)
    finally:
        s.close()
    assert status_of(out) == 431, out[:200]
    assert not reset


def test_half_closed_generation_is_answered(weftd):
    req = json.dumps({"prompt": "Hello", "max_tokens": 4}).encode()
    for version, extra in [(b"HTTP/1.0", b""), (b"HTTP/1.1", b"Connection: close\r\n")]:
        out = one(weftd.port, post("/v1/completions", req, extra, version))
        assert status_of(out) == 200, out[:300]
        assert body_json(out)["choices"][0]["text"] is not None


def test_protocol_violations(weftd):
    assert status_of(one(weftd.port, b"GET /health HTTP/2.0\r\nHost: x\r\n\r\n")) == 505
    assert status_of(one(weftd.port, b"GET /health HTTP/1.1\r\n\r\n")) == 400
    out = one(weftd.port, b"GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k1\r\n"
                          b"Authorization: Bearer wrong\r\n\r\n")
    assert status_of(out) == 400
    assert status_of(one(weftd.port, b"FROB /health HTTP/1.1\r\nHost: x\r\n\r\n")) == 501
    assert status_of(one(weftd.port, b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com\r\n\r\n")) == 501
    out = one(weftd.port, b"PUT /health HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
    assert status_of(out) == 405 and b"\r\nAllow: GET" in out
    assert status_of(one(weftd.port, b"GET /health HTTP/1.0\r\n\r\n")) == 200  # 1.0 needs no Host


def error_of(port, path, payload):
    out = one(port, post(path, json.dumps(payload).encode()))
    return status_of(out), body_json(out)["error"]


def test_error_bodies_name_the_field(weftd):
    code, e = error_of(weftd.port, "/v1/completions", {"prompt": "x", "n": 100, "max_tokens": 1})
    assert code == 400 and e["param"] == "n" and "between 1 and 64" in e["message"], e
    code, e2 = error_of(weftd.port, "/v1/completions", {"prompt": "x", "n": 200, "max_tokens": 1})
    assert code == 400 and e2["param"] == "n", e2
    code, e = error_of(weftd.port, "/v1/completions", {"prompt": "x", "max_tokens": 1, "logit_bias": {"99999999": 1}})
    assert code == 400 and e["param"] == "logit_bias", e
    code, e = error_of(weftd.port, "/v1/chat/completions",
                       {"messages": [{"role": "tool", "content": "x"}], "max_tokens": 1})
    assert code == 400 and e["param"] == "messages[0].role", e
    out = one(weftd.port, post("/v1/completions", b'{"prompt": "a\\u0000b"}'))
    assert status_of(out) == 400
    assert b"JSON_ALLOW_NUL" not in out and b"NUL" in out


def test_model_ids(weftd):
    hdr = {"Authorization": "Bearer k1"}
    code, body = weftd.status("/v1/models/" + urllib.parse.quote(MODEL_ID, safe=""), hdr)
    assert code == 200 and json.loads(body)["id"] == MODEL_ID
    code, body = weftd.status("/v1/models/" + "".join("%%%02X" % ord(ch) for ch in MODEL_ID), hdr)
    assert code == 200 and json.loads(body)["id"] == MODEL_ID
    code, body = weftd.status("/v1/models/%zz", hdr)
    assert code == 404
    code, body = weftd.status("/v1/models/" + "z" * 7000, hdr)  # under --max-header-bytes
    assert code == 404 and len(body) < 1024


def test_refused_connections_log_rate_limited(weftd):
    socks = []
    try:
        for _ in range(200):
            try:
                socks.append(socket.create_connection(("127.0.0.1", weftd.port), timeout=5))
            except OSError:
                break
        time.sleep(0.5)
        refused = sum(1 for s in socks[40:] if select.select([s], [], [], 5)[0] and b" 503 " in s.recv(200))
    finally:
        for s in socks:
            s.close()
    assert refused >= 100
    lines = [l for l in weftd.logtext().splitlines() if "refused," in l]
    assert 1 <= len(lines) <= 5, lines


def test_stalled_stream_reader_is_cut_off(weftd):
    # n=16 with logprobs, streamed, to a client that never reads: the server must stop buffering
    # (--max-output-bytes) or time out the write (--write-timeout-ms), and cancel the request.
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", weftd.port))
    req = json.dumps({"prompt": "Once upon a time", "max_tokens": 400, "n": 16, "logprobs": 5,
                      "stream": True, "ignore_eos": True}).encode()
    s.sendall(post("/v1/completions", req))
    deadline = time.monotonic() + 120
    cut = False
    while time.monotonic() < deadline and not cut:
        time.sleep(0.5)
        cut = "client not reading" in weftd.logtext() or "write timeout" in weftd.logtext()
    try:
        assert cut, weftd.logtext()
        # the request is gone from the server: nothing is running any more
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            code, body = weftd.status("/admin/stats", {"Authorization": "Bearer k1"})
            if code == 200 and not json.loads(body).get("requests"):
                break
            time.sleep(0.5)
        assert code == 200 and not json.loads(body).get("requests"), body[:500]
        out, _ = read_all(s, 30)  # what was sent, then the close
        assert out.startswith(b"HTTP/1.1 200 ")
        assert b"data: [DONE]" not in out
    finally:
        s.close()


def test_drain_answers_health_and_refuses_new_work():
    d = Weftd("--shutdown-timeout-ms", "60000")
    try:
        body = json.dumps({"prompt": "Once", "max_tokens": 48, "stream": True, "ignore_eos": True}).encode()
        s = socket.create_connection(("127.0.0.1", d.port), timeout=60)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        got = b""
        while b'"text"' not in got:
            chunk = s.recv(4096)
            assert chunk
            got += chunk
        d.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and "shutting down" not in d.logtext():
            time.sleep(0.05)
        h = one(d.port, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert status_of(h) == 503 and body_json(h)["status"] == "draining", h
        new = one(d.port, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 14\r\n\r\n{\"prompt\":\"a\"}")
        assert status_of(new) == 503 and b"\r\nRetry-After: " in new, new
        rest, _ = read_all(s, 120)
        s.close()
        assert b"data: [DONE]" in got + rest  # the request under way still finished
        assert d.proc.wait(60) == 0
    finally:
        d.stop()
