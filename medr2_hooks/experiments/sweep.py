"""Run an experiment's runs in order; skip those with results (a ``run.json`` in the run folder, or the run's
summary in ``results/<experiment>/runs/``); record failures and go on.

State of the sweep lives in ``results/<experiment>/sweep.json`` (updated after every run): per run its status
(``done``, ``skipped`` — results already there, ``failed`` with the error), wall seconds and results folder. Each
update changes only its run's entry, under a file lock, so ``--run NAME`` sweeps (``wandb agent`` processes on one
host, or on several sharing the results folder) never lose each other's entries.
``wandb_sweep_spec`` writes a W&B grid sweep over the same run names, so ``wandb agent`` processes on many
machines each execute ``medr2 sweep <config> --run <name>``.
"""

from __future__ import annotations

import json
import time
import traceback
from pathlib import Path

from .. import settings
from ..fs import safe_component, write_json
from .expand import Run


def run_dir(run: Run) -> Path:
    return settings.results_dir() / "runs" / safe_component(run.name, "run name")


def summary_path(run: Run) -> Path:
    """The run's committed summary (``medr2 report`` writes it from the run folder): what the report needs when
    the run folder, which git does not keep, is on another machine."""
    return settings.results_dir() / safe_component(run.experiment,
                                                   "experiment name") / "runs" / f"{run_dir(run).name}.json"


def read_json_file(path: Path, needs: str) -> dict | None:
    """The JSON object in ``path`` holding key ``needs``; None when absent, and None with a warning naming the file
    when it is unreadable (a damaged or hand-edited run record or summary counts as no results, never a crash)."""
    import logging

    if not path.is_file():
        return None
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        logging.getLogger(__name__).warning("%s is unreadable (%s): treated as missing", path, exc)
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get(needs), dict):
        logging.getLogger(__name__).warning("%s has no %r object: treated as missing", path, needs)
        return None
    return obj


def summary_tasks(run: Run) -> tuple[str, ...]:
    """The task names a committed summary of ``run`` may carry: its task, and for a letter-scored ablation the name
    it ran under before the method registry (``<benchmark>_medr2`` with the ablation's switches as its method
    override, which the expansion always set: the same settings as the registry's ``<benchmark>_<ablation>``)."""
    if run.method.startswith("ablation_") and run.scoring == "letters":
        return run.task, f"{run.benchmark}_medr2"
    return (run.task,)


def read_summary(run: Run) -> dict | None:
    """The run's committed summary, when it is readable and of this run's task (a summary of another task, e.g.
    made before the cell's scoring changed, counts as missing)."""
    found = read_json_file(summary_path(run), "summary")
    return found if found is not None and found.get("task") in summary_tasks(run) else None


def read_record(run: Run) -> dict | None:
    """The run folder's ``run.json`` when it holds this run's task's results."""
    found = read_json_file(run_dir(run) / "run.json", "results")
    return found if found is not None and run.task in found["results"] else None


def has_results(run: Run) -> Path | None:
    """Where the run's readable results are (its run folder's ``run.json``, else its summary), or None."""
    if read_record(run) is not None:
        return run_dir(run) / "run.json"
    return summary_path(run) if read_summary(run) is not None else None


def execute(run: Run, wandb: bool = True) -> dict:
    from ..errors import Medr2Error
    from ..lmeval.runner import EvalConfig, run_eval

    checkpoint = run.resolved.get("checkpoint")
    if checkpoint and not (Path(checkpoint) / "config.json").is_file():
        how = f"; train it first: {run.resolved['train']}" if "train" in run.resolved else ""
        raise Medr2Error(f"{run.name}: no fine-tuned checkpoint at {checkpoint}{how}")

    cfg = EvalConfig(tasks=[run.task], model=run.lm_model, model_args=run.model_args, limit=run.limit,
                     metadata=run.metadata, run_name=run.name, wandb=wandb, wandb_group=run.experiment,
                     wandb_tags=run.tags, gen_kwargs=run.gen_kwargs, apply_chat_template=run.apply_chat_template)
    return run_eval(cfg)["run_record"]


def record_run(state_path: Path, experiment: str, run_name: str, entry: dict) -> dict:
    """Set one run's entry in the sweep state, keeping every other run's (read, update and atomic write under an
    exclusive lock of ``sweep.json.lock``); returns the state written. An unreadable state file is kept aside."""
    import fcntl

    state_path.parent.mkdir(parents=True, exist_ok=True)
    with open(state_path.with_name(state_path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            state = json.loads(state_path.read_text(encoding="utf-8")) if state_path.is_file() else {}
        except (json.JSONDecodeError, UnicodeDecodeError):
            state_path.replace(state_path.with_name(f"{state_path.name}.damaged"))
            state = {}
        if not isinstance(state.get("runs"), dict):
            state = {"experiment": experiment, "runs": {}}
        state["runs"][run_name] = entry
        write_json(state_path, state, ascii=True)
    return state


def sweep(name: str, runs: list[Run], wandb: bool = True, execute_run=execute, log=print) -> dict:
    state_path = settings.results_dir() / name / "sweep.json"
    state: dict = {"experiment": name, "runs": {}}
    for i, run in enumerate(runs, 1):
        entry = {"task": run.task, "model": run.model, "method": run.method, "benchmark": run.benchmark,
                 "window": run.window, "results": str(run_dir(run))}
        found = has_results(run)
        if found is not None:
            entry["status"] = "skipped"
            log(f"[{i}/{len(runs)}] {run.name}: results exist ({found}), skipped")
        else:
            log(f"[{i}/{len(runs)}] {run.name}")
            started = time.perf_counter()
            try:
                execute_run(run, wandb)
                entry["status"] = "done"
            except Exception as exc:  # noqa: BLE001 - a failed run is recorded with its error; the sweep goes on
                entry.update(status="failed", error=f"{type(exc).__name__}: {exc}",
                             traceback=traceback.format_exc(limit=5))
                log(f"  failed: {entry['error']}")
            entry["wall_seconds"] = round(time.perf_counter() - started, 2)
        state = record_run(state_path, name, run.name, entry)
    return state


def wandb_sweep_spec(name: str, config_path: str, runs: list[Run]) -> dict:
    return {"name": name, "method": "grid", "program": "medr2",
            "command": ["medr2", "sweep", config_path, "${args}"],
            "parameters": {"run": {"values": [r.name for r in runs]}}}
