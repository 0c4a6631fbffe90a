"""lm-eval tasks for the user's declared benchmarks, kept under ``$MEDR2_CONFIG_DIR/tasks/<name>/``.

A declared benchmark gets the tasks a shipped one gets, generated from the same registries
(:func:`medr2_hooks.lmeval.taskgen.benchmark_files`: every method × scoring, ``<name>_<method>[_gen]``), each
including the shipped template by absolute path. :func:`sync` rewrites them whenever the registry or the templates'
folder has changed since they were written, so they never go stale. The TaskManager of ``medr2 eval`` and
``medr2 sweep`` reads both folders. lm-eval's own ``--include_path`` takes one folder, so :func:`lm_eval_folder`
gives it one: the shipped tasks when the user has none, else a folder of one-line ``include:`` stubs of every
shipped and every user task (rewritten on each call, so it never goes stale).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from .. import settings
from ..fs import atomic_write_text, safe_component, write_yaml

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


MADE_BY = "# made by `medr2 "  # the first line of every task file this module writes (and removes)


def task_files(benchmark: str) -> dict[str, str]:
    """``{file name: text}`` of a declared benchmark's tasks."""
    from .. import data
    from .taskgen import benchmark_files, render

    head = f"{MADE_BY}benchmark add`; remove with `medr2 benchmark remove {benchmark}`\n"
    templates = str(settings.tasks_dir() / "templates")
    return {name: head + render(cfg) for name, cfg in benchmark_files(data.benchmark(benchmark), templates).items()}


def write_tasks(benchmark: str) -> list[str]:
    """One task YAML per method and scoring for a registered benchmark; returns the task names."""
    folder = user_tasks_dir() / benchmark
    remove_tasks(benchmark)
    folder.mkdir(parents=True, exist_ok=True)
    files = task_files(benchmark)
    for name, text in files.items():
        atomic_write_text(folder / name, text)
    return [name.removesuffix(".yaml") for name in files]


def sync() -> None:
    """Rewrite each declared (not wrapped) benchmark's tasks whose files differ from what the registries make now."""
    from ..data.user import declarations

    for name, decl in declarations().items():
        if decl.wraps is not None:
            continue
        folder = user_tasks_dir() / name
        want = task_files(name)
        have = {p.name: p.read_text(encoding="utf-8") for p in folder.glob("*.yaml")} if folder.is_dir() else {}
        if have != want:
            write_tasks(name)


def check_names(name: str, style: str, where: str) -> None:
    """Error when a benchmark ``name`` or a task it would get is a shipped task or group (the user's tasks would
    shadow them: ``name: medr2_qa`` would make ``medr2_qa_medr2`` the user's task) or another registered
    benchmark's task (``x`` and ``x_vanilla`` would both make ``x_vanilla_rag``)."""
    from .. import data, methods
    from ..config import ConfigError
    from .taskgen import shipped_files

    def names(bench: str, bench_style: str) -> set[str]:
        return {bench} | {methods.task_name(bench, m, s, bench_style) for m in methods.task_methods()
                          for s in methods.scorings_for(bench_style)}

    if name in data.BENCHMARKS:
        raise ConfigError(f"{where}: name {name!r} is a built-in benchmark; choose another name")
    own = names(name, style)
    taken = {cfg.get("group") or cfg["task"]: "a shipped task or group" for cfg in shipped_files().values()}
    for other, bench in data.declared_benchmarks().items():
        if other != name:
            taken.update(dict.fromkeys(names(other, bench.style), f"a task of the registered benchmark {other!r}"))
    clash = sorted(own & set(taken))
    if clash:
        raise ConfigError(f"{where}: benchmark name {name!r} would make task {clash[0]!r}, which is "
                          f"{taken[clash[0]]}; choose another name")


def write_task(folder_name: str, cfg: dict, header: str) -> Path:
    """A single user task YAML (``medr2 wrap``); ``header`` starts with :data:`MADE_BY`."""
    assert header.startswith(MADE_BY)
    folder = user_tasks_dir() / safe_component(folder_name, "task folder")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{safe_component(cfg['task'], 'task name')}.yaml"
    write_yaml(path, cfg, header)
    return path


def remove_tasks(folder_name: str) -> None:
    """Delete the task files this module wrote for a benchmark (nothing else), then their folder when empty."""
    folder = user_tasks_dir() / safe_component(folder_name, "benchmark name")
    if not folder.is_dir() or folder.is_symlink():
        return
    for path in folder.glob("*.yaml"):
        if path.is_file() and not path.is_symlink() and path.read_text(encoding="utf-8").startswith(MADE_BY):
            path.unlink()
    if not any(folder.iterdir()):
        folder.rmdir()


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
