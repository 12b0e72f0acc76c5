"""The HTTP plumbing of weft-bench's fake servers (mock_server.py: an OpenAI text server,
image_server.py: an image server), loopback only, Python stdlib: a keep-alive HTTP/1.1 handler
base with JSON replies and chunked SSE events, and a server on a free port in a thread.

    class Handler(FakeHandler):
        def do_POST(self):
            body = json.loads(self.read_body())
            self.state.seen.append(body)
            self.send_json(200, {"ok": True})
    with FakeServer(state, Handler) as srv:   # requests to 127.0.0.1:srv.port
        ...
"""
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    state = None  # the server's state object, set by bind()

    @classmethod
    def bind(cls, state):
        """A subclass of cls whose instances see `state` as self.state."""
        return type(cls.__name__, (cls,), {"state": state})

    def setup(self):
        super().setup()
        # Without TCP_NODELAY, Nagle + delayed ACK add ~40 ms to small SSE writes.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, *args):
        pass

    def read_body(self):
        return self.rfile.read(int(self.headers.get("Content-Length", "0")))

    def send_json(self, status, obj, headers=()):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def start_sse(self, chunked=True):
        """Starts a text/event-stream reply, chunked, or delimited by closing the connection."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()

    def sse_event(self, obj, chunked=True):
        """One `data:` event: a JSON object, or a string as it is ("[DONE]")."""
        payload = ("data: " + (obj if isinstance(obj, str) else json.dumps(obj)) + "\n\n").encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(payload), payload) if chunked else payload)
        self.wfile.flush()

    def end_chunks(self):
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


class FakeServer:
    """Context manager: handler_cls bound to state, served on 127.0.0.1 on a free port (or
    `port`) by a thread; .port, .state."""

    def __init__(self, state, handler_cls, port=0):
        self.state = state
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), handler_cls.bind(state))
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()

    def serve_forever(self):
        """Standalone use: prints the port, then serves until killed."""
        print(self.port, flush=True)
        self.httpd.serve_forever()
