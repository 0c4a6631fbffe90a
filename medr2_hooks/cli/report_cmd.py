"""``medr2 report``: render an experiment's results (tables, statistics, costs, figures) into results/<name>/."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="an experiment name in experiments/ or a YAML path")
    parser.add_argument("--force", action="store_true",
                        help="render even when fewer runs have results here than the existing report holds")
    parser.add_argument("--allow-subset", "--allow_subset", dest="allow_subset", action="store_true",
                        help="put runs that evaluated part of a benchmark into the cells of an experiment without a "
                        "limit (marked as subsets; by default that is an error)")


def run(args: argparse.Namespace) -> int:
    from ..experiments.config import load_experiment
    from ..experiments.report import render

    out = render(load_experiment(args.config), force=args.force, allow_subset=args.allow_subset)
    print(f"report: {out / 'report.md'}")
    return 0
