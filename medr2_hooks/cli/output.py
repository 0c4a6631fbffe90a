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
    """Write the command's JSON document (to stdout once the command ends)."""
    out = getattr(args, "json_out", None) or sys.stdout
    out.write(json.dumps(obj, indent=indent, ensure_ascii=False, default=str) + "\n")
