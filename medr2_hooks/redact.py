"""Credentials never reach a file: every recorded config (run.json, lm-eval results, pre-pass records, W&B)
passes through :func:`redact`, which replaces the value of any credential-like key with a marker.

Name an environment variable instead of writing a key into a config: the OpenAI-compatible backend reads
``api_key_env`` (default ``OPENAI_API_KEY``), and a variable's name is safe to record.
"""

from __future__ import annotations

import re
from typing import Any

REDACTED = "<redacted>"
# api_key, apikey, OPENAI_API_KEY, hf_token, access_token, token, secret, client_secret, password, authorization,
# bearer, credentials -- but not counters such as prompt_tokens or max_new_tokens
_SECRET_KEY = re.compile(
    r"(^|[_-])(api[_-]?key|apikey|secret|password|passwd|authorization|bearer|credentials?|token)$", re.I)
_KEY_VALUE = re.compile(r"(^|,)\s*([^=,\s]+)\s*=([^,]*)")


def is_secret_key(key: object) -> bool:
    return isinstance(key, str) and not key.endswith("_env") and bool(_SECRET_KEY.search(key))


def _redact_key_values(text: str) -> str:
    """``key=value,...`` strings (lm-eval's ``model_args``): secret values replaced."""
    return _KEY_VALUE.sub(lambda m: f"{m.group(1)}{m.group(2)}={REDACTED}" if is_secret_key(m.group(2))
                          else m.group(0), text)


def redact(obj: Any) -> Any:
    """A copy of ``obj`` (dicts, lists, strings) with every credential-like value replaced by ``<redacted>``."""
    if isinstance(obj, dict):
        return {k: (REDACTED if is_secret_key(k) and v not in (None, "") else redact(v)) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [redact(v) for v in obj]
    if isinstance(obj, str) and "=" in obj:
        return _redact_key_values(obj)
    return obj
