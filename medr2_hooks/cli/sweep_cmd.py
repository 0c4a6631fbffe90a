"""``medr2 sweep``: expand an experiment config into runs and execute them (resumable)."""

from __future__ import annotations

import argparse

from .output import emit_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = (
        "examples:\n"
        "  medr2 sweep table10_embedded --dry-run --json     # the expanded runs and their cost, nothing executed\n"
        "  medr2 sweep table2 --dry-run --throughput cot=2000 --throughput target=2500:60   # with GPU-hours\n"
        "  medr2 sweep table10_embedded                      # run (skips runs whose results exist)\n"
        "  medr2 sweep table9 --wandb-sweep sweep.yaml && wandb sweep sweep.yaml   # then `wandb agent` on "
        "each GPU box\n"
        "  medr2 sweep table9 --rehearse && medr2 report table9_rehearsal   # the GPU grid on CPU stand-ins\n"
        "State: results/<experiment>/sweep.json; each run: results/runs/<run>/ and a W&B run (group = experiment);\n"
        "medr2 report keeps each run's summary in results/<experiment>/runs/<run>.json (committed with the report):\n"
        "a run with a run folder or a summary is skipped, so delete both to run a cell again."
    )
    parser.add_argument("config", help="an experiment name in experiments/ or a YAML path")
    parser.add_argument("--dry-run", action="store_true", help="list the runs without executing them")
    parser.add_argument("--json", action="store_true",
                        help="with --dry-run: print {experiment, runs, total} as JSON; each run and the total carry "
                             "the cost estimate (requests, prompt and generated tokens per phase, role and model)")
    parser.add_argument("--throughput", action="append", metavar="ROLE_OR_MODEL=TPS",
                        help="with --dry-run: tokens per second of a role (cot, target, cross_encoder, ...) or a "
                             "model, as TOTAL or PREFILL:DECODE (repeatable; over the config's throughput table): "
                             "the estimate adds GPU-hours")
    parser.add_argument("--run", action="append", help="execute only this run name (repeatable; W&B agents use it)")
    parser.add_argument("--wandb-sweep", metavar="FILE", help="write a W&B sweep spec over the runs and exit")
    parser.add_argument("--no_wandb", action="store_true", help="no W&B run per evaluation")
    parser.add_argument("--rehearse", action="store_true",
                        help="dress rehearsal on CPU: the same grid with embedded stand-ins for every model and "
                             "served role (medr2 serve), into results/<name>_rehearsal/")
    parser.add_argument("--limit", type=int, default=3, help="with --rehearse: items per run (default 3)")
    parser.add_argument("--benchmarks", nargs="+", help="with --rehearse: benchmarks (default: the config's first)")
    parser.add_argument("--window-cap", type=int, default=4096,
                        help="with --rehearse: pack at most this many tokens (default 4096: a 270M model reads "
                             "~150 tokens/s on 2 CPU cores)")
    parser.add_argument("--models", nargs="+", help="with --rehearse: these models only (default: all)")
    parser.add_argument("--port-offset", type=int, default=0,
                        help="with --rehearse: shift the stand-in servers' ports 18270/18135 (two rehearsals at once)")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ..config import ConfigError
    from ..experiments.config import load_experiment
    from ..experiments.expand import expand
    from ..experiments.sweep import sweep, wandb_sweep_spec

    exp = load_experiment(args.config)
    if args.rehearse:
        from ..experiments.rehearse import Plan, rehearsal

        exp = rehearsal(exp, Plan(limit=args.limit, benchmarks=tuple(args.benchmarks or ()), window_cap=args.window_cap,
                                        models=tuple(args.models or ()), port_offset=args.port_offset))
    runs = expand(exp)
    if args.run:
        known = {r.name for r in runs}
        unknown = [name for name in args.run if name not in known]
        if unknown:
            raise ConfigError(f"run {unknown[0]!r} is not in {exp.name} (medr2 sweep {args.config} "
                              "--dry-run lists them)")
        runs = [r for r in runs if r.name in args.run]
    if args.wandb_sweep:
        from ..fs import write_yaml

        write_yaml(Path(args.wandb_sweep), wandb_sweep_spec(exp.name, args.config, runs))  # no credential in it
        print(f"{args.wandb_sweep}: {len(runs)} runs")
        return 0
    if args.dry_run:
        from ..experiments.cost import estimate
        from ..experiments.throughput import parse_throughputs

        throughputs = {**parse_throughputs(exp.throughput), **parse_throughputs(args.throughput)}
        costs, total = estimate(runs, throughputs)
        missing = {u["run"]: u["reason"] for u in total.get("runs_without_estimate", [])}
        if args.json:  # often kept as a file: no credential from a served role's URL or model_args
            from ..redact import redact

            emit_json(args, redact({"experiment": exp.name, "total": total, "runs": [
                {**r.to_json(), "cost": c, **({"cost_unavailable": missing[r.name]} if c is None else {})}
                for r, c in zip(runs, costs)]}))
        else:
            for r, c in zip(runs, costs):
                brief = _brief(c) if c is not None else f"no estimate: {missing.get(r.name, 'its data is not here')}"
                print(f"{r.name}  task={r.task} model={r.lm_model} {r.model_args}  {brief}")
            print(f"{len(runs)} runs; estimated {_brief(total)}")
        return 0
    if exp.rehearsal:
        state = _rehearse(exp, runs, wandb=not args.no_wandb)
    else:
        state = sweep(exp.name, runs, wandb=not args.no_wandb)
    failed = [r.name for r in runs if state["runs"].get(r.name, {}).get("status") == "failed"]
    print(f"{exp.name}: {len(runs)} runs, {len(failed)} failed")
    return 1 if failed else 0


def _brief(cost: dict) -> str:
    """One line of a cost estimate: requests and tokens of each phase, GPU-hours when known."""
    parts = [f"{phase} {c['requests']:,} requests, {c['prompt_tokens_unique'] + c['generated_tokens']:,} tokens"
             for phase, c in ((p, cost.get(p)) for p in ("prepass", "eval")) if c]
    hours = cost.get("gpu_hours")
    assumed = sorted((cost.get("sizes") or {}).get("assumed", {}))
    return "; ".join(parts) + (f"; {hours:,} GPU-hours" if hours is not None else "") + \
        (f"; assumed sizes: {', '.join(assumed)}" if assumed else "") + \
        (f"; {len(cost['runs_without_estimate'])} runs without an estimate"
         if cost.get("runs_without_estimate") else "")


def _rehearse(exp, runs, wandb: bool) -> dict:
    """Record the rehearsal's config (``medr2 report <name>`` reads it), start one ``medr2 serve`` per stand-in
    that a role reaches over HTTP, run the grid, stop the servers."""
    import contextlib

    from .. import settings
    from ..experiments.rehearse import servers_needed
    from ..experiments.sweep import sweep
    from ..fs import write_json
    from ..llm.serve import serve_process

    out = settings.results_dir() / exp.name
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "experiment.json", exp.to_json(), ascii=True)  # redacted: no credential
    logs = settings.cache_dir() / "serve"
    logs.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        for model in servers_needed(exp):
            port = exp.rehearsal["servers"][model]
            url = stack.enter_context(serve_process(model, port, log_path=str(logs / f"{port}.log")))
            print(f"serving {model} at {url}", flush=True)
        return sweep(exp.name, runs, wandb=wandb)
