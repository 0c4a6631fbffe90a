"""File-system helpers every stage shares: names that may become path components, and atomic writes that
stay correct when several processes write the same file (sharded pre-passes, parallel sweeps).

A user-given name (index recipe ``name``, ``--run_name``, a method's ``method``) becomes a path component
only through :func:`safe_component`: one component of letters, digits and ``._+=@-``, never ``..``, never a
separator, so nothing is written outside ``$MEDR2_CACHE_DIR`` or ``$MEDR2_RESULTS_DIR``.

Permissions: every file the harness writes gets the mode a plain ``open()`` gives it, ``0666`` less the process's
umask (SQLite does the same for the stage cache and its segments), so a cache or results folder shared by a group
is readable by the group exactly when the umask says so (``umask 002`` for a group-writable cache). No file holds a
secret (:mod:`medr2_hooks.redact`), so none needs a stricter mode.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

from .errors import Medr2Error

_SAFE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+=@-]{0,199}")


def _file_mode() -> int:
    """``0666`` less the umask: what ``open(path, "w")`` would create (mkstemp's own 0600 is not)."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


class UnsafeNameError(Medr2Error, ValueError):
    """A name that would not be one safe path component."""


def safe_component(name: object, what: str) -> str:
    """``name`` unchanged when it is one safe path component, else an error naming ``what`` it is."""
    text = str(name)
    if not _SAFE.fullmatch(text) or ".." in text:
        raise UnsafeNameError(
            f"{what} {text!r} is not a safe name: use 1-200 letters, digits and . _ + = @ - "
            "(starting with a letter or digit; no '/', no '..'), since it becomes a folder or file name")
    return text


def _atomic_replace(path: Path, write) -> None:
    """Write through a temporary file unique to this process and call, then rename over ``path``: concurrent
    writers of the same file each rename a complete file (the last one wins), never a torn one."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, _file_mode())
        with os.fdopen(fd, "wb") as fh:
            write(fh)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    _atomic_replace(path, lambda fh: fh.write(text.encode("utf-8")))


def atomic_save_npy(path: Path, array) -> None:
    import numpy as np

    _atomic_replace(path, lambda fh: np.save(fh, array, allow_pickle=False))
