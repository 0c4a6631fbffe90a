"""Whether an OpenAI-compatible endpoint answers, asked once before any work depends on it: one ``GET <api
root>/models`` (vLLM, OpenAI and ``medr2 serve`` all answer it). The one check for a served role (the ``openai``
backend, with its key: a wrong key fails here) and for a served target (lm-eval's ``local-completions`` /
``local-chat-completions``, whose ``base_url`` names the completions route itself and whose key lm-eval sends: there
only an answer is asked for). Errors name the endpoint without credentials (:func:`~medr2_hooks.redact.public_url`)."""

from __future__ import annotations

from ..errors import Medr2Error
from ..redact import public_url, redact

ROUTES = ("/chat/completions", "/completions")


class EndpointError(Medr2Error):
    """A served model could not be reached or refused a request."""


def models_url(base_url: str) -> str:
    """``<api root>/models`` of a base URL given with or without its completions route."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(base_url)
    path = parts.path.rstrip("/")
    for route in ROUTES:
        if path.endswith(route):
            path = path[: -len(route)]
            break
    return urlunsplit((parts.scheme, parts.netloc, f"{path}/models", parts.query, ""))


def check_endpoint(base_url: str, who: str, session=None, timeout: float = 30, authorized: bool = True,
                   scrub=redact) -> None:
    """An :class:`EndpointError` naming ``who`` and the endpoint when ``GET <root>/models`` gets no answer, or (with
    ``authorized``) an answer other than success. ``session``: a ``requests.Session`` carrying the client's key."""
    from urllib.parse import urlsplit

    import requests

    shown = public_url(base_url)
    if urlsplit(base_url).scheme not in ("http", "https") or not urlsplit(base_url).hostname:
        raise EndpointError(f"{who}: base_url {shown} is not an http(s) URL with a host")
    url = models_url(base_url)
    try:
        reply = (session or requests).get(url, timeout=timeout)
    except requests.RequestException as exc:
        reason = getattr(exc.args[0] if exc.args else None, "reason", None) or exc
        raise EndpointError(f"{who}: the endpoint {shown} cannot be reached (GET {public_url(url)}: "
                            f"{scrub(str(reason))}): start its server (vllm serve, medr2 serve) or fix base_url") \
            from None
    if authorized and not reply.ok:
        raise EndpointError(f"{who}: the endpoint {shown} cannot be used (GET {public_url(url)}: HTTP "
                            f"{reply.status_code}: {scrub(reply.text[:200])})")
