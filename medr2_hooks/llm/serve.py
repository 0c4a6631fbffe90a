"""``medr2 serve``: an OpenAI-compatible server over a local model (the embedded models on a CPU, or any
transformers checkpoint) that answers what vLLM's server answers for lm-eval's API models and our own backend:
``POST /v1/completions`` (text or token-id prompts, batched prompt lists, ``max_tokens``, ``stop``, ``seed``,
``echo`` with any ``max_tokens``, ``logprobs: N`` with ``top_logprobs``), ``POST /v1/chat/completions`` (the model's
chat template) and ``GET /v1/models``. Requests are validated field by field (:mod:`.serve_protocol`): a client
mistake is a 400 naming the field, never a 500 and never ignored.

It stands in for ``vllm serve`` where no GPU is at hand (the rehearsal of a served-roles or served-target run), so
the client code paths — concurrency, batching, retries, errors — are the ones a GPU run takes. Like vLLM it batches
across requests: requests that arrive while the model is busy are merged into one model call (up to ``max_batch``
prompts); a merged call that fails is retried request by request, so one bad request never fails the others.
It survives its clients: bounded bodies, prompts and ``max_tokens``; work for a client that hung up is dropped (its
generation stops); a listen backlog of 128; SIGTERM stops accepting and finishes the requests in flight (``drain``); an
optional API key (``Authorization: Bearer``) for use beyond loopback.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
import queue
import select
import socket
import threading
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from .serve_inference import answer
from .serve_protocol import BadRequest, Limits, Request, parse_chat, parse_completion

log = logging.getLogger(__name__)
MAX_BODY_BYTES = 16 * 1024 * 1024
READ_TIMEOUT_S = 60  # a client that sends less than its Content-Length is dropped after this long


class Cancelled(Exception):
    """The client went away before its answer was computed."""


@dataclass
class Job:
    request: Request
    future: Future = field(default_factory=Future)
    cancelled: threading.Event = field(default_factory=threading.Event)


class Batcher:
    """Merges the prompts of requests that arrive together and ask for the same kind of work into one model call."""

    def __init__(self, backend, max_batch: int = 64):
        self.backend, self.max_batch = backend, max_batch
        self.jobs: queue.Queue = queue.Queue()
        self.calls = 0
        threading.Thread(target=self._loop, daemon=True, name="medr2-serve-batcher").start()

    def submit(self, request: Request) -> Job:
        job = Job(request)
        self.jobs.put(job)
        return job

    def _take(self) -> list[Job]:
        jobs = [self.jobs.get()]
        size = len(jobs[0].request.prompts)
        while size < self.max_batch:
            try:
                job = self.jobs.get_nowait()
            except queue.Empty:
                break
            jobs.append(job)
            size += len(job.request.prompts)
        return jobs

    def _loop(self) -> None:
        while True:  # nothing a request holds can end this loop: every error goes to its request's future
            try:
                jobs = [j for j in self._take() if not self._dropped(j)]
                groups: dict[tuple, list[Job]] = {}
                for job in jobs:
                    groups.setdefault(replace(job.request, prompts=()), []).append(job)
                for group in groups.values():
                    self._run(group)
            except Exception:  # noqa: BLE001 -- logged; the loop (and the server) goes on
                log.exception("batcher: unexpected error")

    @staticmethod
    def _dropped(job: Job) -> bool:
        if job.cancelled.is_set():
            job.future.set_exception(Cancelled())
            return True
        return False

    def _run(self, group: list[Job]) -> None:
        merged = replace(group[0].request, prompts=tuple(p for j in group for p in j.request.prompts))
        try:
            choices, generated = answer(self.backend, merged, lambda: all(j.cancelled.is_set() for j in group))
        except Exception as exc:  # noqa: BLE001 -- retried alone below, so only the failing request fails
            if len(group) == 1:
                group[0].future.set_exception(exc)
                return
            for job in group:
                self._run([job])
            return
        self.calls += 1
        at = 0
        for job in group:
            n = len(job.request.prompts)
            own = [{**c, "index": k} for k, c in enumerate(choices[at: at + n])]
            prompt_tokens = sum(len(p.ids) for p in job.request.prompts)
            job.future.set_result((own, {"prompt_tokens": prompt_tokens,
                                         "completion_tokens": sum(generated[at: at + n]),
                                         "total_tokens": prompt_tokens + sum(generated[at: at + n])}))
            at += n


def _no_constant(name: str):
    raise BadRequest(f"{name} is not a JSON number")


@dataclass(frozen=True)
class Served:
    """What a server answers with: the model, its name and context, and the request limits."""
    backend: object
    model_name: str
    context: int
    limits: Limits = Limits()
    api_key: str | None = None
    max_body: int = MAX_BODY_BYTES


def read_body(headers, rfile, max_body: int):
    """A request's JSON body, or :class:`BadRequest` naming what is wrong with it (its length, its bytes, its
    JSON, a lone surrogate no tokenizer can read); ``BadRequest.close`` says the body was not read whole, so the
    connection must close after the answer."""
    length = headers.get("Content-Length")
    if length is None or not length.strip().isascii() or not length.strip().isdigit():
        raise BadRequest(f"Content-Length must be a whole number of bytes, found {length!r}")
    if int(length) > max_body:
        raise BadRequest(f"the body has {int(length)} bytes; at most {max_body}", close=True)
    raw = rfile.read(int(length))
    if len(raw) != int(length):
        raise BadRequest(f"the body ended after {len(raw)} of its {int(length)} bytes", close=True)
    try:
        body = json.loads(raw, parse_constant=_no_constant)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadRequest(f"the body is not JSON ({exc})") from None
    except RecursionError:
        raise BadRequest("the body's JSON is nested too deeply") from None
    try:  # a lone surrogate ("\ud800") parses as JSON but is no text a tokenizer can read
        json.dumps(body, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise BadRequest("a string in the body holds a lone UTF-16 surrogate: not text") from None
    except RecursionError:
        raise BadRequest("the body's JSON is nested too deeply") from None
    return body


class Handler(BaseHTTPRequestHandler):
    """One connection's requests; what it serves is ``self.server.served`` (a :class:`Served`)."""
    protocol_version = "HTTP/1.1"
    timeout = READ_TIMEOUT_S

    def log_message(self, fmt, *args):
        log.debug("%s " + fmt, self.address_string(), *args)

    def _send(self, status: int, payload: dict) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status: int, message: str) -> None:
        kind = {400: "BadRequestError", 401: "AuthenticationError", 404: "NotFoundError",
                413: "BadRequestError"}.get(status, "InternalServerError")
        self._send(status, {"error": {"message": message, "type": kind, "code": status}})

    def _authorised(self) -> bool:
        api_key = self.server.served.api_key
        if api_key is None:
            return True
        given = self.headers.get("Authorization", "")
        if hmac.compare_digest(given.encode(), f"Bearer {api_key}".encode()):
            return True
        self._error(401, "missing or wrong API key (Authorization: Bearer ...)")
        return False

    def do_GET(self):
        if not self._authorised():
            return
        served = self.server.served
        if self.path.rstrip("/") == "/v1/models":
            self._send(200, {"object": "list", "data": [{"id": served.model_name, "object": "model",
                                                         "owned_by": "medr2", "root": served.model_name,
                                                         "max_model_len": served.context}]})
        else:
            self._error(404, f"no route {self.path}")

    def do_POST(self):
        with self.server.in_flight():
            self._post()

    def _post(self):
        route, served = self.path.rstrip("/"), self.server.served
        if not self._authorised():
            return
        if route not in ("/v1/completions", "/v1/chat/completions"):
            self.close_connection = True
            return self._error(404, f"no route {self.path}")
        chat = route.endswith("chat/completions")
        try:
            parse = parse_chat if chat else parse_completion
            body = read_body(self.headers, self.rfile, served.max_body)
            request = parse(body, served.model_name, served.backend.tokenizer, served.limits, served.context)
        except BadRequest as exc:
            self.close_connection = self.close_connection or exc.close
            return self._error(400, f"bad request: {exc}")
        answered = self._wait(self.server.batcher.submit(request))
        if answered is not None:
            choices, usage = answered
            kind = "chat.completion" if chat else "text_completion"
            self._send(200, {"object": kind, "model": served.model_name, "choices": choices, "usage": usage})

    def _wait(self, job: Job):
        """The job's ``(choices, usage)``; None when the client went away (the job is cancelled) or the answer
        failed (a 500 is sent: a model failure is this request's, not the server's)."""
        while True:
            try:
                return job.future.result(timeout=0.5)
            except FutureTimeout:
                if self._client_gone():
                    job.cancelled.set()
                    self.close_connection = True
                    return None
            except Cancelled:
                self.close_connection = True
                return None
            except Exception as exc:  # noqa: BLE001 -- a model failure is this request's 500, not a dead server
                log.exception("request failed")
                self._error(500, f"{type(exc).__name__}: {exc}")
                return None

    def _client_gone(self) -> bool:
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True


