"""A small OpenAI-compatible model server for examples and tests: ``python -m gpuq.serving_demo``.

It computes real answers on the CPU, downloads nothing and needs only the standard library:

- ``POST /v1/embeddings``: a deterministic hashing-trick embedding (words and character trigrams,
  each hashed with BLAKE2b to a dimension and a sign, summed, L2-normalised);
- ``POST /v1/chat/completions`` and ``POST /v1/completions``: a character bigram model built at
  start from a bundled text, decoding greedily from the prompt's last character with a seeded
  tie-break (the same prompt always gets the same answer); ``"stream": true`` answers as
  server-sent events, as OpenAI and vLLM do;
- ``GET /v1/models``, ``GET /healthz`` (503 until the "model" is loaded, ``--startup-s``);
- ``GET /metrics``: vLLM's ``vllm:num_requests_running`` and ``vllm:num_requests_waiting``
  (requests beyond ``--max-concurrency`` wait, like vLLM's ``max_num_seqs``), and
  ``vllm:request_success_total``.

``--work-ms`` burns that much CPU per request and ``--delay-ms`` sleeps, so load is visible.
The port is ``--port``, else ``$PORT`` (what ``gpuq serve`` gives each replica), else 8000.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import math
import os
import random
import signal
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TEXT = (
    "a shared cluster of accelerators is a commons. without order the first to arrive takes "
    "everything and the rest wait without knowing why. queues give each team a share, quotas say "
    "how much each may hold, and priorities say who yields when the machines are full. a model "
    "server answers requests while it is busy and rests when the traffic is gone; replicas are "
    "added when requests wait and removed when they idle, so that the machines serve whoever "
    "needs them now. the scheduler reads the queues, admits what fits, and tells the reason for "
    "everything that waits. "
)


class BigramModel:
    """Next-character counts over :data:`TEXT`; ``generate`` is deterministic for a prompt."""

    def __init__(self, text: str = TEXT) -> None:
        self.alphabet = sorted(set(text))
        self.counts: dict[str, dict[str, int]] = {}
        for a, b in itertools.pairwise(text):
            row = self.counts.setdefault(a, {})
            row[b] = row.get(b, 0) + 1

    def generate(self, prompt: str, max_tokens: int) -> str:
        rng = random.Random(hashlib.blake2b(prompt.encode(), digest_size=8).digest())
        last = next((c for c in reversed(prompt.lower()) if c in self.counts), " ")
        out = []
        for _ in range(max_tokens):
            row = self.counts.get(last) or self.counts[" "]
            chars = sorted(row)
            last = rng.choices(chars, weights=[row[c] for c in chars])[0]
            out.append(last)
        return "".join(out)


def embed(text: str, dim: int) -> list[float]:
    """The hashing-trick embedding of ``text`` (unit length; zeros for an empty text)."""
    vector = [0.0] * dim
    words = text.lower().split()
    features = words + [w[i : i + 3] for w in words for i in range(max(1, len(w) - 2))]
    for feature in features:
        digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
        index = int.from_bytes(digest[:4], "little") % dim
        vector[index] += 1.0 if digest[4] & 1 else -1.0
    norm = math.sqrt(sum(v * v for v in vector))
    return [v / norm for v in vector] if norm else vector


def burn_cpu(ms: float) -> None:
    """Busy work for ``ms`` milliseconds of wall time."""
    end = time.perf_counter() + ms / 1000
    x = 1.0001
    while time.perf_counter() < end:
        for _ in range(200):
            x = (x * x) % 7.0 + 1.0


class DemoServer:
    """The server's state: settings, the model, and the request gauges."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.model_name: str = args.model
        self.dim: int = args.dim
        self.work_ms: float = args.work_ms
        self.delay_ms: float = args.delay_ms
        self.slots = threading.BoundedSemaphore(args.max_concurrency)
        self.lock = threading.Lock()
        self.running = self.waiting = self.succeeded = 0
        self.ready_at: float = time.monotonic() + float(args.startup_s)
        self.bigram = BigramModel()

    @property
    def ready(self) -> bool:
        return time.monotonic() >= self.ready_at

    def work(self) -> None:
        with self.lock:
            self.waiting += 1
        self.slots.acquire()
        with self.lock:
            self.waiting -= 1
            self.running += 1
        try:
            if self.delay_ms:
                time.sleep(self.delay_ms / 1000)
            if self.work_ms:
                burn_cpu(self.work_ms)
        finally:
            with self.lock:
                self.running -= 1
                self.succeeded += 1
            self.slots.release()

    def metrics(self) -> str:
        label = f'{{model_name="{self.model_name}"}}'
        with self.lock:
            rows = [
                ("vllm:num_requests_running", "gauge", self.running),
                ("vllm:num_requests_waiting", "gauge", self.waiting),
                ("vllm:request_success_total", "counter", self.succeeded),
            ]
        lines = []
        for name, kind, value in rows:
            lines += [f"# TYPE {name} {kind}", f"{name}{label} {value}"]
        return "\n".join(lines) + "\n"


