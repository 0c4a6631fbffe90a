"""``medr2 prepare``: run the retrieval tasks' pre-pass before evaluation (sharded, or on a Ray cluster)."""

from __future__ import annotations

import argparse

from .output import emit_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = (
        "examples:\n"
        "  medr2 prepare --tasks medqa_usmle_medr2 --limit 20          # then: lm_eval ... --limit 20\n"
        "  medr2 prepare --tasks medr2_qa_medr2 --shard $SLURM_ARRAY_TASK_ID/8   # one Slurm array task each\n"
        "  medr2 prepare --tasks medr2_qa_medr2                         # after the shards: assembles, no model call\n"
        "  medr2 prepare --tasks medqa_usmle_medr2 --ray --workers 8    # a shard per Ray worker, then assembly\n"
        "Packs land in $MEDR2_CACHE_DIR/packs/ (named by a hash of task, method config, role models, index and\n"
        "items); the lm-eval hook of the same task and settings then makes no model call. Shards and nodes must\n"
        "share MEDR2_CACHE_DIR; each shard writes its own stage-cache segment, which the assembly merges. Build\n"
        "the index before the shards (medr2 index build RECIPE)."
    )
    parser.add_argument("--tasks", required=True, help="comma-separated retrieval tasks or groups (medr2 tasks)")
    parser.add_argument("--limit", type=int, help="the first N evaluation items of each task (as lm-eval --limit N)")
    parser.add_argument("--metadata", default="{}", help="the same --metadata JSON the evaluation will get")
    parser.add_argument("--setting", help="the same --setting the evaluation will get (experiments/settings.yaml)")
    parser.add_argument("--shard", help="i/n: prepare items i, i+n, ... only (0 <= i < n); assemble afterwards")
    parser.add_argument("--ray", nargs="?", const="", metavar="ADDRESS",
                        help="run one shard per worker on a Ray cluster (ADDRESS, or a local one), then assemble")
    parser.add_argument("--workers", type=int, help="with --ray: shards (default: the cluster's GPUs, else CPUs)")
    parser.add_argument("--json", action="store_true", help="print {task: {packs, sha256, record, ...}} as JSON")


def run(args: argparse.Namespace) -> int:
    from .eval_cmd import metadata_of
    from ..errors import Medr2Error
    from ..lmeval.registry import task_hook_kwargs
    from ..prepass.prepare import Shard, prepare_tasks, prepare_with_ray

    metadata = metadata_of(args)
    if args.limit is not None:
        if args.limit < 1:
            raise Medr2Error(f"--limit must be >= 1, found {args.limit}")
        metadata["limit"] = args.limit
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    if args.ray is not None and args.shard:
        raise Medr2Error("--ray places the shards itself: give --shard or --ray, not both")
    shard = Shard.parse(args.shard) if args.shard else None
    hooks = task_hook_kwargs(tasks, metadata)  # lm-eval's own merge of each task's YAML and --metadata
    if not hooks:
        raise Medr2Error(f"none of {', '.join(tasks)} has a pre-pass (direct tasks need none)")
    if args.ray is not None:
        out = prepare_with_ray(hooks, args.workers, args.ray or None)
    else:
        out = prepare_tasks(hooks, shard)
    if args.json:
        emit_json(args, out)
    return 0
