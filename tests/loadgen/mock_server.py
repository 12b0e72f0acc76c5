"""A tiny OpenAI-compatible mock server for weft-bench tests (loopback only).

Serves POST /v1/completions and /v1/chat/completions (streaming SSE with chunked transfer
encoding and keep-alive, or plain JSON), GET /v1/models and GET /stats. Token timing is
deterministic: the first token after `ttft_s`, then one every `itl_s`. Every request whose
arrival number (1-based) is divisible by a key of `fail_every` gets that HTTP status instead.
Run standalone:  python3 mock_server.py --port 0   (prints the port).
"""
import argparse
import json
import threading
import time

from fake_http import FakeHandler, FakeServer


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


class Handler(FakeHandler):
    def send_json(self, status, obj, headers=()):
        if status in (429, 503) and self.state.retry_after is not None:
            headers = [*headers, ("Retry-After", str(self.state.retry_after))]
        super().send_json(status, obj, headers)

    def do_GET(self):
        state = self.state
        if self.path == "/v1/models":
            self.send_json(200, {"object": "list", "data": [{"id": "mock-model"}]})
        elif self.path == "/stats":
            with state.lock:
                self.send_json(200, {"arrivals": state.arrivals,
                                     "status_counts": {str(k): v for k, v in state.status_counts.items()},
                                     "tokens_out": state.tokens_out,
                                     "bodies": state.bodies})
        else:
            self.send_json(404, {"error": {"message": "not found"}})

    def _chunk(self, obj):
        self.sse_event(obj, chunked=not self.state.close_delimited)

    def handle_one_request(self):
        super().handle_one_request()
        if self.state.drop_idle:
            self.close_connection = True

    def do_POST(self):
        state = self.state
        raw = self.read_body()
        try:
            body = json.loads(raw)
        except ValueError:
            self.send_json(400, {"error": {"message": "bad json"}})
            return
        if self.path not in ("/v1/completions", "/v1/chat/completions"):
            self.send_json(404, {"error": {"message": "no such route"}})
            return
        chat = self.path.endswith("chat/completions")
        status = state.admit(body)
        if status != 200:
            self.send_json(status, {"error": {"message": "injected %d" % status}})
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
            self.send_json(200, obj)
            return
        self.start_sse(chunked=not state.close_delimited)
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
            self.end_chunks()


class MockServer(FakeServer):
    """Context manager: a mock server on 127.0.0.1 with a free port, in a thread."""

    def __init__(self, port=0, **kw):
        super().__init__(MockState(**kw), Handler, port)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--ttft", type=float, default=0.02)
    ap.add_argument("--itl", type=float, default=0.002)
    a = ap.parse_args()
    MockServer(a.port, ttft_s=a.ttft, itl_s=a.itl).serve_forever()
