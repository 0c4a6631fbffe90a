"""lm-eval tasks for the user's declared benchmarks, kept under ``$MEDR2_CONFIG_DIR/tasks/<name>/``.

Each declared benchmark gets one task per method, ``<name>_<method>``, written as the shipped tasks are: a YAML
that includes the shipped template (``tasks/direct/_direct_template_yaml`` or ``tasks/medr2/_medr2_template_yaml``,
by absolute path) and names the benchmark and the method's variant. The TaskManager of ``medr2 eval`` and
``medr2 sweep`` reads both folders. lm-eval's own ``--include_path`` takes one folder, so
:func:`lm_eval_folder` gives it one: the shipped tasks when the user has none, else a folder of one-line
``include:`` stubs of every shipped and every user task (rewritten on each call, so it never goes stale).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from .. import settings
from ..fs import atomic_write_text

# method -> (shipped template, the variant its tasks set); the same variants as tasks/medr2/*_<method>.yaml
METHODS = {
    "direct": ("direct/_direct_template_yaml", None),
    "vanilla_rag": ("medr2/_medr2_template_yaml", {"method": "vanilla_rag", "retrievers": ["dense"], "classify": False,
                                                   "reformulate": False, "rerank": False, "cot": False}),
    "llm_amt": ("medr2/_medr2_template_yaml", {"method": "llm_amt", "pipeline": "llm_amt"}),
    "medr2": ("medr2/_medr2_template_yaml", None),
    "medr2_cot": ("medr2/_medr2_template_yaml", {"method": "medr2_cot", "cot_in_first_query": True}),
}


def user_tasks_dir() -> Path:
    return settings.config_dir() / "tasks"


def user_task_files() -> list[Path]:
    """The user's task YAML files (``medr2 benchmark add``, ``medr2 wrap``), sorted."""
    return sorted(user_tasks_dir().glob("**/*.yaml"))


def include_paths(user_files: list[Path] | None = None) -> list[Path]:
    """The folders a TaskManager indexes: the shipped tasks, then the user's (when there are any).
    ``user_files``: the result of ``user_task_files()`` when the caller has it already."""
    files = user_task_files() if user_files is None else user_files
    return [settings.tasks_dir(), *([user_tasks_dir()] if files else [])]


def task_config(benchmark: str, method: str) -> dict:
    template, variant = METHODS[method]
    cfg = {"include": str(settings.tasks_dir() / template), "task": f"{benchmark}_{method}"}
    if method == "direct":
        cfg["metadata"] = {"version": 1.0, "benchmark": benchmark}
    else:
        cfg["dataset_kwargs"] = {"benchmark": benchmark, **({"variant": variant} if variant else {})}
    return cfg


def write_tasks(benchmark: str, origin: str) -> list[str]:
    """One task YAML per method for a registered benchmark; returns the task names."""
    folder = user_tasks_dir() / benchmark
    remove_tasks(benchmark)
    folder.mkdir(parents=True)
    names = []
    for method in METHODS:
        cfg = task_config(benchmark, method)
        head = f"# made by `medr2 benchmark add {origin}`; remove with `medr2 benchmark remove {benchmark}`\n"
        atomic_write_text(folder / f"{cfg['task']}.yaml", head + yaml.safe_dump(cfg, sort_keys=False))
        names.append(cfg["task"])
    return names


def write_task(folder_name: str, cfg: dict, header: str) -> Path:
    """A single user task YAML (``medr2 wrap``)."""
    folder = user_tasks_dir() / folder_name
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{cfg['task']}.yaml"
    atomic_write_text(path, header + yaml.safe_dump(cfg, sort_keys=False, allow_unicode=True))
    return path


def remove_tasks(folder_name: str) -> None:
    folder = user_tasks_dir() / folder_name
    if folder.is_dir():
        shutil.rmtree(folder)


def lm_eval_folder() -> Path:
    """One folder for ``lm_eval --include_path`` that holds every shipped and user task."""
    paths = include_paths()
    if len(paths) == 1:
        return paths[0]
    out = settings.config_dir() / "lm_eval_tasks"
    if out.exists():
        shutil.rmtree(out)
    for root, prefix in ((paths[0], "shipped"), (paths[1], "user")):
        for path in sorted(root.glob("**/*.yaml")):
            stub = out / prefix / path.relative_to(root)
            stub.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(stub, f"include: {path.resolve()}\n")
    return out