class Server(ThreadingHTTPServer):
    request_queue_size = 128  # the listen backlog (socketserver's default, 5, resets bursts of clients)
    daemon_threads = True  # idle keep-alive connections never hold the process: drain() waits for requests

    def __init__(self, address, served: Served, batcher: Batcher):
        super().__init__(address, Handler)
        self.served, self.batcher = served, batcher
        self.active, self.changed = 0, threading.Condition()

    @contextlib.contextmanager
    def in_flight(self):
        with self.changed:
            self.active += 1
        try:
            yield
        finally:
            with self.changed:
                self.active -= 1
                self.changed.notify_all()

    def drain(self, timeout: float = 600) -> bool:
        """Wait until no request is being answered (after shutdown(): SIGTERM); False if ``timeout`` passed."""
        with self.changed:
            return self.changed.wait_for(lambda: self.active == 0, timeout)


def make_server(backend, model_name: str, host: str = "127.0.0.1", port: int = 8000, max_batch: int = 64,
                limits: Limits = Limits(), api_key: str | None = None, max_body: int = MAX_BODY_BYTES) -> Server:
    served = Served(backend, model_name, int(getattr(backend, "max_length", 0) or 8192), limits, api_key, max_body)
    return Server((host, port), served, Batcher(backend, max_batch))


