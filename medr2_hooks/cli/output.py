"""``--json`` output that always parses: while a command runs with ``--json``, everything it or a library
prints (transformers prints "[INFO] Running in WANDB offline mode" at import, the JVM logs to stdout) goes to
stderr, and the JSON document alone reaches stdout when the command ends."""

from __future__ import annotations

import io
import json
import os
import sys
from contextlib import contextmanager


@contextmanager
def json_stdout(args):
    """Route stdout to stderr for the command; ``emit_json`` collects the document written at the end."""
    if not getattr(args, "json", False):
        yield
        return
    args.json_out = io.StringIO()
    real = sys.stdout
    real.flush()
    try:
        fd = real.fileno()
    except (AttributeError, OSError, io.UnsupportedOperation):
        fd = None  # a captured or in-memory stdout: no file descriptor to route
    saved = os.dup(fd) if fd is not None else None
    if saved is not None:
        os.dup2(sys.stderr.fileno(), fd)
    sys.stdout = sys.stderr
    try:
        yield
    finally:
        sys.stderr.flush()
        sys.stdout = real
        if saved is not None:
            os.dup2(saved, fd)
            os.close(saved)
        real.write(args.json_out.getvalue())
        real.flush()


def emit_json(args, obj, indent: int | None = 1) -> None:
    """Write the command's JSON document (to stdout once the command ends). It always parses: a float that is not
    finite (JSON has no NaN) is written as null, and a string that is not valid Unicode (a lone surrogate read from
    a user's id) is written escaped, as ``\\ud800``, instead of losing the whole document at output."""
    out = getattr(args, "json_out", None) or sys.stdout
    try:
        text = json.dumps(obj, indent=indent, ensure_ascii=False, default=str, allow_nan=False)
    except ValueError:
        text = json.dumps(_finite(obj), indent=indent, ensure_ascii=False, default=str, allow_nan=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(_finite(obj), indent=indent, ensure_ascii=True, default=str, allow_nan=False)
    out.write(text + "\n")


def _finite(obj):
    """``obj`` with every non-finite float as None."""
    import math

    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj
