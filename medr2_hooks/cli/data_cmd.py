"""``medr2 data info [--json]``: per benchmark, the evaluation and demonstration counts."""

from __future__ import annotations

import argparse

from .output import emit_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    info = sub.add_parser("info", help="evaluation / demonstration counts per benchmark")
    info.add_argument("benchmarks", nargs="*", help="benchmark names (default: all)")
    info.add_argument("--json", action="store_true", help='print {"<benchmark>": {"eval": n, "demos": n}}')
    info.add_argument("--source", default="local", choices=["local", "hub"], help="where to read the data")
    info.add_argument("--data-dir", help="benchmark folder (default: MEDR2_DATA_DIR or ../shared/data)")


def run(args: argparse.Namespace) -> int:
    from .. import data, settings
    from ..errors import DataError

    names = args.benchmarks or data.names()
    counts = {}
    for name in names:
        try:
            pools = data.pools(name, source=args.source, data_dir=args.data_dir)
        except DataError as exc:  # e.g. RareArena: its case files are not in the mirror
            if args.benchmarks:
                raise
            counts[name] = {"eval": None, "demos": None, "missing": str(exc)}
            continue
        counts[name] = {"eval": len(pools.eval), "demos": len(pools.demos)}
        mismatched = sum(bool(r.meta.get("inline_mismatch")) for r in pools.eval + pools.demos)
        if mismatched:  # MedXpertQA: rows whose inline option block differs from the options field (which wins)
            counts[name]["inline_mismatch"] = mismatched
    if args.json:
        emit_json(args, counts, indent=2)
        return 0
    where = (args.data_dir or settings.data_dir()) if args.source == "local" else "hub"
    print(f"data: {where}")
    print(f"{'benchmark':<14} {'eval':>6} {'demos':>6}  description")
    for name, c in counts.items():
        if c["eval"] is None:
            print(f"{name:<14} {'-':>6} {'-':>6}  {data.benchmark(name).title}: not in the mirror")
            continue
        note = f" ({c['inline_mismatch']} rows' inline options differ from the options field, which is used)" \
            if c.get("inline_mismatch") else ""
        print(f"{name:<14} {c['eval']:>6} {c['demos']:>6}  {data.benchmark(name).title}{note}")
    return 0