def start_background(backend, model_name: str, host: str = "127.0.0.1", port: int = 0, max_batch: int = 64, **kw):
    """A server on a free port in a daemon thread: ``(server, base_url)``; ``server.shutdown()`` stops it."""
    server = make_server(backend, model_name, host, port, max_batch, **kw)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://{host}:{server.server_address[1]}/v1"


def check_port(host: str, port: int) -> None:
    """A Medr2Error naming the port when this process cannot listen there (taken, or not a port): checked before a
    model loads, so a mistake costs no load."""
    from ..errors import Medr2Error

    if not 0 <= port <= 65535:
        raise Medr2Error(f"port {port} is not a TCP port (0-65535)")
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds (allow_reuse_address)
        try:
            s.bind((host, port))
        except OSError as exc:
            raise Medr2Error(f"cannot listen on {host}:{port} ({exc.strerror or exc}): stop what listens there or "
                             "choose another port") from None


@contextlib.contextmanager
def serve_process(model: str, port: int, name: str | None = None, batch_size: int = 8, ready_seconds: float = 600,
                  log_path: str | None = None):
    """``medr2 serve`` in its own process (as ``vllm serve`` runs apart from the client) on ``port``; yields the
    base URL once ``/v1/models`` answers and stops the server on exit. A taken port is an error naming it."""
    import subprocess
    import sys
    import time
    import urllib.request

    from ..errors import Medr2Error
    from ..procs import die_with_parent

    check_port("127.0.0.1", port)
    url = f"http://127.0.0.1:{port}/v1"
    out = open(log_path, "ab") if log_path else subprocess.DEVNULL
    proc = subprocess.Popen([sys.executable, "-m", "medr2_hooks.cli.main", "serve", "--model", model, "--name",
                             name or model, "--port", str(port), "--batch_size", str(batch_size)],
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
                    raise Medr2Error(f"medr2 serve --model {model} did not answer at {url} in {ready_seconds} s") \
                        from None
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
