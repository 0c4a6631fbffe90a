"""``medr2 models path NAME``: the local folder of an embedded model (converting it on first use)."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    path = sub.add_parser("path", help="print the local folder for a model name",
                          description="e.g. lm_eval --model hf --model_args "
                          "pretrained=$(medr2 models path embedded:gemma-270m) ...")
    path.add_argument("name", help="embedded:gemma-270m, embedded:minilm, a hub id or a path")
    sub.add_parser("list", help="list the embedded model names")


def run(args: argparse.Namespace) -> int:
    from ..llm import embedded

    if args.action == "list":
        for key in embedded.EMBEDDED:
            print(embedded.PREFIX + key)
        return 0
    print(embedded.resolve(args.name))
    return 0
