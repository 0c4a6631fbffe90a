"""The lm-eval TaskManager over this repository's ``tasks/`` folder, and task-name validation."""

from __future__ import annotations

import json
from functools import lru_cache

from .. import settings
from ..errors import UnknownNameError


def task_manager(include_defaults: bool = False, metadata: dict | None = None):
    """Our tasks only by default: skips indexing lm-eval's ~14,000 built-in YAML files (~10 s).
    ``metadata`` reaches every task's dataset hook (lm-eval merges it over the YAML metadata)."""
    return _task_manager(include_defaults, json.dumps(metadata or {}, sort_keys=True))


@lru_cache(maxsize=8)
def _task_manager(include_defaults: bool, metadata_json: str):
    from lm_eval.tasks import TaskManager

    return TaskManager(include_path=str(settings.tasks_dir()), include_defaults=include_defaults,
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
