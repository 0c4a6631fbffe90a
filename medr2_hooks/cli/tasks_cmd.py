"""``medr2 tasks [list|path]``: the tasks and groups under ``tasks/`` (for ``lm_eval --include_path``)."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", nargs="?", default="list", choices=["list", "path"],
                        help="list: task and group names; path: the one folder to pass to lm_eval --include_path "
                        "(the shipped tasks, plus your declared benchmarks' and wrapped tasks when you have any)")


def run(args: argparse.Namespace) -> int:
    if args.action == "path":
        from ..lmeval.usertasks import lm_eval_folder

        print(lm_eval_folder())
        return 0
    from ..lmeval.registry import task_manager

    tm = task_manager()
    for name in tm.all_groups:
        print(f"group  {name}")
    for name in tm.all_subtasks:
        print(f"task   {name}")
    return 0
