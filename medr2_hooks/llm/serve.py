"""``medr2 serve``: an OpenAI-compatible completions server over a local model (the embedded models on a CPU,
or any transformers checkpoint), speaking the subset of the protocol the harness and lm-eval's
``local-completions`` use: ``POST /v1/completions`` (``prompt`` str or list, ``max_tokens``, ``stop``,
``temperature`` 0, ``echo`` + ``logprobs`` for prompt log-probabilities) and ``GET /v1/models``.

It stands in for ``vllm serve`` where no GPU is at hand (the dress rehearsal of a served-roles run), so the
client code paths — concurrency, batching, retries, errors — are the ones a GPU run takes. Like vLLM it batches
across requests: requests that arrive while the model is busy are merged into one model call (up to
``max_batch`` prompts), so concurrent clients keep the model's batches full.
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import threading
from concurrent.futures import Future
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch

log = logging.getLogger(__name__)
LOGIT_BUDGET = 2048  # sequence positions per forward pass when returning prompt log-probabilities


@torch.no_grad()
def prompt_logprobs(backend, texts: list[str]) -> list[dict]:
    """vLLM's ``echo`` + ``logprobs`` answer for each text: every token's log-probability (None for the first)
    and its character offset."""
    from .hf import pad

    encs = [backend.tokenizer(t, return_offsets_mapping=True) for t in texts]
    out: list[dict] = [{}] * len(texts)
    order = sorted(range(len(texts)), key=lambda i: -len(encs[i]["input_ids"]))
    start = 0
    while start < len(order):
        width = len(encs[order[start]]["input_ids"])
        size = max(1, min(backend.batch_size, LOGIT_BUDGET // max(width, 1)))
        idx = order[start:start + size]
        start += size
        ids, mask, positions = pad([encs[i]["input_ids"] for i in idx], backend.tokenizer.pad_token_id, left=True)
        logits = backend.model(input_ids=ids.to(backend.device), attention_mask=mask.to(backend.device),
                               position_ids=positions.to(backend.device)).logits.float()
        for j, i in enumerate(idx):
            seq = encs[i]["input_ids"]
            row = logits[j, ids.shape[1] - len(seq):]
            targets = torch.tensor(seq[1:], device=row.device)
            picked = (row[:-1].gather(1, targets[:, None])[:, 0] - row[:-1].logsumexp(-1)).tolist()
            out[i] = {"token_logprobs": [None] + picked, "text_offset": [s for s, _ in encs[i]["offset_mapping"]],
                      "tokens": backend.tokenizer.convert_ids_to_tokens(seq)}
    return out


class Batcher:
    """Merges the prompts of requests that arrive together into one model call per kind of work."""

    def __init__(self, backend, max_batch: int = 64):
        self.backend, self.max_batch = backend, max_batch
        self.jobs: queue.Queue = queue.Queue()
        self.calls = 0
        threading.Thread(target=self._loop, daemon=True).start()

    def submit(self, kind: tuple, prompts: list[str]) -> list:
        future: Future = Future()
        self.jobs.put((kind, prompts, future))
        return future.result()

    def _loop(self) -> None:
        while True:
            jobs = [self.jobs.get()]
            size = len(jobs[0][1])
            while size < self.max_batch:
                try:
                    job = self.jobs.get_nowait()
                except queue.Empty:
                    break
                jobs.append(job)
                size += len(job[1])
            groups: dict[tuple, list] = {}
            for job in jobs:
                groups.setdefault(job[0], []).append(job)
            for kind, group in groups.items():
                prompts = [p for _, ps, _ in group for p in ps]
                try:
                    results = self._run(kind, prompts)
                except Exception as exc:  # noqa: BLE001 -- handed to the waiting request, which answers 500
                    for _, _, future in group:
                        future.set_exception(exc)
                    continue
                self.calls += 1
                at = 0
                for _, ps, future in group:
                    future.set_result(results[at: at + len(ps)])
                    at += len(ps)

    def _run(self, kind: tuple, prompts: list[str]) -> list:
        if kind[0] == "echo":
            return prompt_logprobs(self.backend, prompts)
        _, max_tokens, stop = kind
        return self.backend.generate(prompts, max_tokens, list(stop) or None, role="served")


def make_server(backend, model_name: str, host: str = "127.0.0.1", port: int = 8000,
                max_batch: int = 64) -> ThreadingHTTPServer:
    batcher = Batcher(backend, max_batch)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, fmt, *args):
            log.debug("%s " + fmt, self.address_string(), *args)

        def _send(self, status: int, payload: dict) -> None:
            body = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if self.path.rstrip("/") == "/v1/models":
                self._send(200, {"object": "list", "data": [{"id": model_name, "object": "model"}]})
            else:
                self._send(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self):
            if self.path.rstrip("/") != "/v1/completions":
                return self._send(404, {"error": {"message": f"no route {self.path}"}})
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                prompts = body["prompt"] if isinstance(body["prompt"], list) else [body["prompt"]]
                max_tokens = int(body.get("max_tokens", 16))
                if body.get("temperature", 0) not in (0, 0.0, None):
                    raise ValueError("this server decodes greedily: temperature must be 0")
            except (KeyError, ValueError, TypeError, json.JSONDecodeError) as exc:
                return self._send(400, {"error": {"message": f"bad request: {exc}"}})
            try:
                if body.get("echo") and max_tokens == 0:
                    results = batcher.submit(("echo",), prompts)
                    choices = [{"index": i, "text": p, "logprobs": r, "finish_reason": "length"}
                               for i, (p, r) in enumerate(zip(prompts, results))]
                    completion = 0
                else:
                    stop = body.get("stop") or []
                    texts = batcher.submit(("generate", max_tokens, tuple([stop] if isinstance(stop, str) else stop)),
                                           prompts)
                    choices = [{"index": i, "text": t, "finish_reason": "stop"} for i, t in enumerate(texts)]
                    completion = sum(backend.count_tokens(texts)) if texts else 0
            except Exception as exc:  # noqa: BLE001 -- a model failure is the client's 500, not a dead server
                log.exception("request failed")
                return self._send(500, {"error": {"message": f"{type(exc).__name__}: {exc}"}})
            usage = {"prompt_tokens": sum(backend.count_tokens(prompts)), "completion_tokens": completion}
            self._send(200, {"object": "text_completion", "model": model_name, "choices": choices, "usage": usage})

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    server.batcher = batcher
    return server


def start_background(backend, model_name: str, host: str = "127.0.0.1", port: int = 0, max_batch: int = 64):
    """A server on a free port in a daemon thread: ``(server, base_url)``; ``server.shutdown()`` stops it."""
    server = make_server(backend, model_name, host, port, max_batch)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://{host}:{server.server_address[1]}/v1"


@contextlib.contextmanager
def serve_process(model: str, port: int, name: str | None = None, batch_size: int = 8, ready_seconds: float = 600,
                  log_path: str | None = None):
    """``medr2 serve`` in its own process (as ``vllm serve`` runs apart from the client) on ``port``; yields the
    base URL once ``/v1/models`` answers and stops the server on exit. A taken port is an error naming it."""
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    from ..errors import Medr2Error
    from ..procs import die_with_parent

    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            raise Medr2Error(f"port {port} is taken: stop what listens there or choose another port") from None
    url = f"http://127.0.0.1:{port}/v1"
    out = open(log_path, "ab") if log_path else subprocess.DEVNULL
    proc = subprocess.Popen([sys.executable, "-m", "medr2_hooks.cli.main", "serve", "--model", model, "--name",
                             name or model, "--port", str(port), "--batch-size", str(batch_size)],
                            stdout=out, stderr=subprocess.STDOUT if log_path else subprocess.DEVNULL,
                            preexec_fn=die_with_parent)
    try:
        deadline = time.time() + ready_seconds
        while True:
            if proc.poll() is not None:
                raise Medr2Error(f"medr2 serve --model {model} --port {port} exited with {proc.returncode}"
                                 + (f" (log: {log_path})" if log_path else ""))
            try:
                urllib.request.urlopen(f"{url}/models", timeout=2).read()
                break
            except OSError:
                if time.time() > deadline:
                    raise Medr2Error(f"medr2 serve --model {model} did not answer at {url} in {ready_seconds} s") from None
                time.sleep(1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        if log_path:
            out.close()
