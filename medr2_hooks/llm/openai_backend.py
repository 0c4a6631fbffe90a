"""OpenAI-compatible HTTP backend (a served vLLM, or a frontier model's completions endpoint).

``score`` uses the completions API with ``echo=True, logprobs=1, max_tokens=0`` (supported by vLLM and
other OpenAI-compatible servers); endpoints without prompt log-probabilities can still ``generate``.

A closed-set menu (:mod:`medr2_hooks.llm.closed_set`) whose labels are one token each is read in one request per
prompt: ``max_tokens: 1`` with the next token's ``top_logprobs`` (``logprobs: k`` on completions, ``logprobs: true,
top_logprobs: k`` on chat), as :meth:`next_token_logprobs`. vLLM computes a request that asks for *prompt*
log-probabilities without its prefix cache, so scoring each label as its own ``echo`` sequence would compute the
prompt once per label (9 times for the evidence leveler, 16 for the document typer); the next-token distribution
keeps the cache and costs one prefill. ``top_logprobs`` (default 20, vLLM's ``max_logprobs``) bounds what the
server returns: a label outside it gets the k-th log-probability (an upper bound), counted in the usage.

Credentials: name an environment variable (``api_key_env``, default ``OPENAI_API_KEY``) rather than writing
``api_key`` into a config; either way the key is only sent as a header, and recorded configs are redacted.
A server that cannot be reached, or answers with an error, raises :class:`EndpointError` naming the role
(the caller's usage label), the endpoint and the model.

``api: chat`` sends each prompt as one user message to ``/chat/completions`` instead (frontier models such as
GPT-4o have no completions endpoint: the RareArena judge); such a backend generates but cannot ``score``.

Throughput: a call's prompts go out as requests of ``request_batch`` prompts, ``concurrency`` of them in flight
at once (set per role in its backend spec), so a ``vllm serve`` endpoint's continuous batching stays full.
Transient failures (connection errors, timeouts, HTTP 429 and 5xx) are retried ``max_retries`` times with
exponential backoff; anything else fails at once.
"""

from __future__ import annotations

import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from ..redact import REDACTED, public_url, redact
from .backend import Usage, cut_at_stop, menu_logprobs
from .reach import EndpointError, check_endpoint


