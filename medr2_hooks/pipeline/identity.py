"""What identifies a model in cache keys and run records, computed without loading it."""

from __future__ import annotations


def backend_identity(spec: dict) -> str:
    kind, model = spec.get("backend", "hf"), spec["model"]
    if kind == "hf":
        from ..llm.embedded import resolve
        from ..retrieve.encoders import weights_revision

        return f"hf:{model}@{weights_revision(resolve(model))}"
    if kind == "openai":
        from ..redact import public_url

        return f"openai:{model}@{public_url(spec['base_url']) if spec.get('base_url') else 'default'}"
    return f"{kind}:{model}@{spec.get('revision', 'main')}"
