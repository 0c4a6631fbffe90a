"""A served target's endpoint (lm-eval's ``local-completions`` / ``local-chat-completions``): checked before a run
spends anything, and its loss mid-run reported in one line that names it, credentials redacted."""

from __future__ import annotations

from contextlib import contextmanager

from ..errors import Medr2Error

SERVED = ("local-completions", "local-chat-completions")


def check_reachable(lm_model: str, base_url: str | None) -> None:
    """A served target's endpoint answers (:func:`~medr2_hooks.llm.reach.check_endpoint`, the check the served roles
    get; lm-eval sends the target's key, so only an answer is asked for), or a one-line error naming it."""
    from ..llm.reach import check_endpoint

    if not base_url:
        raise Medr2Error(f"--model {lm_model}: give the target's endpoint as base_url= in --model_args "
                         "(e.g. base_url=http://127.0.0.1:8000/v1/completions)")
    check_endpoint(base_url, f"--model {lm_model}", timeout=10, authorized=False)


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
