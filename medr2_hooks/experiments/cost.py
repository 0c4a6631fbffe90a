"""The cost of a sweep before it runs (``medr2 sweep CONFIG --dry-run --json``): per run and in total, requests,
prompt tokens and generated tokens of the pre-pass and the evaluation per role and model, and GPU-hours at the
throughputs given (``--throughput ROLE=TOKENS_PER_S`` or the experiment's ``throughput:`` table).

The pre-pass is counted by running the pipeline's own stages against counting stand-ins (:mod:`.cost_run`: its
docstring says what is measured and what is a ceiling); the evaluation from the prompts the target is sent
(:mod:`.cost_eval`). ``bench/calibrate_cost.py`` compares the estimate with what committed pre-pass records
measured.
"""

from __future__ import annotations

from collections import defaultdict
from functools import lru_cache

from .. import data, methods
from ..config import key_values, target_model
from .cost_eval import LM_EVAL_MAX_GEN_TOKS, Line, evaluation
from .cost_sizes import tokens_for
from .expand import Run
from .throughput import check_throughput_keys, parse_throughputs  # noqa: F401  (the estimate's rates; re-exported)

SUMS = ("requests", "prompt_tokens", "prompt_tokens_unique", "generated_tokens")


def target_name(run: Run) -> str:
    """The target's tokenizer: ``tokenizer=``, ``pretrained=`` or a served ``model=`` of its model_args."""
    named = run.lm_model if run.lm_model.startswith("embedded:") else run.model
    return key_values(run.model_args, "model_args").get("tokenizer") or target_model(named, run.model_args)


def max_gen_toks(run: Run) -> int:
    return int(key_values(run.gen_kwargs).get("max_gen_toks", LM_EVAL_MAX_GEN_TOKS))


def run_lines(run: Run) -> tuple[list[Line], dict]:
    """Every line of one run and the assumptions behind them."""
    target = tokens_for(target_name(run))
    named = methods.method(run.method)
    assumptions: dict = {}
    lines: list[Line] = []
    packed = None
    if named.retrieval:
        from ..prepass.spec import prepass_spec

        metadata = {k: v for k, v in run.metadata.items() if k != "judge"}
        spec = prepass_spec(run.benchmark, method=run.method, scoring=run.scoring, limit=run.limit,
                            target=target.model, **metadata)
        items = [r.public() for r in spec.eval_records]
        counted = count_prepass(spec.cfg, run.benchmark, items, [d.demo() for d in spec.demos], run.scoring,
                                named.answer)
        lines, assumptions, packed = counted.lines, counted.assumptions, counted.packed
        assumptions["demonstrations"] = len(spec.demos)
    else:
        cases = run.metadata.get("cases_file")  # a path, or {benchmark: path} (lm-eval's shared --metadata)
        items = list(_questions(run.benchmark, cases.get(run.benchmark) if isinstance(cases, dict) else cases))
        items = items[: run.limit]
        assumptions["demonstrations"] = 0
    lines.append(evaluation(run.benchmark, items, target, run.scoring, run.apply_chat_template, max_gen_toks(run),
                            named.answer, packed))
    assumptions["items"] = len(items)
    assumptions["target_tokens"] = target.describe()
    return lines, assumptions


def count_prepass(cfg, benchmark: str, items: list, demos: list, scoring: str = "letters",
                  answer: str = "default", sample: int | None = None, per_label_menus: bool = False):
    """The pre-pass of a method config over ``items`` (public questions) and ``demos`` (Demo), counted by running it
    (:func:`.cost_run.count_prepass`) on a sample, or with ``sample`` on that many questions and every demonstration;
    a declared model-calling stage the run never asked is an error."""
    from .cost_run import SAMPLE_DEMOS, SAMPLE_ITEMS
    from .cost_run import count_prepass as run_counted

    counted = run_counted(cfg, benchmark, items, demos, scoring, answer, sample or SAMPLE_ITEMS, per_label_menus,
                          len(demos) if sample else SAMPLE_DEMOS)
    uncounted(cfg, counted.lines, bool(demos))
    return counted


def uncounted(cfg, lines: list[Line], demos: bool) -> None:
    """Every stage the pipeline declares active that calls a model must have been asked in the counted run: a
    declaration whose ``when`` the code does not follow (a stage declared and never run) is an error here."""
    from ..pipeline.declare import pipeline

    counted = {line.stage for line in lines}
    missing = [s.name for s in pipeline(cfg.pipeline).active(cfg)
               if s.roles and s.name not in counted and (demos or not s.demos)]
    if missing:
        raise RuntimeError(f"pipeline {cfg.pipeline!r} declares stage(s) {', '.join(sorted(set(missing)))} for "
                           f"method {cfg.method!r}, but running it asked no model there: the declaration "
                           "(medr2_hooks.pipeline) does not say what the code does")


@lru_cache(maxsize=64)
def _questions(benchmark: str, cases_file: str | None) -> tuple:
    """A benchmark's evaluation questions (options, no answers), loaded once per dry-run."""
    return tuple(r.public() for r in data.pools(benchmark, cases_file=cases_file).eval)


def _seconds(line: dict, rates: tuple[float, float | None]) -> float:
    prefill, decode = rates
    if decode is None:
        return (line["prompt_tokens_unique"] + line["generated_tokens"]) / prefill
    return line["prompt_tokens_unique"] / prefill + line["generated_tokens"] / decode


