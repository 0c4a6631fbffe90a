"""What identifies a model in cache keys and run records.

A local model is its name and weights revision, computed without loading it. A served model (``openai``) is its name,
its endpoint without credentials and the hash of any ``server_args`` its spec declares (``--max-model-len``, YaRN);
its *live* identity adds what the server itself reports at ``/v1/models`` (``root``, ``max_model_len``), read when
the role is first used, so generations made under one server setting are never reused under another.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from functools import lru_cache


def backend_identity(spec: dict, live: bool = False) -> str:
    kind, model = spec.get("backend", "hf"), spec["model"]
    if kind == "hf":
        from ..llm.embedded import resolve
        from ..llm.local import weights_revision

        return f"hf:{model}@{weights_revision(resolve(model))}"
    if kind == "openai":
        from ..cache import stable_hash
        from ..redact import public_url

        out = f"openai:{model}@{public_url(spec['base_url']) if spec.get('base_url') else 'default'}"
        if spec.get("server_args"):
            out += f"#args={stable_hash(spec['server_args'])[:12]}"
        if live:
            reported = served_settings(spec.get("base_url") or os.environ.get("OPENAI_BASE_URL", "http://localhost:8000/v1"),
                                       model, _key(spec))
            out += "#" + json.dumps(reported, sort_keys=True, separators=(",", ":"))
        return out
    if kind == "vllm":  # a local folder (a CPU twin's embedded model) by its content, as hf names it
        from ..llm.local import local_folder, weights_revision

        folder = local_folder(model)
        if folder:
            return f"vllm:{model}@{weights_revision(folder)}"
    return f"{kind}:{model}@{spec.get('revision', 'main')}"


def _key(spec: dict) -> str | None:
    return spec.get("api_key") or os.environ.get(spec.get("api_key_env", "OPENAI_API_KEY"))


@lru_cache(maxsize=64)
def served_settings(base_url: str, model: str, api_key: str | None = None) -> dict:
    """What an OpenAI-compatible server says about ``model`` (vLLM: ``root``, ``max_model_len``); an error naming
    the endpoint when it cannot be read."""
    import requests

    from ..llm.openai_backend import EndpointError
    from ..redact import public_url

    url = f"{base_url.rstrip('/')}/models"
    try:
        response = requests.get(url, headers={"Authorization": f"Bearer {api_key}"} if api_key else {}, timeout=30)
        response.raise_for_status()
        entries = response.json().get("data") or []
    except (requests.RequestException, ValueError) as exc:
        raise EndpointError(f"cannot read {public_url(url)} to identify the served model {model!r} ({exc}); is the "
                            "server running?") from None
    entry = next((e for e in entries if isinstance(e, dict) and e.get("id") == model), None)
    if entry is None:
        raise EndpointError(f"{public_url(url)} does not serve {model!r} (it serves "
                            f"{', '.join(str(e.get('id')) for e in entries if isinstance(e, dict))})")
    return {k: entry.get(k) for k in ("root", "max_model_len")}


class RoleIds(Mapping):
    """Each role's identity, computed when a stage first needs it (a served role's live identity asks its server,
    so roles a method never uses need no server)."""

    def __init__(self, role_spec, roles: tuple[str, ...]):
        self._spec, self._roles, self._ids = role_spec, roles, {}

    def __getitem__(self, role: str) -> str:
        if role not in self._ids:
            if role not in self._roles:
                raise KeyError(role)
            from ..llm.openai_backend import EndpointError

            try:
                self._ids[role] = backend_identity(self._spec(role), live=True)
            except EndpointError as exc:
                raise EndpointError(f"role {role!r}: {exc}") from None
        return self._ids[role]

    def __iter__(self):
        return iter(self._roles)

    def __len__(self) -> int:
        return len(self._roles)

    def used(self) -> dict[str, str]:
        """The identities of the roles used so far (what a pre-pass record keeps)."""
        return dict(self._ids)
