"""A hostile HTTP service on 127.0.0.1 for the safety battery, run as its own process: ``python hostile.py MODE``
prints its port on the first line of stdout and serves every path (an ``http:`` system's ``/search``, an
OpenAI-compatible ``/v1/chat/completions``, an MLflow REST call) the same way:

* ``echo``: 401 to a POST, 500 to a GET, the body quoting the request's ``Authorization`` header (as some
  gateways log it);
* ``echo200``: a chat completion whose content quotes the ``Authorization`` header (an answer that is stored);
* ``endless``: a chunked JSON body that never ends, 64 KiB pieces as fast as the socket takes them;
* ``trickle``: a chunked JSON body that never ends, 16 bytes every 50 ms;
* ``huge``: a 200 MB JSON body with its ``Content-Length``.

Only the standard library: the battery stops it by its PID.
"""

from __future__ import annotations

import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HUGE_BYTES = 200_000_000


class Hostile(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    mode = "echo"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def send_json(self, status: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def chunked(self, piece: bytes, pause: float) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.write(b'9\r\n{"hits": \r\n')
        while True:  # a JSON value that never comes
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.flush()
            if pause:
                time.sleep(pause)

    def huge(self) -> None:
        head, tail = b'{"pad": "', b'", "hits": [], "choices": []}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(HUGE_BYTES))
        self.end_headers()
        self.wfile.write(head)
        left = HUGE_BYTES - len(head) - len(tail)
        block = b"x" * (1 << 20)
        while left > 0:
            self.wfile.write(block[: min(left, len(block))])
            left -= len(block)
        self.wfile.write(tail)

    def answer(self) -> None:
        auth = self.headers.get("Authorization", "")
        if self.mode == "echo":
            status = 401 if self.command == "POST" else 500
            self.send_json(status, {"error": {"message": f"invalid key in header Authorization: {auth}"}})
        elif self.mode == "echo200":
            content = f"From [1]: an answer (sent with {auth})"
            self.send_json(200, {"choices": [{"message": {"role": "assistant", "content": content}}]})
        elif self.mode == "endless":
            self.chunked(b" " * (1 << 16), 0.0)
        elif self.mode == "trickle":
            self.chunked(b" " * 16, 0.05)
        else:
            self.huge()

    def handle_one(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            self.answer()
        except OSError:  # the client gave up: what a bounded reader does
            self.close_connection = True

    do_POST = do_GET = handle_one


def main() -> None:
    Hostile.mode = sys.argv[1]
    server = ThreadingHTTPServer(("127.0.0.1", 0), Hostile)
    server.daemon_threads = True
    print(server.server_address[1], flush=True)
    server.serve_forever(poll_interval=0.1)


if __name__ == "__main__":
    main()
