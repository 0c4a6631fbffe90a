"""Locations the harness reads and writes, from environment settings with documented defaults.

- ``MEDR2_DATA_DIR``: local mirror of the benchmark files (layout of ``shared/data/README.md``).
  Default: ``../shared/data`` next to the current directory or next to the repository, when present.
- ``MEDR2_CACHE_DIR``: converted models, indexes and stage caches. Default: ``~/.cache/medr2``.
- ``MEDR2_RESULTS_DIR``: lm-eval results, samples and W&B offline runs. Default: ``./results``.
- ``MEDR2_THREADS``: CPU threads of a pre-pass's scoring kernels (torch, FAISS) when its metadata names none
  (``threads``). Default: the cores this process may run on.
- ``MEDR2_CONFIG_DIR``: the user's own declarations (``medr2 benchmark add``, ``medr2 wrap``) and the lm-eval
  tasks made from them. Default: ``~/.config/medr2``.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def data_dir() -> Path | None:
    """The benchmark mirror, or None when no setting is made and no default exists."""
    env = os.environ.get("MEDR2_DATA_DIR")
    if env:
        return Path(env).expanduser()
    for base in (Path.cwd(), REPO_ROOT):
        candidate = base.parent / "shared" / "data"
        if candidate.is_dir():
            return candidate
    return None


def cache_dir() -> Path:
    path = Path(os.environ.get("MEDR2_CACHE_DIR", Path.home() / ".cache" / "medr2")).expanduser()
    path.mkdir(parents=True, exist_ok=True)
    return path


def results_dir() -> Path:
    return Path(os.environ.get("MEDR2_RESULTS_DIR", "results")).expanduser()


def config_dir() -> Path:
    return Path(os.environ.get("MEDR2_CONFIG_DIR", Path.home() / ".config" / "medr2")).expanduser()


def tasks_dir() -> Path:
    """The lm-eval task folder shipped with the repository (``tasks/``)."""
    env = os.environ.get("MEDR2_TASKS_DIR")
    return Path(env) if env else REPO_ROOT / "tasks"


def threads() -> int:
    """CPU threads for a pre-pass's float kernels when its metadata names none: ``$MEDR2_THREADS``, else the cores
    this process may run on (its CPU affinity; not ``OMP_NUM_THREADS``, which Ray sets to 1 in its workers)."""
    env = os.environ.get("MEDR2_THREADS")
    if env:
        if not env.isascii() or not env.isdigit() or int(env) < 1:
            from .errors import Medr2Error

            raise Medr2Error(f"MEDR2_THREADS must be a whole number >= 1, found {env!r}")
        return int(env)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
