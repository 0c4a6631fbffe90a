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
from contextlib import contextmanager
from pathlib import Path

from .errors import DataError, Medr2Error, RowError

_SAFE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+=@-]{0,199}")


def _file_mode() -> int:
    """``0666`` less the umask: what ``open(path, "w")`` would create (mkstemp's own 0600 is not)."""
    return 0o666 & ~_umask()


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


def write_json(path: Path, obj, indent: int | None = 1, sort_keys: bool = False, ascii: bool = False,
               verbatim: bool = False) -> str:
    """Write a JSON record: credentials redacted (keys and values, :func:`medr2_hooks.redact.redact`), atomically,
    with the umask's mode; returns the text written. ``verbatim``: no redaction, for content that must stay byte for
    byte what a model reads (evidence packs: their identity holds no credential, endpoints are public URLs). Every
    JSON file the package writes goes through here (a test walks the code for writes that do not)."""
    import json

    from .redact import redact

    text = json.dumps(obj if verbatim else redact(obj), indent=indent, ensure_ascii=ascii, sort_keys=sort_keys,
                      default=str)
    atomic_write_text(path, text)
    return text


def write_yaml(path: Path, obj, header: str = "") -> None:
    """Write a YAML file (a task, a declared benchmark, a W&B sweep spec): credentials redacted, atomically, after
    ``header`` (comment lines)."""
    import yaml

    from .redact import redact

    atomic_write_text(path, header + yaml.safe_dump(redact(obj), sort_keys=False, allow_unicode=True))


def atomic_save_npy(path: Path, array) -> None:
    import numpy as np

    _atomic_replace(path, lambda fh: np.save(fh, array, allow_pickle=False))


def read_json(path: Path, what: str = "file"):
    """The JSON in ``path`` (UTF-8), or a one-line DataError naming the file (and line) when it is missing, not
    UTF-8 or not JSON (truncated, hand-edited)."""
    import json

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DataError(f"{path}: no such {what}") from None
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise DataError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise RowError(path, exc.lineno, None, f"invalid JSON ({exc.msg} at column {exc.colno})") from None
    except RecursionError:
        raise DataError(f"{path}: JSON nested too deeply") from None


@contextmanager
def replaced_folder(path: Path):
    """A staging folder that replaces ``path`` as a whole when the block ends without an error: the folder then holds
    exactly what the block wrote, never an earlier writer's files beside them; on an error nothing changes. While
    the block runs, a second writer of the same folder (another process) is refused at once, naming the folder."""
    import fcntl
    import shutil

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / f".{path.name}.lock", "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise Medr2Error(f"{path}: another process is writing this folder now (an evaluation of the same "
                             "name): wait for it, or give another --run_name") from None
        staging = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.partial-"))
        try:
            os.chmod(staging, 0o777 & ~_umask())
            yield staging
            old = path.with_name(f".{path.name}.replaced-{os.getpid()}")
            if path.exists():
                os.replace(path, old)
            os.replace(staging, path)
            shutil.rmtree(old, ignore_errors=True)
        finally:
            shutil.rmtree(staging, ignore_errors=True)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
