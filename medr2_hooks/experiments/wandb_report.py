"""An experiment's report in W&B: ``medr2 report EXPERIMENT --wandb``.

:func:`log_report_run` logs what ``medr2 report`` rendered as one W&B run of the experiment's group (the group
every run of its sweep, ``wandb agent`` ones included, logs to; job type ``report``): the paper-layout table, the
paper's own cells, the paired statistics, the cost per run and the evidence scores per stage as ``wandb.Table``\\ s,
the figures as images. Offline unless ``WANDB_MODE`` says otherwise, like every run here; ``wandb sync`` uploads it.

:func:`build_report` makes the W&B Report of the experiment (``wandb-workspaces``, the ``reports`` extra): its title
and description, a panel grid over a run set filtered to the experiment's group, one panel per logged table, the
figures in a media panel. It is only an object until :func:`publish` saves it, which needs ``WANDB_MODE=online``
and prints and records its URL in ``results/<experiment>/wandb_report.json``; a test checks the object's blocks.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path

from .. import settings
from ..errors import Medr2Error
from ..fs import read_json, write_json
from ..redact import redact
from .config import Experiment
from .expand import experiment_tag

PROJECT = "medr2"  # the project every evaluation run logs to (lmeval.runner.EvalConfig.wandb_project)
TABLES = ("results", "paper", "paired_statistics", "cost", "evidence")


def _rows(dicts: list[dict]) -> tuple[list[str], list[list]]:
    columns = list(dict.fromkeys(k for d in dicts for k in d))
    return columns, [[d.get(c) for c in columns] for d in dicts]


def report_tables(exp: Experiment, out: Path) -> dict[str, tuple[list[str], list[list]]]:
    """The report's tables as ``{name: (columns, rows)}``, read from what ``medr2 report`` wrote into ``out`` and
    from the run summaries it keeps (empty tables are left out)."""
    from .expand import expand
    from .report import load_runs, paper_table

    tables: dict[str, tuple[list[str], list[list]]] = {}
    with open(out / "table.csv", newline="", encoding="utf-8") as fh:
        results = list(csv.DictReader(fh))
    tables["results"] = _rows(results)
    if exp.paper_table:
        cells, _ = paper_table(exp.paper_table)
        wanted = set(exp.benchmarks) | {"average"}
        tables["paper"] = _rows([{k: c[k] for k in ("window", "model", "method", "benchmark", "value")}
                                 for c in cells if c["benchmark"] in wanted])
    stats = read_json(out / "stats.json") if (out / "stats.json").is_file() else []
    if stats:
        tables["paired_statistics"] = _rows(stats)
    runs = expand(exp)
    done = load_runs(runs)
    cost = [{"run": r.name, "metric": done[r.name]["metric"], "score": done[r.name]["score"],
             "invalid": done[r.name].get("invalid"), "wall_seconds": done[r.name].get("wall_seconds"),
             "prepass_seconds": done[r.name].get("prepass_seconds"), "model_calls": done[r.name].get("model_calls"),
             "prompt_tokens": done[r.name].get("prompt_tokens")} for r in runs if r.name in done]
    if cost:
        tables["cost"] = _rows(cost)
    evidence = [{"run": r.name, "stage": stage, **{m: v for m, v in scores.items() if m != "items"}}
                for r in runs if r.name in done
                for stage, scores in ((done[r.name].get("evidence") or {}).get("stages") or {}).items()]
    if evidence:
        tables["evidence"] = _rows(evidence)
    return tables


def figure_files(out: Path) -> list[Path]:
    return sorted(out.glob("*.png"))


def log_report_run(exp: Experiment, out: Path) -> dict:
    """Log the rendered report as a W&B run of the experiment's group; ``{"run_dir", "run_id", "tables",
    "figures"}`` (the run's files are in ``run_dir``)."""
    import wandb

    tables, figures = report_tables(exp, out), figure_files(out)
    folder = settings.results_dir()
    folder.mkdir(parents=True, exist_ok=True)
    run = wandb.init(project=PROJECT, group=exp.name, job_type="report", name=f"{exp.name}__report",
                     tags=[experiment_tag(exp.name), "report"], dir=str(folder),
                     mode=os.environ.get("WANDB_MODE", "offline"), config={"experiment": redact(exp.to_json())},
                     reinit="create_new")
    try:
        run.log({name: wandb.Table(columns=cols, data=rows) for name, (cols, rows) in tables.items()})
        run.log({f"figure/{path.stem}": wandb.Image(str(path)) for path in figures})
        record = {"run_dir": run.dir, "run_id": run.id, "tables": list(tables),
                  "figures": [f"figure/{p.stem}" for p in figures]}
    finally:
        run.finish()
    return record


def build_report(exp: Experiment, logged: dict, entity: str | None = None, project: str = PROJECT):
    """The W&B Report of the experiment (built, not saved): title, description, a panel grid over the experiment's
    group with one panel per logged table and a media panel of the figures."""
    try:
        import wandb_workspaces.reports.v2 as wr
    except ImportError:
        raise Medr2Error("W&B reports need the wandb-workspaces package: pip install -e \".[reports]\"") from None

    panels = [wr.WeavePanelSummaryTable(table_name=name) for name in logged["tables"]]
    if logged["figures"]:
        panels.append(wr.MediaBrowser(title="figures", media_keys=logged["figures"], num_columns=2))
    runset = wr.Runset(entity=entity or "", project=project, name=exp.name, filters=f"Group == '{exp.name}'")
    blocks = [wr.H1(text=exp.name), wr.P(text=exp.description or ""),
              wr.P(text=f"Runs of W&B group {exp.name!r}: the evaluation runs of `medr2 sweep {exp.name}` and the "
                        "report run that holds these tables (results, the paper's cells, paired statistics, cost, "
                        "evidence per stage) and figures."),
              wr.PanelGrid(runsets=[runset], panels=panels)]
    return wr.Report(entity=entity or "", project=project, title=f"Med-R² — {exp.name}",
                     description=exp.description or "", blocks=blocks)


def publish(exp: Experiment, out: Path, logged: dict, entity: str | None = None) -> str:
    """Save the Report to W&B (online only) and record its URL in ``out/wandb_report.json``."""
    if os.environ.get("WANDB_MODE", "offline") != "online":
        raise Medr2Error("a W&B Report is saved online: set WANDB_MODE=online (and log in), or use "
                         "--wandb_report_dry_run to build it without saving")
    report = build_report(exp, logged, entity)
    report.save()
    write_json(out / "wandb_report.json", {"url": report.url, "run_id": logged["run_id"]}, ascii=True)
    return report.url