def grouped(lines: list[Line], throughputs: dict) -> dict:
    """Sums per phase and per (phase, role, model, endpoint), with GPU-hours where a throughput is known (per role
    name, else per model); the total GPU-hours only when every role has one."""
    groups: dict[tuple, dict] = defaultdict(lambda: dict.fromkeys(SUMS, 0.0))
    for line in lines:
        for key in ((line.phase, line.role, line.model, line.endpoint), (line.phase,)):
            for field in SUMS:
                groups[key][field] += getattr(line, field)
    out = {phase: {k: round(v) for k, v in groups[(phase,)].items()} for phase in ("prepass", "eval")
           if (phase,) in groups}
    roles = []
    for key, sums in groups.items():
        if len(key) == 4:
            rates = throughputs.get(key[1]) or throughputs.get(key[2])
            roles.append({"phase": key[0], "role": key[1], "model": key[2], "endpoint": key[3],
                          **{k: round(v) for k, v in sums.items()},
                          "gpu_hours": None if rates is None else round(_seconds(sums, rates) / 3600, 3)})
    out["by_role"] = sorted(roles, key=lambda e: (e["phase"], e["role"], e["model"]))
    missing = sorted({e["role"] for e in roles if e["gpu_hours"] is None})
    out["gpu_hours"] = round(sum(e["gpu_hours"] for e in roles), 2) if throughputs and not missing else None
    if throughputs and missing:
        out["missing_throughput"] = missing
    return out


def estimate(runs: list[Run], throughputs: dict | None = None) -> tuple[list[dict], dict]:
    """Per run its cost (lines, sums, assumptions) and the sweep's total, where work that runs share through the
    stage cache (same ``share`` key) is counted once."""
    from ..errors import DataError

    throughputs = throughputs or {}
    per_run, seen, total_lines, shared, unavailable, sizes = [], set(), [], 0, [], {"measured": {}, "assumed": {}}
    for run, counted in zip(runs, _counted(runs)):
        if isinstance(counted, DataError):  # a benchmark whose files are not here: the plan stays, no estimate
            per_run.append(None)
            unavailable.append({"run": run.name, "reason": str(counted)})
            continue
        lines, assumptions = counted
        measured = size_sources(assumptions)
        for kind in sizes:
            sizes[kind].update(measured[kind])
        per_run.append({**grouped(lines, throughputs), "assumptions": assumptions, "sizes": measured,
                        "lines": [line.to_json() for line in lines]})
        for line in lines:
            if line.share is not None and line.share in seen:
                shared += 1
                continue
            seen.add(line.share)
            total_lines.append(line)
    check_throughput_keys(throughputs, total_lines)
    total = {"runs": len(runs), **grouped(total_lines, throughputs), "lines_shared_with_an_earlier_run": shared,
             "sizes": sizes}
    if unavailable:
        total["runs_without_estimate"] = unavailable
    return per_run, total


PARALLEL_FROM = 8  # retrieval runs from which the pre-passes are counted in worker processes


def _lines_or_unavailable(group: list[Run]) -> list:
    from ..errors import DataError

    out = []
    for run in group:
        try:
            out.append(run_lines(run))
        except DataError as exc:
            out.append(exc)
    return out


def _counted(runs: list[Run]) -> list:
    """Each run's ``(lines, assumptions)`` (a DataError where its data is not here). Runs that differ only in their
    model are counted together (one counted pre-pass serves those whose roles count alike); a sweep with many
    retrieval runs counts its groups in one fresh process per CPU (``$MEDR2_THREADS``)."""
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    from ..settings import threads

    groups: dict[tuple, list[int]] = {}
    for i, r in enumerate(runs):
        groups.setdefault((r.method, r.benchmark, r.window, r.scoring, r.limit), []).append(i)
    batches = [[runs[i] for i in idx] for idx in groups.values()]
    workers = min(threads(), len(batches))
    if workers < 2 or sum(methods.method(r.method).retrieval for r in runs) < PARALLEL_FROM:
        done = [_lines_or_unavailable(b) for b in batches]
    else:
        with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
            done = list(pool.map(_lines_or_unavailable, batches))
    out: list = [None] * len(runs)
    for idx, results in zip(groups.values(), done):
        for i, result in zip(idx, results):
            out[i] = result
    return out


def size_sources(assumptions: dict) -> dict[str, dict[str, str]]:
    """Which sizes behind a run's estimate were measured here (a built index's passages, searches of its questions,
    the model's own tokenizer) and which were assumed (a recipe's planning figure, a no-overlap ceiling, a stand-in
    tokenizer): ``{"measured": {what: source}, "assumed": {what: source}}``."""
    out: dict[str, dict[str, str]] = {"measured": {}, "assumed": {}}
    for key in ("unit_tokens", "candidates", "target_tokens"):
        if key not in assumptions:
            continue
        value = assumptions[key]
        source = value[1] if isinstance(value, (list, tuple)) else str(value)
        if key == "target_tokens":
            assumed = "counted with" in source  # a stand-in's tokenizer
        else:  # a built index's passages or manifest, searches of the questions: measured; a recipe's figures: not
            assumed = not ("measured" in source or "manifest" in source)
        out["assumed" if assumed else "measured"][key] = source
    return out
