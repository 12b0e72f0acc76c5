"""A tiny OpenAI-compatible mock server for weft-bench tests (loopback only).

Serves POST /v1/completions and /v1/chat/completions (streaming SSE with chunked transfer
encoding and keep-alive, or plain JSON), GET /v1/models and GET /stats. Token timing is
deterministic: the first token after `ttft_s`, then one every `itl_s`. Every request whose
arrival number (1-based) is divisible by a key of `fail_every` gets that HTTP status instead.
Run standalone:  python3 mock_server.py --port 0   (prints the port).
"""
import argparse
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class MockState:
    def __init__(self, ttft_s=0.02, itl_s=0.002, fail_every=None, usage=True,
                 close_delimited=False, drop_idle=False, retry_after=None):
        self.ttft_s = ttft_s
        self.itl_s = itl_s
        self.fail_every = dict(fail_every or {})
        self.usage = usage
        self.retry_after = retry_after  # Retry-After value sent with 429/503, or None
        # close_delimited: streams end by closing the connection (no chunked framing).
        # drop_idle: close every connection after its response without saying so, as a server
        # whose keep-alive timeout just expired: the client must retry on a new connection.
        self.close_delimited = close_delimited
        self.drop_idle = drop_idle
        self.lock = threading.Lock()
        self.arrivals = 0
        self.bodies = []  # every request body seen, in arrival order
        self.status_counts = {}
        self.tokens_out = 0

    def admit(self, body):
        with self.lock:
            self.arrivals += 1
            n = self.arrivals
            self.bodies.append(body)
            status = 200
            for every, st in sorted(self.fail_every.items()):
                if n % every == 0:
                    status = st
                    break
            self.status_counts[status] = self.status_counts.get(status, 0) + 1
            return status


def make_handler(state):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self):
            super().setup()
            # Without TCP_NODELAY, Nagle + delayed ACK add ~40 ms to small SSE writes.
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def log_message(self, *args):
            pass

        def _send_json(self, status, obj):
            data = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            if status in (429, 503) and state.retry_after is not None:
                self.send_header("Retry-After", str(state.retry_after))
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/v1/models":
                self._send_json(200, {"object": "list", "data": [{"id": "mock-model"}]})
            elif self.path == "/stats":
                with state.lock:
                    self._send_json(200, {"arrivals": state.arrivals,
                                          "status_counts": {str(k): v for k, v in state.status_counts.items()},
                                          "tokens_out": state.tokens_out,
                                          "bodies": state.bodies})
            else:
                self._send_json(404, {"error": {"message": "not found"}})

        def _chunk(self, obj):
            payload = ("data: " + (obj if isinstance(obj, str) else json.dumps(obj)) + "\n\n").encode()
            if state.close_delimited:
                self.wfile.write(payload)
            else:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(payload), payload))
            self.wfile.flush()

        def handle_one_request(self):
            super().handle_one_request()
            if state.drop_idle:
                self.close_connection = True

        def do_POST(self):
            n = int(self.headers.get("Content-Length", "0"))
            raw = self.rfile.read(n)
            try:
                body = json.loads(raw)
            except ValueError:
                self._send_json(400, {"error": {"message": "bad json"}})
                return
            if self.path not in ("/v1/completions", "/v1/chat/completions"):
                self._send_json(404, {"error": {"message": "no such route"}})
                return
            chat = self.path.endswith("chat/completions")
            status = state.admit(body)
            if status != 200:
                self._send_json(status, {"error": {"message": "injected %d" % status}})
                return
            max_tokens = int(body.get("max_tokens", 16))
            prompt = body["messages"][0]["content"] if chat else body.get("prompt", "")
            prompt_tokens = len(prompt.split())
            with state.lock:
                state.tokens_out += max_tokens
            usage = {"prompt_tokens": prompt_tokens, "completion_tokens": max_tokens,
                     "total_tokens": prompt_tokens + max_tokens}
            if not body.get("stream"):
                time.sleep(state.ttft_s + state.itl_s * max(0, max_tokens - 1))
                text = " tok" * max_tokens
                choice = ({"index": 0, "message": {"role": "assistant", "content": text},
                           "finish_reason": "length"} if chat else
                          {"index": 0, "text": text, "finish_reason": "length"})
                obj = {"id": "cmpl-mock", "object": "text_completion", "choices": [choice]}
                if state.usage:
                    obj["usage"] = usage
                self._send_json(200, obj)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            if state.close_delimited:
                self.send_header("Connection", "close")
                self.close_connection = True
            else:
                self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            if chat:  # a role-only first chunk, as real servers send: not a token
                self._chunk({"choices": [{"index": 0, "delta": {"role": "assistant", "content": None}}]})
            time.sleep(state.ttft_s)
            for i in range(max_tokens):
                if i:
                    time.sleep(state.itl_s)
                choice = ({"index": 0, "delta": {"content": " tok"}} if chat else
                          {"index": 0, "text": " tok"})
                if i == max_tokens - 1:
                    choice["finish_reason"] = "length"
                self._chunk({"id": "cmpl-mock", "choices": [choice]})
            opts = body.get("stream_options") or {}
            if state.usage and opts.get("include_usage"):
                self._chunk({"id": "cmpl-mock", "choices": [], "usage": usage})
            self._chunk("[DONE]")
            if not state.close_delimited:
                self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    return Handler


class MockServer:
    """Context manager: a mock server on 127.0.0.1 with a free port, in a thread."""

    def __init__(self, **kw):
        self.state = MockState(**kw)
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(self.state))
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--ttft", type=float, default=0.02)
    ap.add_argument("--itl", type=float, default=0.002)
    a = ap.parse_args()
    st = MockState(a.ttft, a.itl)
    httpd = ThreadingHTTPServer(("127.0.0.1", a.port), make_handler(st))
    print(httpd.server_address[1], flush=True)
    httpd.serve_forever()
