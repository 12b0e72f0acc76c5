"""A fake image server for weft-bench tests (loopback only, Python stdlib).

Serves POST /v1/images/generations in OpenAI's shape with real PNGs (built with zlib and
struct) of the asked size, plain JSON or (stream: true) SSE progress events then the image.
Latency is deterministic: `base_s + steps * step_s` per request, and `slow_s` more for every
request whose arrival number (1-based) is divisible by `slow_every`. Arrival numbers divisible
by `refuse_every` get 429 with Retry-After; `bad_size_every` answers a PNG of the wrong size.
Requests are served one at a time (a lock), like a single-device server, so queueing shows.
Run standalone:  python3 image_server.py --port 0   (prints the port).
"""
import argparse
import base64
import json
import struct
import threading
import time
import zlib

from fake_http import FakeHandler, FakeServer


def png(width, height, shade=128):
    """A real grayscale PNG: signature, IHDR, one IDAT (zlib), IEND, CRCs."""
    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data +
                struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
    raw = b"".join(b"\x00" + bytes([shade % 256]) * width for _ in range(height))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw)) +
            chunk(b"IEND", b""))


class ImageState:
    def __init__(self, base_s=0.005, step_s=0.001, slow_every=0, slow_s=0.0, refuse_every=0,
                 retry_after="0.05", bad_size_every=0, serial=True):
        self.base_s = base_s
        self.step_s = step_s
        self.slow_every = slow_every
        self.slow_s = slow_s
        self.refuse_every = refuse_every
        self.retry_after = retry_after
        self.bad_size_every = bad_size_every
        self.serial = serial
        self.lock = threading.Lock()
        self.device = threading.Lock()  # one request computes at a time
        self.arrivals = 0
        self.bodies = []
        self.arrival_times = []  # monotonic seconds
        self.status_counts = {}

    def admit(self, body):
        with self.lock:
            self.arrivals += 1
            self.bodies.append(body)
            self.arrival_times.append(time.monotonic())
            return self.arrivals


class Handler(FakeHandler):
    def send_json(self, status, obj, headers=(), count=True):
        st = self.state
        if count:  # image requests only; counted before the reply, read at once by tests
            with st.lock:
                st.status_counts[status] = st.status_counts.get(status, 0) + 1
        super().send_json(status, obj, headers)

    def error(self, status, msg, param=None, headers=()):
        self.send_json(status, {"error": {"message": msg, "type": "invalid_request_error",
                                          "param": param, "code": None}}, headers)

    def do_GET(self):
        if self.path == "/v1/models":
            self.send_json(200, {"object": "list", "data": [{"id": "fake-dit", "object": "model"}]},
                           count=False)
        else:
            self.error(404, "no route")

    def do_POST(self):
        st = self.state
        raw = self.read_body()
        if self.path != "/v1/images/generations":
            return self.error(404, "no route")
        try:
            body = json.loads(raw)
            w, h = (int(x) for x in body["size"].split("x"))
            steps = int(body.get("num_inference_steps", 10))
            count = int(body.get("n", 1))
        except Exception as e:  # noqa: BLE001 - any bad field is a 400 here
            return self.error(400, "bad request: %s" % e)
        k = st.admit(body)
        if st.refuse_every and k % st.refuse_every == 0:
            return self.error(429, "deadline cannot be met", "slo",
                              [("Retry-After", st.retry_after)] if st.retry_after else [])
        delay = st.base_s + steps * st.step_s
        if st.slow_every and k % st.slow_every == 0:
            delay += st.slow_s
        ow, oh = (w + 1, h) if st.bad_size_every and k % st.bad_size_every == 0 else (w, h)
        images = [{"b64_json": base64.b64encode(png(ow, oh, k)).decode(), "revised_prompt": None}
                  for _ in range(count)]
        if body.get("stream"):
            return self.stream(steps, delay, images)
        with st.device if st.serial else threading.Lock():
            time.sleep(delay)
        self.send_json(200, {"created": int(time.time()), "data": images,
                             "usage": {"total_tokens": 0}})

    def stream(self, steps, delay, images):
        st = self.state
        self.start_sse()
        with st.device if st.serial else threading.Lock():
            for i in range(steps):
                time.sleep(delay / steps)
                self.sse_event({"type": "image_generation.progress", "step": i + 1,
                                "total_steps": steps})
        with st.lock:
            st.status_counts[200] = st.status_counts.get(200, 0) + 1
        self.sse_event({"created": int(time.time()), "data": images})
        self.end_chunks()


class ImageServer(FakeServer):
    """Context manager: a fake image server on 127.0.0.1 on a free port."""

    def __init__(self, port=0, **kw):
        super().__init__(ImageState(**kw), Handler, port)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--step-s", type=float, default=0.001)
    ap.add_argument("--refuse-every", type=int, default=0)
    a = ap.parse_args()
    ImageServer(a.port, step_s=a.step_s, refuse_every=a.refuse_every).serve_forever()
