"""The lm-eval TaskManager over this repository's ``tasks/`` folder, task-name validation, and which tasks have a
pre-pass (with the keyword arguments their dataset hook will get)."""

from __future__ import annotations

import json
from functools import lru_cache

from ..errors import UnknownNameError

HOOK = "medr2_hooks.lmeval.retrieval.load_dataset"  # the retrieval tasks' dataset hook: these tasks have a pre-pass


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


def task_configs(names: list[str], metadata: dict | None = None) -> dict[str, dict]:
    """Every task among ``names`` (groups expanded) with its configuration as lm-eval's own loader builds it (YAML
    includes, ``--metadata`` merged as lm-eval does)."""
    from .compat import full_task_config

    manager = check_tasks(names, metadata)
    out: dict[str, dict] = {}

    def visit(name: str) -> None:
        cfg = full_task_config(manager, name)
        members = cfg.get("task")
        if "group" in cfg and isinstance(members, list):
            for member in members:
                visit(member if isinstance(member, str) else member["task"])
            return
        out[name] = cfg

    for name in names:
        visit(name)
    return out


def task_hook_kwargs(names: list[str], metadata: dict | None = None) -> dict[str, dict]:
    """For every retrieval task among ``names`` (groups expanded): the keyword arguments lm-eval will give its
    dataset hook."""
    out: dict[str, dict] = {}
    for name, cfg in task_configs(names, metadata).items():
        hook = cfg.get("custom_dataset")
        if hook is not None and f"{getattr(hook, '__module__', '')}.{getattr(hook, '__name__', '')}" == HOOK:
            out[name] = {**(cfg.get("metadata") or {}), **(cfg.get("dataset_kwargs") or {})}
    return out
