"""The two places this package relies on lm-eval internals, each behind one function.

lm-eval has no public API for either: a task's configuration as its own loader merges it (YAML includes, the
run's ``--metadata``), and a task YAML read with its includes merged but its ``!function`` tags left as text.
``tests/test_lmeval_compat.py`` calls both against the pinned lm-eval, so a release that moves them fails there,
naming the function, rather than deep inside a run.
"""

from __future__ import annotations

from pathlib import Path


def _missing(what: str) -> RuntimeError:
    from importlib.metadata import version

    return RuntimeError(f"lm-eval {version('lm_eval')} no longer has {what}, which medr2_hooks.lmeval.compat uses; "
                        "install the lm-eval version pinned in setup.cfg or update compat.py")


def full_task_config(manager, name: str) -> dict:
    """Task ``name``'s configuration as lm-eval's ``TaskManager`` builds it (includes merged, the manager's
    metadata merged as lm-eval merges ``--metadata``): ``TaskManager._factory._load_full_config``."""
    load = getattr(getattr(manager, "_factory", None), "_load_full_config", None)
    if load is None:
        raise _missing("TaskManager._factory._load_full_config")
    return load(manager.task_index[name])


def raw_task_yaml(path: str | Path) -> dict:
    """A task YAML with its includes merged and ``!function`` tags unresolved: ``lm_eval.tasks._yaml_loader``."""
    try:
        from lm_eval.tasks._yaml_loader import load_yaml
    except ImportError:
        raise _missing("lm_eval.tasks._yaml_loader.load_yaml") from None
    return load_yaml(path, resolve_func=False, recursive=True)
