"""LLM backends and model resolution.

A backend spec is ``{"backend": "hf" | "vllm" | "openai", "model": "<name>", ...options}``; the backend class
is imported only when used (vLLM and HTTP clients stay optional). Identical specs share one instance.
"""

from __future__ import annotations

import json
from importlib import import_module

from ..errors import UnknownNameError

BACKENDS = {
    "hf": "medr2_hooks.llm.hf:HFBackend",
    "vllm": "medr2_hooks.llm.vllm_backend:VLLMBackend",
    "openai": "medr2_hooks.llm.openai_backend:OpenAIBackend",
}
# options that count something: a whole number >= 1 (>= 0 for retries); seconds: a number > 0
_COUNTS = {"batch_size": 1, "concurrency": 1, "request_batch": 1, "max_length": 1, "tensor_parallel_size": 1,
           "max_retries": 0, "top_logprobs": 1}
_SECONDS = ("timeout", "backoff")


def check_spec(spec: dict, where: str) -> None:
    """A ValueError naming ``where`` and the field when a backend spec cannot work: an unknown backend, no model
    name, or a count or duration out of range (``batch_size: -1`` would answer every prompt with nothing)."""
    if not isinstance(spec, dict):
        raise ValueError(f"{where}: expected a backend spec mapping, found {type(spec).__name__}")
    kind = spec.get("backend", "hf")
    if kind not in BACKENDS:
        raise ValueError(f"{where}.backend: {kind!r}; valid: {', '.join(BACKENDS)}")
    if not isinstance(spec.get("model"), str) or not spec["model"].strip():
        raise ValueError(f"{where}.model: a model name is required")
    for key, low in _COUNTS.items():
        value = spec.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < low):
            raise ValueError(f"{where}.{key} must be a whole number >= {low}, found {value!r}")
    for key in _SECONDS:
        value = spec.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0):
            raise ValueError(f"{where}.{key} must be a number of seconds > 0, found {value!r}")


class BackendPool:
    """Loads each distinct backend spec once (several roles usually share one model)."""

    def __init__(self):
        self._loaded: dict[str, object] = {}

    def get(self, spec: dict):
        key = json.dumps(spec, sort_keys=True)
        if key not in self._loaded:
            spec = dict(spec)
            kind = spec.pop("backend", "hf")
            if kind not in BACKENDS:
                raise UnknownNameError("backend", kind, list(BACKENDS))
            check_spec({"backend": kind, **spec}, "backend spec")
            module, cls = BACKENDS[kind].split(":")
            self._loaded[key] = getattr(import_module(module), cls)(**spec)
        return self._loaded[key]

    def usage(self) -> dict:
        return {getattr(b, "model_id", k): b.usage.to_json() for k, b in self._loaded.items()}