class OpenAIBackend:
    def __init__(self, model: str, base_url: str | None = None, api_key: str | None = None, timeout: float = 600,
                 max_length: int = 32768, tokenizer: str | None = None, api_key_env: str = "OPENAI_API_KEY",
                 concurrency: int = 4, request_batch: int = 16, max_retries: int = 4, backoff: float = 1.0,
                 server_args: dict | list | str | None = None, api: str = "completions", top_logprobs: int = 20):
        # server_args: how the server was started (vllm serve flags), declared for the role's identity only
        if concurrency < 1 or request_batch < 1 or max_retries < 0:
            raise ValueError("concurrency and request_batch must be >= 1, max_retries >= 0")
        if api not in ("completions", "chat"):
            raise ValueError(f"api must be completions or chat, found {api!r}")
        self.api = api
        self.base_url = (base_url or os.environ.get("OPENAI_BASE_URL", "http://localhost:8000/v1")).rstrip("/")
        key = api_key or os.environ.get(api_key_env)
        from urllib.parse import urlsplit

        # what a message must never show, whatever form a library's error puts it in
        self._secrets = [x for x in (urlsplit(self.base_url).password, key) if x]
        self._headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._local = threading.local()
        self.concurrency, self.request_batch, self.top_logprobs = concurrency, request_batch, top_logprobs
        self.max_retries, self.backoff = max_retries, backoff
        # what records, cache keys, logged samples and messages name: the endpoint without user, password or key
        self.endpoint = public_url(self.base_url)
        self.model, self.model_id = model, f"{model}@{self.endpoint}"
        self.timeout, self.max_length = timeout, max_length
        self._tok = None
        if tokenizer:
            from transformers import AutoTokenizer

            from . import embedded

            if embedded.is_embedded(tokenizer):  # a served embedded model (medr2 serve): its converted folder
                tokenizer = embedded.resolve(tokenizer)

            self._tok = AutoTokenizer.from_pretrained(tokenizer)
        self.usage = Usage()

    @property
    def session(self):
        """One HTTP session per thread (requests' sessions are not shared across threads)."""
        if not hasattr(self._local, "session"):
            import requests

            self._local.session = requests.Session()
            self._local.session.headers.update(self._headers)
        return self._local.session

    def _post(self, path: str, payload: dict, role: str) -> dict:
        import requests

        url = f"{self.base_url}/{path}"
        for attempt in range(self.max_retries + 1):
            try:
                response = self.session.post(url, json={"model": self.model, **payload}, timeout=self.timeout)
                response.raise_for_status()
                return response.json()
            except requests.RequestException as exc:
                status = exc.response.status_code if exc.response is not None else None
                transient = status is None or status == 429 or status >= 500
                if transient and attempt < self.max_retries:
                    time.sleep(self.backoff * 2 ** attempt)
                    continue
                reason = self._scrub(f"HTTP {status}: {exc.response.text[:200]}" if exc.response is not None
                                     else f"{type(exc).__name__}: {exc}")
                tries = f" after {attempt + 1} attempts" if attempt else ""
                raise EndpointError(f"role {role!r}: the OpenAI-compatible endpoint {public_url(url)} "
                                    f"(model {self.model!r}) "
                                    f"failed{tries}: {reason}. Is the server running (vllm serve ...) at that "
                                    "base_url?") from None
        raise AssertionError("unreachable")

    def check_reachable(self, role: str) -> None:
        """Fail now, naming the endpoint, when it cannot be reached or refuses this client (a wrong key):
        :func:`.reach.check_endpoint` with this client's session, before any work depends on it."""
        check_endpoint(self.base_url, f"role {role!r} (model {self.model!r})", session=self.session,
                       timeout=min(self.timeout, 30), scrub=self._scrub)

    def _complete(self, prompts: list[str], payload: dict, role: str) -> tuple[list[dict], dict]:
        """Choices for ``prompts`` in order (``request_batch`` prompts a request — one under ``api: chat`` —,
        ``concurrency`` requests in flight), and the summed usage. Chat choices come back as ``{"index", "text"}``."""
        if self.api == "chat":
            chunks = [[p] for p in prompts]

            def call(chunk: list[str]) -> dict:
                body = self._answer(self._post("chat/completions", {"messages": [{"role": "user", "content": chunk[0]}],
                                                                    **payload}, role), role, "message")
                body["choices"] = [{"index": 0, "text": c["message"].get("content") or "",
                                    "logprobs": c.get("logprobs")} for c in body["choices"][:1]]
                return body
        else:
            chunks = [prompts[i:i + self.request_batch] for i in range(0, len(prompts), self.request_batch)]

            def call(chunk: list[str]) -> dict:
                return self._answer(self._post("completions", {"prompt": chunk, **payload}, role), role, "text")
        if len(chunks) == 1 or self.concurrency == 1:
            bodies = [call(c) for c in chunks]
        else:
            with ThreadPoolExecutor(max_workers=min(self.concurrency, len(chunks))) as pool:
                bodies = list(pool.map(call, chunks))
        choices: list[dict] = []
        usage = {"prompt_tokens": 0, "completion_tokens": 0}
        for chunk, body in zip(chunks, bodies):
            ordered = sorted(body["choices"], key=lambda c: c.get("index", 0))
            if len(ordered) != len(chunk):
                raise EndpointError(f"role {role!r}: {self.endpoint} answered {len(ordered)} choices for "
                                    f"{len(chunk)} prompts")
            choices += ordered
            for k in usage:
                usage[k] += (body.get("usage") or {}).get(k, 0) or 0
        return choices, usage

    def _scrub(self, text: str) -> str:
        """``text`` (an error of a library, a server's answer) with URL credentials and this client's secrets
        replaced by the redaction marker."""
        text = redact(text)
        for secret in self._secrets:
            text = text.replace(secret, REDACTED)
        return text

    def _answer(self, body, role: str, field: str) -> dict:
        """``body`` when it is an OpenAI answer (``choices``: objects with ``index`` and ``field``), else an
        EndpointError naming the endpoint (a proxy's or gateway's own JSON answers 200 without them)."""
        choices = body.get("choices") if isinstance(body, dict) else None
        if not isinstance(choices, list) or not all(
                isinstance(c, dict) and isinstance(c.get("index", 0), int) and
                (isinstance(c.get(field), dict) if field == "message" else isinstance(c.get(field), str))
                for c in choices):
            shown = self._scrub(json.dumps(body)[:200]) if isinstance(body, (dict, list)) else type(body).__name__
            raise EndpointError(f"role {role!r}: {self.endpoint} (model {self.model!r}) answered without OpenAI "
                                f"choices carrying {field!r}: {shown}")
        return body

    def count_tokens(self, texts: list[str]) -> list[int]:
        if self._tok is not None:
            return [len(ids) for ids in self._tok(texts, add_special_tokens=False)["input_ids"]]
        return [max(1, len(t) // 4) for t in texts]  # no tokenizer given: the usual 4 characters a token

    def truncate(self, text: str, max_tokens: int) -> str:
        if self._tok is None:
            return text[: max_tokens * 4]
        ids = self._tok(text, add_special_tokens=False)["input_ids"]
        return text if len(ids) <= max_tokens else self._tok.decode(ids[:max_tokens])

    def chat(self, user: str, system: str | None = None) -> str:
        if self.api == "chat":  # the endpoint applies its own template: the prompt is the user message
            return f"{system}\n\n{user}" if system else user
        if self._tok is not None and self._tok.chat_template:
            messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]
            return self._tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return f"{system}\n\n{user}" if system else user

    def generate(self, prompts: list[str], max_new_tokens: int, stop: list[str] | None = None,
                 role: str = "generate") -> list[str]:
        choices, usage = self._complete(prompts, {"max_tokens": max_new_tokens, "temperature": 0.0,
                                                  **({"stop": stop} if stop else {})}, role)
        self.usage.add(role, len(prompts), usage["prompt_tokens"], usage["completion_tokens"])
        return [cut_at_stop(c["text"], stop) for c in choices]

    def next_token_logprobs(self, prompts: list[str], choices: list[str],
                            role: str = "score") -> list[list[float]] | None:
        """Each choice's log-probability as the next token after each prompt, from one ``max_tokens: 1`` request per
        prompt (None when a choice is more than one token: the caller scores it as a sequence)."""
        keys = self._token_keys(choices)
        if keys is None:
            return None
        payload = {"max_tokens": 1, "temperature": 0.0}
        payload |= {"logprobs": True, "top_logprobs": self.top_logprobs} if self.api == "chat" else \
            {"logprobs": self.top_logprobs}
        answered, usage = self._complete(prompts, payload, role)
        tops = [self._next_token_top(c, role) for c in answered]
        self.usage.add(role, len(prompts), usage["prompt_tokens"], usage["completion_tokens"])
        return menu_logprobs(tops, keys, self.usage)

    def _token_keys(self, choices: list[str]) -> list[set[str]] | None:
        """The names a server may give each choice's token: its text, decoded (vLLM) or as the tokenizer's own
        token (``medr2 serve``); None when a choice is several tokens. Without a tokenizer the text alone."""
        if self._tok is None:
            return [{c} for c in choices]
        ids = self._tok(choices, add_special_tokens=False)["input_ids"]
        if any(len(i) != 1 for i in ids):
            return None
        return [{c, self._tok.decode(i), self._tok.convert_ids_to_tokens(i[0])} for c, i in zip(choices, ids)]

    def _next_token_top(self, choice: dict, role: str) -> dict[str, float]:
        """``{token: logprob}`` of the first generated position of one choice (completions or chat)."""
        lp = choice.get("logprobs")
        try:
            if self.api == "chat":
                return {e["token"]: float(e["logprob"]) for e in lp["content"][0]["top_logprobs"]}
            return {k: float(v) for k, v in lp["top_logprobs"][0].items()}
        except (KeyError, IndexError, TypeError, ValueError, AttributeError):
            raise EndpointError(f"role {role!r}: {self.endpoint} (model {self.model!r}) returned no top "
                                "log-probabilities of the next token (logprobs); a closed-set menu needs "
                                "them") from None

    def score(self, prompts: list[str], continuations: list[str], role: str = "score") -> list[tuple[float, int]]:
        if self.api == "chat":
            raise EndpointError(f"role {role!r}: {self.model!r} is served through chat completions (api: chat), which "
                                "return no prompt log-probabilities: give this role a completions endpoint")
        choices, usage = self._complete([p + c for p, c in zip(prompts, continuations)],
                                        {"max_tokens": 0, "echo": True, "logprobs": 1, "temperature": 0.0}, role)
        out: list[tuple[float, int]] = []
        for prompt, choice in zip(prompts, choices):
            lp = choice["logprobs"]
            picked = [(tok_lp or 0.0) for off, tok_lp in zip(lp["text_offset"], lp["token_logprobs"])
                      if off >= len(prompt)]
            out.append((float(sum(picked)), len(picked)))
        self.usage.add(role, len(prompts), usage["prompt_tokens"])
        return out
