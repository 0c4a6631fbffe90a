"""Credentials never reach a file: every recorded config (run.json, lm-eval results, pre-pass records, W&B)
passes through :func:`redact`, which replaces the value of any credential-like key with a marker, and the user
and password of a URL (``http://user:secret@host/v1``) and credential-like query parameters (``?api_key=…``)
with the same marker. The command line W&B records is redacted the same way (:func:`redacted_argv`), and cache
identities use :func:`public_url`, which drops credentials altogether.

Name an environment variable instead of writing a key into a config: the OpenAI-compatible backend reads
``api_key_env`` (default ``OPENAI_API_KEY``), and a variable's name is safe to record.
"""

from __future__ import annotations

import json
import re
import sys
from contextlib import contextmanager
from typing import Any

REDACTED = "<redacted>"
# api_key, apikey, OPENAI_API_KEY, hf_token, access_token, token, secret, client_secret, password, authorization,
# bearer, credentials -- but not counters such as prompt_tokens or max_new_tokens
_SECRET_KEY = re.compile(
    r"(^|[_-])(api[_-]?key|apikey|secret|password|passwd|authorization|bearer|credentials?|token)$", re.I)
_KEY_VALUE = re.compile(r"(^|,)\s*([^=,\s]+)\s*=([^,]*)")


# scheme://userinfo@ (userinfo: anything up to the last @ before the host's first /, ? or #)
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/?#\s@]*@)")
_QUERY_PARAM = re.compile(r"(?P<sep>[?&;])(?P<key>[^=&;#\s]+)=(?P<value>[^&;#\s]*)")
_QUERY_SECRET = re.compile(r"^(key|sig|signature|auth|x-amz-security-token|x-amz-signature|code)$", re.I)


def is_secret_key(key: object) -> bool:
    return isinstance(key, str) and not key.endswith("_env") and bool(_SECRET_KEY.search(key))


def _secret_param(key: str) -> bool:
    return is_secret_key(key) or bool(_QUERY_SECRET.match(key))


def _redact_urls(text: str) -> str:
    """URLs in ``text`` with their userinfo and credential-like query values replaced by the marker."""
    if "://" not in text:
        return text
    text = _USERINFO.sub(lambda m: f"{m['scheme']}{REDACTED}@", text)
    return _QUERY_PARAM.sub(lambda m: f"{m['sep']}{m['key']}={REDACTED}" if _secret_param(m["key"]) else m.group(0),
                            text)


def public_url(url: str) -> str:
    """``url`` without credentials (user, password, secret query parameters): what a cache identity may hold."""
    from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

    parts = urlsplit(url)
    netloc = parts.netloc.rpartition("@")[2]
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if not _secret_param(k)])
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def has_credentials(url: str) -> bool:
    """Whether ``url`` holds a user, a password or a credential-like query parameter."""
    from urllib.parse import parse_qsl, urlsplit

    parts = urlsplit(url)
    return "@" in parts.netloc or any(_secret_param(k) for k, _ in parse_qsl(parts.query, keep_blank_values=True))


def _redact_key_values(text: str) -> str:
    """``key=value,...`` strings (lm-eval's ``model_args``): secret values replaced."""
    return _KEY_VALUE.sub(lambda m: f"{m.group(1)}{m.group(2)}={REDACTED}" if is_secret_key(m.group(2))
                          else m.group(0), text)


def redact(obj: Any) -> Any:
    """A copy of ``obj`` (dicts, lists, strings) with every credential-like value replaced by ``<redacted>``."""
    if isinstance(obj, dict):  # keys too: a usage table keyed "<model>@<endpoint>" holds a URL in its keys
        return {(redact(k) if isinstance(k, str) else k): (REDACTED if is_secret_key(k) and v not in (None, "")
                                                           else redact(v)) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [redact(v) for v in obj]
    if isinstance(obj, str):
        obj = _redact_urls(obj)
        return _redact_key_values(obj) if "=" in obj else obj
    return obj


def redact_arg(arg: str) -> str:
    """One command-line argument, redacted: a JSON object or list (``--metadata '{…}'``) as JSON, else as text."""
    text = arg.strip()
    if text[:1] in "{[":
        try:
            return json.dumps(redact(json.loads(text)), ensure_ascii=False)
        except json.JSONDecodeError:
            pass
    return redact(arg)


@contextmanager
def redacted_argv():
    """``sys.argv`` redacted for the duration (W&B records the command line when a run starts)."""
    saved = sys.argv
    sys.argv = [redact_arg(a) for a in saved]
    try:
        yield
    finally:
        sys.argv = saved