class Handler(BaseHTTPRequestHandler):
    server_version = "gpuq-demo/1"
    protocol_version = "HTTP/1.1"
    demo: DemoServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        demo = self.demo
        if self.path == "/healthz":
            self._json(200 if demo.ready else 503, {"ok": demo.ready})
        elif self.path == "/metrics":
            self._send(200, demo.metrics().encode(), "text/plain; version=0.0.4")
        elif self.path == "/v1/models":
            card = {"id": demo.model_name, "object": "model", "created": 0, "owned_by": "gpuq"}
            self._json(200, {"object": "list", "data": [card]})
        else:
            self._json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except json.JSONDecodeError:
            self._json(400, {"error": {"message": "the body is not JSON", "type": "invalid_request_error"}})
            return
        if not isinstance(body, dict):
            body = {}
        routes = {
            "/v1/embeddings": self._embeddings,
            "/v1/chat/completions": self._chat,
            "/v1/completions": self._completions,
        }
        route = routes.get(self.path)
        if route is None:
            self._json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
            return
        if not self.demo.ready:
            self._json(503, {"error": {"message": "the model is loading", "type": "unavailable"}})
            return
        self.demo.work()
        route(body)

    def _embeddings(self, body: dict[str, Any]) -> None:
        inputs = body.get("input", "")
        texts = [inputs] if isinstance(inputs, str) else [str(t) for t in inputs]
        data = [
            {"object": "embedding", "index": i, "embedding": embed(t, self.demo.dim)}
            for i, t in enumerate(texts)
        ]
        tokens = sum(len(t.split()) for t in texts)
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        self._json(200, {"object": "list", "data": data, "model": self.demo.model_name, "usage": usage})

    def _chat(self, body: dict[str, Any]) -> None:
        messages = body.get("messages") or []
        prompt = " ".join(str(m.get("content", "")) for m in messages if isinstance(m, dict))
        self._generate(body, prompt, chat=True)

    def _completions(self, body: dict[str, Any]) -> None:
        self._generate(body, str(body.get("prompt", "")), chat=False)

    def _generate(self, body: dict[str, Any], prompt: str, *, chat: bool) -> None:
        max_tokens = max(1, min(int(body.get("max_tokens") or 16), 512))
        text = self.demo.bigram.generate(prompt, max_tokens)
        kind = "chat.completion" if chat else "text_completion"
        head = {"id": f"cmpl-{hashlib.blake2b(prompt.encode(), digest_size=6).hexdigest()}", "created": 0}
        head |= {"model": self.demo.model_name}
        usage = {"prompt_tokens": len(prompt), "completion_tokens": max_tokens}
        usage["total_tokens"] = usage["prompt_tokens"] + max_tokens
        if body.get("stream"):
            self._stream(head, text, kind, chat)
            return
        choice: dict[str, Any] = {"index": 0, "finish_reason": "length"}
        choice |= {"message": {"role": "assistant", "content": text}} if chat else {"text": text}
        self._json(200, head | {"object": kind, "choices": [choice], "usage": usage})

    def _stream(self, head: dict[str, Any], text: str, kind: str, chat: bool) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for piece in _pieces(text):
            delta: dict[str, Any] = {"index": 0, "finish_reason": None}
            delta |= {"delta": {"content": piece}} if chat else {"text": piece}
            chunk = head | {"object": f"{kind}.chunk" if chat else kind, "choices": [delta]}
            self._chunk(f"data: {json.dumps(chunk)}\n\n".encode())
        self._chunk(b"data: [DONE]\n\n")
        self._chunk(b"")

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")

    def _json(self, status: int, payload: dict[str, Any]) -> None:
        self._send(status, json.dumps(payload).encode(), "application/json")

    def _send(self, status: int, data: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _pieces(text: str, size: int = 4) -> Iterator[str]:
    for start in range(0, len(text), size):
        yield text[start : start + size]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m gpuq.serving_demo", description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT") or 8000))
    parser.add_argument("--model", default="gpuq-demo", help="the model name answered and listed")
    parser.add_argument("--dim", type=int, default=64, help="embedding dimensions")
    parser.add_argument("--work-ms", type=float, default=0.0, help="CPU work per request")
    parser.add_argument("--delay-ms", type=float, default=0.0, help="sleep per request")
    parser.add_argument("--max-concurrency", type=int, default=8, help="requests run at once; others wait")
    parser.add_argument("--startup-s", type=float, default=0.0, help="seconds before /healthz answers 200")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    handler = type("DemoHandler", (Handler,), {"demo": DemoServer(args)})
    httpd = ThreadingHTTPServer((args.host, args.port), handler)
    httpd.daemon_threads = True

    def stop(_signum: int, _frame: object) -> None:
        threading.Thread(target=httpd.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    print(f"gpuq demo model server {args.model} on http://{args.host}:{args.port}", flush=True)
    try:
        httpd.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        httpd.server_close()


if __name__ == "__main__":
    main()
