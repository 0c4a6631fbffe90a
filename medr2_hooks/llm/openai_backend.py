"""OpenAI-compatible HTTP backend (a served vLLM, or a frontier model's completions endpoint).

``score`` uses the completions API with ``echo=True, logprobs=1, max_tokens=0`` (supported by vLLM and
other OpenAI-compatible servers); endpoints without prompt log-probabilities can still ``generate``.

Credentials: name an environment variable (``api_key_env``, default ``OPENAI_API_KEY``) rather than writing
``api_key`` into a config; either way the key is only sent as a header, and recorded configs are redacted.
A server that cannot be reached, or answers with an error, raises :class:`EndpointError` naming the role
(the caller's usage label), the endpoint and the model.
"""

from __future__ import annotations

import os

from ..errors import Medr2Error
from .backend import Usage, cut_at_stop


class EndpointError(Medr2Error):
    """A served model could not be reached or refused a request."""


class OpenAIBackend:
    def __init__(self, model: str, base_url: str | None = None, api_key: str | None = None, timeout: float = 600,
                 max_length: int = 32768, tokenizer: str | None = None, api_key_env: str = "OPENAI_API_KEY"):
        import requests

        self.session = requests.Session()
        self.base_url = (base_url or os.environ.get("OPENAI_BASE_URL", "http://localhost:8000/v1")).rstrip("/")
        key = api_key or os.environ.get(api_key_env)
        if key:
            self.session.headers["Authorization"] = f"Bearer {key}"
        self.model, self.model_id, self.timeout, self.max_length = model, f"{model}@{self.base_url}", timeout, max_length
        self._tok = None
        if tokenizer:
            from transformers import AutoTokenizer

            self._tok = AutoTokenizer.from_pretrained(tokenizer)
        self.usage = Usage()

    def _post(self, path: str, payload: dict, role: str) -> dict:
        import requests

        url = f"{self.base_url}/{path}"
        try:
            response = self.session.post(url, json={"model": self.model, **payload}, timeout=self.timeout)
            response.raise_for_status()
            return response.json()
        except requests.RequestException as exc:
            reason = (f"HTTP {exc.response.status_code}: {exc.response.text[:200]}" if exc.response is not None
                      else f"{type(exc).__name__}: {exc}")
            raise EndpointError(f"role {role!r}: the OpenAI-compatible endpoint {url} (model {self.model!r}) failed: "
                                f"{reason}. Is the server running (vllm serve ...) at that base_url?") from None

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
        if self._tok is not None and self._tok.chat_template:
            messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]
            return self._tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return f"{system}\n\n{user}" if system else user

    def generate(self, prompts: list[str], max_new_tokens: int, stop: list[str] | None = None,
                 role: str = "generate") -> list[str]:
        body = self._post("completions", {"prompt": prompts, "max_tokens": max_new_tokens, "temperature": 0.0,
                                          **({"stop": stop} if stop else {})}, role)
        texts = [""] * len(prompts)
        for choice in body["choices"]:
            texts[choice["index"]] = cut_at_stop(choice["text"], stop)
        usage = body.get("usage", {})
        self.usage.add(role, len(prompts), usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0))
        return texts

    def score(self, prompts: list[str], continuations: list[str], role: str = "score") -> list[tuple[float, int]]:
        body = self._post("completions", {"prompt": [p + c for p, c in zip(prompts, continuations)], "max_tokens": 0,
                                          "echo": True, "logprobs": 1, "temperature": 0.0}, role)
        out: list[tuple[float, int]] = [(0.0, 0)] * len(prompts)
        for choice in body["choices"]:
            i = choice["index"]
            lp = choice["logprobs"]
            start = len(prompts[i])
            picked = [(tok_lp or 0.0) for off, tok_lp in zip(lp["text_offset"], lp["token_logprobs"]) if off >= start]
            out[i] = (float(sum(picked)), len(picked))
        self.usage.add(role, len(prompts), body.get("usage", {}).get("prompt_tokens", 0))
        return out
