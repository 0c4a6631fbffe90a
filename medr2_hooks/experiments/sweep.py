"""Run an experiment's runs in order; skip those with results (a ``run.json`` in the run folder, or the run's
summary in ``results/<experiment>/runs/``); record failures and go on.

State of the sweep lives in ``results/<experiment>/sweep.json`` (written after every run): per run its status
(``done``, ``skipped`` — results already there, ``failed`` with the error), wall seconds and results folder.
``wandb_sweep_spec`` writes a W&B grid sweep over the same run names, so ``wandb agent`` processes on many
machines each execute ``medr2 sweep <config> --run <name>``.
"""

from __future__ import annotations

import json
import time
import traceback
from pathlib import Path

from .. import settings
from ..fs import atomic_write_text, safe_component
from .expand import Run


def run_dir(run: Run) -> Path:
    return settings.results_dir() / "runs" / safe_component(run.name, "run name")


def summary_path(run: Run) -> Path:
    """The run's committed summary (``medr2 report`` writes it from the run folder): what the report needs when
    the run folder, which git does not keep, is on another machine."""
    return settings.results_dir() / safe_component(run.experiment, "experiment name") / "runs" / f"{run_dir(run).name}.json"


def has_results(run: Run) -> Path | None:
    """Where the run's results are (its run folder's ``run.json``, else its summary), or None."""
    return next((p for p in (run_dir(run) / "run.json", summary_path(run)) if p.is_file()), None)


def execute(run: Run, wandb: bool = True) -> dict:
    from ..errors import Medr2Error
    from ..lmeval.runner import EvalConfig, run_eval

    checkpoint = run.resolved.get("checkpoint")
    if checkpoint and not (Path(checkpoint) / "config.json").is_file():
        how = f"; train it first: {run.resolved['train']}" if "train" in run.resolved else ""
        raise Medr2Error(f"{run.name}: no fine-tuned checkpoint at {checkpoint}{how}")

    cfg = EvalConfig(tasks=[run.task], model=run.lm_model, model_args=run.model_args, limit=run.limit,
                     metadata=run.metadata, run_name=run.name, wandb=wandb, wandb_group=run.experiment,
                     wandb_tags=run.tags)
    return run_eval(cfg)["run_record"]


def sweep(name: str, runs: list[Run], wandb: bool = True, execute_run=execute, log=print) -> dict:
    state_path = settings.results_dir() / name / "sweep.json"
    state_path.parent.mkdir(parents=True, exist_ok=True)
    state = {"experiment": name, "runs": {}}
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
        state["runs"][run.name] = entry
        atomic_write_text(state_path, json.dumps(state, indent=1))
    return state


def wandb_sweep_spec(name: str, config_path: str, runs: list[Run]) -> dict:
    return {"name": name, "method": "grid", "program": "medr2",
            "command": ["medr2", "sweep", config_path, "${args}"],
            "parameters": {"run": {"values": [r.name for r in runs]}}}
