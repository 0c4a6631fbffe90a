"""A served target's endpoint (lm-eval's ``local-completions`` / ``local-chat-completions``): checked before a run
spends anything, and its loss mid-run reported in one line that names it, credentials redacted."""

from __future__ import annotations

from contextlib import contextmanager

from ..errors import Medr2Error

SERVED = ("local-completions", "local-chat-completions")


def check_reachable(lm_model: str, base_url: str | None) -> None:
    """A served target's endpoint accepts connections, or a one-line error naming it (credentials redacted)."""
    import socket
    from urllib.parse import urlsplit

    from ..redact import redact

    if not base_url:
        raise Medr2Error(f"--model {lm_model}: give the target's endpoint as base_url= in --model_args "
                         "(e.g. base_url=http://127.0.0.1:8000/v1/completions)")
    parts = urlsplit(base_url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        port = None
    if not parts.hostname or port is None:
        raise Medr2Error(f"--model {lm_model}: base_url {redact(base_url)} is not an http(s) URL with a host")
    try:
        socket.create_connection((parts.hostname, port), timeout=10).close()
    except OSError as exc:
        raise Medr2Error(f"--model {lm_model}: the target's endpoint {redact(base_url)} cannot be reached "
                         f"({exc.strerror or exc}): start its server (vllm serve, medr2 serve) or fix base_url") \
            from None


@contextmanager
def served_target_errors(lm_model: str, base_url: str | None):
    """A served target lost in the middle of a run: one line naming its endpoint, not lm-eval's traceback."""
    if lm_model not in SERVED:
        yield
        return
    import requests

    from ..redact import redact

    try:
        yield
    except requests.exceptions.ConnectionError as exc:
        reason = type(exc.args[0]).__name__ if exc.args else type(exc).__name__
        raise Medr2Error(f"--model {lm_model}: the target's endpoint {redact(str(base_url))} stopped answering "
                         f"({reason}): the run is not scored; start it again once the server is back") from None
