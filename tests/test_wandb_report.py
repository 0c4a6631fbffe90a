"""An experiment's report in W&B (issue 32): the report logged as an offline run of the experiment's group, read
back from the run's files, and the W&B Report object built offline with its blocks asserted."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from medr2_hooks.cli.main import main
from medr2_hooks.settings import REPO_ROOT


def test_report_wandb_logs_tables_and_figures_and_builds_the_report(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MEDR2_RESULTS_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_MODE", "offline")
    # the committed run summaries are what a fresh clone has: the report regenerates from them
    shutil.copytree(REPO_ROOT / "results" / "table10_embedded" / "runs", tmp_path / "table10_embedded" / "runs")
    assert main(["report", "table10_embedded", "--wandb", "--wandb_report_dry_run"]) == 0
    printed = capsys.readouterr().out
    report = json.loads(printed[printed.index("{"):])
    assert report["blocks"] == ["H1", "P", "P", "PanelGrid"]
    assert report["panels"].count("WeavePanelSummaryTable") >= 3 and report["panels"][-1] == "MediaBrowser"
    assert report["filters"] == "Group == 'table10_embedded'"

    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    files = runs[0] / "files"
    tables = {p.name.split("_")[0]: json.loads(p.read_text()) for p in (files / "media" / "table").glob("*.table.json")}
    assert {"results", "paper", "paired", "cost"} <= set(tables)  # the paper's cells beside ours
    results = tables["results"]
    assert results["columns"][:4] == ["model", "window", "method", "scoring"] and len(results["data"]) == 9
    with open(tmp_path / "table10_embedded" / "table.csv", encoding="utf-8") as fh:
        assert len(fh.read().strip().splitlines()) == len(results["data"]) + 1
    figures = list((tmp_path / "table10_embedded").glob("*.png"))
    assert figures and len(list((files / "media" / "images").rglob("*.png"))) == len(figures)


def test_the_report_run_records_no_credential(tmp_path, monkeypatch):
    """A credential in an experiment's model args or a served model's URL never reaches the report run's files."""
    import dataclasses

    from medr2_hooks.experiments.config import load_experiment
    from medr2_hooks.experiments.wandb_report import log_report_run

    monkeypatch.setenv("MEDR2_RESULTS_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_MODE", "offline")
    shutil.copytree(REPO_ROOT / "results" / "table10_embedded" / "runs", tmp_path / "table10_embedded" / "runs")
    assert main(["report", "table10_embedded"]) == 0
    exp = load_experiment("table10_embedded")
    secret = "PLANTED-SECRET-4242"
    model = dataclasses.replace(exp.models[0], model_args=f"base_url=http://user:{secret}@host/v1,api_key={secret}")
    logged = log_report_run(dataclasses.replace(exp, models=[model]), tmp_path / "table10_embedded")
    written = [p for p in (tmp_path / "wandb").rglob("*") if p.is_file()]
    assert written and Path(logged["run_dir"]).is_dir()
    assert not [p for p in written if secret.encode() in p.read_bytes()]
