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
            module, cls = BACKENDS[kind].split(":")
            self._loaded[key] = getattr(import_module(module), cls)(**spec)
        return self._loaded[key]

    def usage(self) -> dict:
        return {getattr(b, "model_id", k): b.usage.to_json() for k, b in self._loaded.items()}
