"""``medr2 report``: render an experiment's results (tables, statistics, costs, figures) into results/<name>/."""

from __future__ import annotations

import argparse
import json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = ("From a cluster sweep to a W&B report:\n"
                     "  medr2 sweep experiments/table9.yaml          # every run logs to W&B group table9\n"
                     "  medr2 report table9 --wandb                  # the report itself as a run of that group\n"
                     "  wandb sync results/wandb/offline-run-*       # upload (or run with WANDB_MODE=online)\n"
                     "  WANDB_MODE=online medr2 report table9 --wandb   # also saves a W&B Report, prints its URL")
    parser.add_argument("config", help="an experiment name in experiments/ or a YAML path")
    parser.add_argument("--force", action="store_true",
                        help="render even when fewer runs have results here than the existing report holds")
    parser.add_argument("--allow_subset", action="store_true",
                        help="put runs that evaluated part of a benchmark into the cells of an experiment without a "
                        "limit (marked as subsets; by default that is an error)")
    parser.add_argument("--wandb", action="store_true",
                        help="log the report (tables, figures) as a W&B run of the experiment's group (offline unless "
                        "WANDB_MODE=online, which also saves a W&B Report: needs the reports extra)")
    parser.add_argument("--wandb_report_dry_run", action="store_true",
                        help="with --wandb: build the W&B Report without saving it and print its blocks as JSON")
    parser.add_argument("--entity", help="W&B entity of the Report (default: your default entity)")


def run(args: argparse.Namespace) -> int:
    import os

    from ..experiments.config import load_experiment
    from ..experiments.report import render

    exp = load_experiment(args.config)
    out = render(exp, force=args.force, allow_subset=args.allow_subset)
    print(f"report: {out / 'report.md'}")
    if not args.wandb:
        return 0
    from ..experiments.wandb_report import build_report, log_report_run, publish

    logged = log_report_run(exp, out)
    print(f"W&B run {logged['run_id']}: {logged['run_dir']} ({len(logged['tables'])} tables, "
          f"{len(logged['figures'])} figures)")
    if args.wandb_report_dry_run:
        report = build_report(exp, logged, args.entity)
        print(json.dumps({"title": report.title, "blocks": [type(b).__name__ for b in report.blocks],
                          "panels": [type(p).__name__ for p in report.blocks[-1].panels],
                          "filters": report.blocks[-1].runsets[0].filters}, indent=1))
    elif os.environ.get("WANDB_MODE", "offline") == "online":
        print(f"W&B report: {publish(exp, out, logged, args.entity)}")
    return 0
