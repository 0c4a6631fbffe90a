"""The cost of a sweep before it runs (``medr2 sweep CONFIG --dry-run --json``): per run and in total, requests,
prompt tokens and generated tokens of the pre-pass and the evaluation per role and model, and GPU-hours at the
throughputs given (``--throughput ROLE=TOKENS_PER_S`` or the experiment's ``throughput:`` table).

The counting model is :mod:`.cost_stages` (its docstring says what is measured and what is a ceiling);
``bench/calibrate_cost.py`` compares it with the requests and tokens the committed pre-pass records measured.
"""

from __future__ import annotations

from collections import defaultdict
from functools import lru_cache

from .. import data, methods
from ..config import key_values, target_model
from .cost_sizes import tokens_for, unit_size
from .cost_stages import LM_EVAL_MAX_GEN_TOKS, Line, Counting, evaluation, prepass
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
    base = {"benchmark": run.benchmark, "limit": run.limit}
    if methods.method(run.method).retrieval:
        from ..prepass.spec import prepass_spec

        metadata = {k: v for k, v in run.metadata.items() if k != "judge"}
        spec = prepass_spec(run.benchmark, method=run.method, scoring=run.scoring, limit=run.limit,
                            target=target.model, **metadata)
        counting = count_prepass(spec.cfg, run.benchmark, [r.public() for r in spec.eval_records],
                                 [d.public() for d in spec.demos], base)
    else:
        cases = run.metadata.get("cases_file")  # a path, or {benchmark: path} (lm-eval's shared --metadata)
        questions = _questions(run.benchmark, cases.get(run.benchmark) if isinstance(cases, dict) else cases)
        counting = Counting(None, run.benchmark, list(questions[: run.limit]), [], base)
    named = methods.method(run.method)
    evaluation(counting, target, run.scoring, run.apply_chat_template, max_gen_toks(run), named.retrieval,
               named.answer)
    counting.assumptions["items"] = len(counting.items)
    counting.assumptions["demonstrations"] = len(counting.demos)
    counting.assumptions["target_tokens"] = target.describe()
    return counting.lines, counting.assumptions


def count_prepass(cfg, benchmark: str, items: list, demos: list, share_base: dict,
                  per_label_menus: bool = False) -> Counting:
    """The pre-pass lines of a method config over ``items``; Alg. 2 also runs the demonstrations (LLM-AMT's reader
    is zero-shot). ``per_label_menus``: count served menus as they were read before one request per menu (what the
    calibration compares records made then with)."""
    counting = Counting(cfg, benchmark, items, demos if cfg.pipeline == "medr2" else [], share_base, per_label_menus)
    counting.unit, counting.assumptions["unit_tokens"] = unit_size(cfg.index, cfg.unit, cfg.target_tokenizer)
    prepass(counting)
    uncounted(cfg, counting.lines, bool(counting.demos))
    return counting


def uncounted(cfg, lines: list[Line], demos: bool) -> None:
    """Every stage the pipeline declares active that calls a model must have lines: a stage added to the
    declaration (:mod:`medr2_hooks.pipeline.declare`) without its counting is an error here, not a low estimate."""
    from ..pipeline.declare import pipeline

    counted = {line.stage for line in lines}
    missing = [s.name for s in pipeline(cfg.pipeline).active(cfg)
               if s.roles and s.name not in counted and (demos or not s.demos)]
    if missing:
        raise RuntimeError(f"the cost estimate does not count stage(s) {', '.join(sorted(set(missing)))} that "
                           f"pipeline {cfg.pipeline!r} declares for method {cfg.method!r}: count them in "
                           "medr2_hooks/experiments/cost_stages.py")


def check_model(cfg, benchmark: str, items: list, demos: list, scoring: str = "letters",
                answer: str = "default") -> dict[str, tuple[float, float]]:
    """The counting model the dry-run uses against the pipeline itself run on the same questions and demonstrations
    (``demos``: :class:`~medr2_hooks.data.record.Demo`) with counting stand-ins (:mod:`.cost_run`):
    ``{stage: (requests counted by the model, requests the run sent)}``. A RuntimeError names every stage the run
    asks a model in that the model does not count, or counts with other requests (beyond 1%)."""
    from .cost_run import count_prepass as run_counted

    ran = run_counted(cfg, benchmark, items, demos, scoring, answer)
    modelled = count_prepass(cfg, benchmark, items, [d.question for d in demos], {})
    out: dict[str, list[float]] = {}
    for i, lines in enumerate((modelled.lines, ran.lines)):
        for line in lines:
            out.setdefault(line.stage.removesuffix("_answer"), [0.0, 0.0])[i] += line.requests
    wrong = [f"{stage} (model {m:,.0f}, run {r:,.0f})" for stage, (m, r) in sorted(out.items())
             if abs(m - r) > 0.01 * max(r, 1)]
    if wrong:
        raise RuntimeError(f"the cost estimate's model of pipeline {cfg.pipeline!r} (method {cfg.method!r}) does not "
                           f"count what the pipeline runs: {'; '.join(wrong)}; count it in "
                           "medr2_hooks/experiments/cost_stages.py")
    return {stage: (m, r) for stage, (m, r) in out.items()}


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
    for run in runs:
        try:
            lines, assumptions = run_lines(run)
        except DataError as exc:  # a benchmark whose files are not here: the plan stays, this cell has no estimate
            per_run.append(None)
            unavailable.append({"run": run.name, "reason": str(exc)})
            continue
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
