"""The lm-eval TaskManager over this repository's ``tasks/`` folder, and task-name validation."""

from __future__ import annotations

import json
from functools import lru_cache

from ..errors import UnknownNameError


def task_manager(include_defaults: bool = False, metadata: dict | None = None):
    """Our tasks only by default: skips indexing lm-eval's ~14,000 built-in YAML files (~10 s).
    ``metadata`` reaches every task's dataset hook (lm-eval merges it over the YAML metadata)."""
    from .usertasks import include_paths, sync, user_task_files

    sync()  # a declared benchmark's tasks follow the registries
    files = user_task_files()
    paths = include_paths(files)
    # the user's task files are part of the key: a benchmark registered since the last call is seen
    user = tuple((str(p), p.stat().st_mtime_ns) for p in files)
    return _task_manager(include_defaults, json.dumps(metadata or {}, sort_keys=True), tuple(map(str, paths)), user)


@lru_cache(maxsize=8)
def _task_manager(include_defaults: bool, metadata_json: str, paths: tuple[str, ...], _user_files: tuple):
    from lm_eval.tasks import TaskManager

    return TaskManager(include_path=list(paths), include_defaults=include_defaults,
                       metadata=json.loads(metadata_json) or None)


def check_tasks(names: list[str], metadata: dict | None = None):
    """The TaskManager that knows every name, or UnknownNameError listing ours.

    Built-in lm-eval task names (e.g. ``medqa_4options``) are accepted too, so a run can compare against them.
    """
    ours = task_manager(metadata=metadata)
    if all(name in ours.all_tasks for name in names):
        return ours
    full = task_manager(include_defaults=True, metadata=metadata)
    unknown = [n for n in names if n not in full.all_tasks]
    if unknown:
        raise UnknownNameError("task", unknown[0], ours.all_tasks)
    return full
