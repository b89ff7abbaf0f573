"""The request handler the test services share: HTTP/1.1 keep-alive as a real service, quiet, JSON in
and out (imported by the service scripts, which run with this folder on their path)."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import Any


class JsonHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as a real service
    disable_nagle_algorithm = True  # headers and body go out at once (no 40 ms delayed-ACK stall)

    def log_message(self, format: str, *args: object) -> None:
        pass

    def read_json(self) -> Any:
        """The request body as JSON (``{}`` when empty)."""
        return json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")

    def send_json(self, status: int, body: object, headers: dict[str, str] | None = None) -> None:
        """Answer ``status`` with ``body`` as JSON and any extra ``headers``."""
        data = json.dumps(body).encode()
        self.send_response(status)
        for key, value in {**(headers or {}), "Content-Type": "application/json"}.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
