"""Sections of an experiment's report besides the main table: what was run (scoring, corpus, candidate sets, or
the rehearsal's stand-ins), packed prompt sizes per window, where Alg. 2 stopped, and stage-cache reuse."""

from __future__ import annotations

from collections import defaultdict

from .config import Experiment
from .expand import Run
from ..fs import read_json

MISSING = "—"


def setting_lines(exp: Experiment, runs: list[Run]) -> str:
    """How the cells were measured: scoring, the target's chat template, the corpus, the candidate sets."""
    from .. import methods

    scorings = sorted({r.scoring for r in runs})
    lines = [f"\nScoring: {', '.join(f'{s}: {methods.SCORINGS[s].title}' for s in scorings)}"
             + (" through the target's chat template" if exp.apply_chat_template else "") + "; free-text benchmarks "
             "(RareArena) are always generative.\n"]
    kinds = [(m.name, m.chat) for m in exp.models if m.chat is not None]
    if kinds:  # base or chat, as experiments/models.yaml decides per model
        lines.append("\nTargets: " + "; ".join(
            f"{name} {'chat model' if chat else 'base model'}"
            f"{' (through its chat template)' if chat and exp.apply_chat_template else ' (the plain prompt)'}"
            for name, chat in kinds) + ".\n")
    indexes = sorted({r.resolved["index"] for r in runs if r.resolved.get("index")})
    for index in indexes:
        lines.append(f"\nCorpus: {corpus_line(index)}\n")
    if exp.collection:
        lines.append(f"\nGOLD-EVIDENCE COLLECTION ({exp.collection}): every document is some question's gold evidence, "
                     "so these runs measure retrieval and evidence selection, and their accuracies are upper bounds of "
                     "what the methods reach in a real corpus.\n")
    ratios = [r.resolved["candidates"]["ratio"] for r in runs if (r.resolved.get("candidates") or {}).get("ratio")]
    if ratios:
        span = f"{min(ratios)}x" if min(ratios) == max(ratios) else f"{min(ratios)}x to {max(ratios)}x"
        lines.append(f"\nCandidate sets: S^c holds {span} the evidence budget (half the window)"
                     + (", so the fine reranker chooses what fits.\n" if min(ratios) >= 1 else
                        "; below 1x the fine reranker has nothing to leave out (CPU-sized).\n"))
    return "".join(lines)


def corpus_line(index: str) -> str:
    """An index's corpus as a report states it: its recipe's description, source types and size."""

    from .. import settings
    from ..config import ConfigError
    from ..corpus.recipe import find_recipe, load_recipe
    from ..corpus.sources import declared_source_type

    try:
        recipe = load_recipe(str(find_recipe(index)))
    except ConfigError:
        return f"{index} (a recipe outside index/)"
    kinds = sorted({declared_source_type(s.reader, s.options) for s in recipe.sources})
    manifest = settings.cache_dir() / "indexes" / index / "manifest.json"
    size = ""
    if manifest.is_file():
        counts = read_json(manifest)["counts"]
        size = f"; {counts['documents']:,} documents, {counts['passages']:,} passages"
    return f"{index}: {recipe.description or index} (source types: {', '.join(kinds)}{size})"


def loop_table(runs: list[Run], done: dict) -> list[str]:
    """Per run of a looping method: how many items stopped at each iteration of Alg. 2 (``none``: ran all)."""
    rows = [(r, done[r.name]["loop"]) for r in runs
            if r.name in done and (done[r.name].get("loop") or {}).get("stopped_at")]
    if not rows:
        return []
    width = max(len(loop["stopped_at"]) for _, loop in rows)
    md = ["\n## Where Alg. 2 stopped (items per stopping iteration; none: all iterations ran)\n\n| model | method | "
          "benchmark | window | " + " | ".join(f"t={t}" for t in range(1, width)) + " | none | median μ per t |\n|"
          + "---|" * (width + 5) + "\n"]
    for run, loop in rows:
        stops = loop["stopped_at"]
        mus = ", ".join(f"{t}: {q[1]:.3f}" for t, q in loop.get("mu", {}).items())
        md.append(f"| {run.model} | {run.method} | {run.benchmark} | {run.window} | "
                  + " | ".join(str(stops.get(str(t), MISSING)) for t in range(1, width))
                  + f" | {stops['none']} | {mus} |\n")
    return md


def delta_table(runs: list[Run], done: dict) -> list[str]:
    """Per looping run: where its recorded loops stop under other values of δ (the pre-pass record's
    ``loop.delta_sensitivity``), so a reader sees whether the paper's δ (MethodConfig.delta), fitted on the
    paper's own embedding space, decides anything in this one."""
    rows = [(r, done[r.name]["loop"]["delta_sensitivity"]) for r in runs
            if r.name in done and (done[r.name].get("loop") or {}).get("delta_sensitivity")]
    if not rows:
        return []
    factors = list(rows[0][1])
    md = ["\n## δ sensitivity (items per stopping iteration under f·δ; exact for f ≤ 1, for f > 1 `beyond` counts "
          "loops that stopped but would have gone on)\n\n| model | method | benchmark | window | "
          + " | ".join(f"{f}·δ = {rows[0][1][f]['delta']:g}" for f in factors) + " |\n|"
          + "---|" * (len(factors) + 4) + "\n"]
    for run, sens in rows:
        cells = [", ".join(f"{'t' + k if k.isdigit() else k.replace('_record', '').replace('ran_all', 'all T')}: {v}"
                           for k, v in sens[f].items() if k != "delta") for f in factors]
        md.append(f"| {run.model} | {run.method} | {run.benchmark} | {run.window} | " + " | ".join(cells) + " |\n")
    return md


def rehearsal_header(exp: Experiment) -> list[str]:
    """First line and stand-in table of a rehearsal's report (``medr2 sweep <config> --rehearse``)."""
    r = exp.rehearsal
    md = [f"# REHEARSAL, not results: {r['of']} on embedded stand-ins ({exp.name})\n\n{exp.description}\n\n"
          "| paper model | stand-in target | pack window cap | roles (served by medr2 serve) |\n|---|---|---|---|\n"]
    for name, m in r["models"].items():
        roles = ", ".join(f"{role}: {model.removeprefix('embedded:')}" for role, model in m["roles"].items())
        md.append(f"| {name} (`{m['target']}`) | {m['stand_in']} | {m['pack_window_cap']} | {roles} |\n")
    if r["windows_capped"]:
        capped = ", ".join(map(str, r["windows_capped"]))
        md.append(f"\nWindows {capped} exceed a stand-in's context or the rehearsal's "
                  f"window cap ({r['plan']['window_cap']} tokens, CPU time): those cells are packed at the cap above "
                  "and keep the paper's window label.\n")
    if r["replaced"]:
        md.append(f"\nGPU-only settings replaced by the CPU defaults: {r['replaced']}; loop sized for CPU: "
                  f"{r['cpu_loop']}, candidates at most {r['cpu_k']}.\n")
    return md


def packed_tokens_table(runs: list[Run], done: dict) -> list[str]:
    windows = sorted({r.window for r in runs})
    cells: dict[tuple, dict] = defaultdict(dict)
    for run in runs:
        got = done.get(run.name)
        if got and got.get("packed_tokens") is not None:
            cells[(run.model, run.method, run.benchmark)][run.window] = got["packed_tokens"]
    if len(windows) < 2 or not cells:
        return []
    md = ["\n## Packed prompt tokens per window (mean over items, from the pre-pass packs)\n\n| model | method | "
          "benchmark | " + " | ".join(f"{w // 1024}K" for w in windows) + " |\n|" + "---|" * (len(windows) + 3) + "\n"]
    md += [f"| {m} | {meth} | {b} | " + " | ".join(f"{v[w]:.0f}" if w in v else MISSING for w in windows) + " |\n"
           for (m, meth, b), v in cells.items()]
    return md


def cache_reuse(runs: list[Run], done: dict) -> list[dict]:
    groups: dict[tuple, list[float]] = defaultdict(list)
    for run in runs:
        seconds = (done.get(run.name) or {}).get("prepass_seconds")
        if seconds is not None:
            groups[(run.model, run.method, run.benchmark)].append(seconds)
    return [{"model": m, "method": meth, "benchmark": b, "windows": len(s), "total": sum(s), "max": max(s),
             "ratio": sum(s) / max(s)} for (m, meth, b), s in groups.items() if len(s) > 1 and max(s) > 0]


EVIDENCE_STAGES = ("fused.final", "coarse.final", "fine.final", "selected.final", "packed")
EVIDENCE_MEASURES = ("R@10", "nDCG@10", "Success@1000")


def evidence_tables(exp: Experiment, runs: list[Run], done: dict) -> list[str]:
    """Each retrieval run's evidence by stage (what the retrievers found, what reranking kept, what the target read),
    and every method against the reference method on the packed evidence, same questions, bootstrap 95% CI."""
    from ..stats import paired_bootstrap

    weak = [(r, done[r.name]["evidence"]) for r in runs if r.name in done
            and "answer_in_evidence" in (done[r.name].get("evidence") or {})]
    rows = [(r, done[r.name]["evidence"]) for r in runs
            if r.name in done and (done[r.name].get("evidence") or {}).get("stages")]
    md = []
    if weak:
        md.append("\n## Answer text in the packed evidence (no relevance judgements: a weak signal, not "
                  "evidence quality)"
                  "\n\n| model | method | benchmark | window | n | gold option's text in the evidence "
                  "|\n|---|---|---|---|---|---|\n")
        md += [f"| {r.model} | {r.method} | {r.benchmark} | {r.window} | {ev['n']} | {ev['answer_in_evidence']:.2f} |\n"
               for r, ev in weak]
    md += own_article_table(runs, done)
    if not rows:
        return md
    md += [f"\n## Evidence against {rows[0][1]['collection']} (gold PubMed ids; R@10 / nDCG@10 / gold in the list)\n\n"
          "| model | method | benchmark | window | n | " + " | ".join(EVIDENCE_STAGES) + " |\n|"
          + "---|" * (len(EVIDENCE_STAGES) + 5) + "\n"]
    for run, ev in rows:
        cells = []
        for stage in EVIDENCE_STAGES:
            got = ev["stages"].get(stage)
            cells.append(" / ".join(f"{got[m]:.2f}" for m in EVIDENCE_MEASURES) if got else MISSING)
        n = max((s["n"] for s in ev["stages"].values()), default=0)
        md.append(f"| {run.model} | {run.method} | {run.benchmark} | {run.window} | {n} | " + " | ".join(cells)
                  + " |\n")
    reference = next((m for m in ("vanilla_rag", "medrag") if m in exp.methods), None)
    by_cell = {(r.model, r.benchmark, r.window, r.method): ev for r, ev in rows}
    pairs = []
    for (model, bench, window, method), ev in by_cell.items():
        ref = by_cell.get((model, bench, window, reference))
        if method == reference or ref is None or "packed" not in ev["stages"] or "packed" not in ref["stages"]:
            continue
        for measure in EVIDENCE_MEASURES:
            a, b = ref["stages"]["packed"]["items"][measure], ev["stages"]["packed"]["items"][measure]
            shared = sorted(set(a) & set(b))
            if shared:
                ci = paired_bootstrap([a[q] for q in shared], [b[q] for q in shared])
                pairs.append(f"| {model} | {bench} | {window} | {method} | {measure} | {len(shared)} | "
                             f"{ci['diff']:+.3f} | "
                             f"[{ci['low']:+.3f}, {ci['high']:+.3f}] |\n")
    if pairs:
        md.append(f"\nPacked evidence against {reference} (same questions; bootstrap 95% CI):\n\n| model | benchmark | "
                  "window | method | measure | n | Δ | 95% CI |\n|---|---|---|---|---|---|---|---|\n")
        md += pairs
    return md


def own_article_table(runs: list[Run], done: dict) -> list[str]:
    """PubMedQA runs: where each question's own abstract, excluded from its evidence, would have ranked for a search
    of the question stem (per retriever and fused): how much of the benchmark the exclusion takes away."""
    rows = [(r, done[r.name]["evidence"]["own_article"]) for r in runs
            if r.name in done and (done[r.name].get("evidence") or {}).get("own_article")]
    if not rows:
        return []
    md = ["\n## The question's own article, excluded from its evidence: where it would have ranked\n\n"
          "| model | method | benchmark | n | ranking | at 1 | within 10 | within depth | median rank |\n"
          "|---|---|---|---|---|---|---|---|---|\n"]
    for run, own in rows:
        depth = own["depth"]
        for name, got in own["by_retriever"].items():
            median = MISSING if got["median_rank"] is None else f"{got['median_rank']:g}"
            md.append(f"| {run.model} | {run.method} | {run.benchmark} | {own['n']} | {name} | {got['at_1']} | "
                      f"{got['within_10']} | {got[f'within_{depth}']} (of {depth}) | {median} |\n")
    return md


def anchor_table(exp: Experiment) -> list[str]:
    """Published numbers printed beside ours (experiments/<anchors>_numbers.csv), as the paper's are."""
    import csv

    from .. import settings

    path = settings.REPO_ROOT / "experiments" / f"{exp.anchors}_numbers.csv"
    with open(path, encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    cols = [*exp.benchmarks, "average"]
    grouped: dict[tuple, dict] = defaultdict(dict)
    for r in rows:
        grouped[(r["system"], r["method"], r["corpus"], r["retriever"])][r["benchmark"]] = r["value"]
    md = [f"\n## Published anchors ({path.name}: {exp.anchors.upper()}'s leaderboard; their scorer counts "
          "an unparsable "
          "answer as \"A\", ours as [invalid])\n\n| system | method | corpus | retriever | " + " | ".join(cols)
          + " |\n|" + "---|" * (len(cols) + 4) + "\n"]
    md += [f"| {s} | {m} | {c or MISSING} | {r or MISSING} | " + " | ".join(v.get(col, MISSING) for col in cols)
           + " |\n"
           for (s, m, c, r), v in grouped.items()]
    return md


def grading_table(runs: list[Run], done: dict) -> list[str]:
    """RareArena runs: which grade the main table shows (the run's LLM judge, or the offline Orphanet match, a
    lower bound of the judge), the judge's model, and both top-5 recalls side by side."""
    rows = [(run, done[run.name]) for run in runs if run.name in done and "(" in done[run.name]["metric"]]
    if not rows:
        return []
    md = ["\n## RareArena grading (top-5 recall, %)\n\nThe judge grades as RareArena's authors do (score 2: the case's "
          "diagnosis or Orphanet name, a synonym or equivalent); the Orphanet match credits only names the Orphanet "
          "tree holds, so it is a lower bound. Without a judge (experiment `judge:`, or `--metadata "
          "'{\"judge\": {...}}'`) the table shows the lower bound. Total recall counts scores 2 and 1, as "
          "RareArena publishes it; score-2 recall beside it.\n\n| run | graded by | top-5 total | top-5 score 2 | "
          "Orphanet lower bound (total) | judge replies unparseable |\n|---|---|---|---|---|---|\n"]
    for run, got in rows:
        judge = got.get("judge") or {}
        by = f"judge {judge.get('model', '?')}" if got["metric"].endswith("(judge)") else "Orphanet match (no judge)"
        lower = got.get("orphanet_top5") if got["metric"].endswith("(judge)") else got["score"]
        bad, score2 = judge.get("unparseable"), got.get("top5_score2")
        md.append(f"| {run.name} | {by} | {got['score']:.2f} | {'' if score2 is None else f'{score2:.2f}'} | "
                  f"{'' if lower is None else f'{lower:.2f}'} | {'' if bad is None else bad} |\n")
    return md


def reading_table(runs: list[Run], done: dict) -> list[str]:
    """Generative runs: the strict reading (the headline) beside the flexible one, and MedRAG runs beside MIRAGE's
    own scorer's rule (which reads an answer it cannot find as "A"), so a MIRAGE cell compares like for like."""
    rows = [(run, done[run.name]) for run in runs if run.name in done and
            (done[run.name].get("acc_flexible") is not None or done[run.name].get("acc_mirage") is not None)]
    if not rows:
        return []
    md = ["\n## How the replies were read (accuracy, %)\n\nStrict: an explicit statement of one option (the "
          "headline; an answer that cannot be read is invalid and wrong). Flexible: also an answer statement naming "
          "an option's text, or a bracketed label. MIRAGE's rule: its scorer's patterns, \"A\" when none matches "
          "(for MedRAG's JSON answers).\n\n| run | strict | invalid (%) | flexible | MIRAGE's rule |\n"
          "|---|---|---|---|---|\n"]
    for run, got in rows:
        cells = [got.get(k) for k in ("score", "invalid", "acc_flexible", "acc_mirage")]
        md.append(f"| {run.name} | " + " | ".join("" if c is None else f"{c:.2f}" for c in cells) + " |\n")
    return md


def shots_table(runs: list[Run], done: dict) -> list[str]:
    """Demonstrations that reached each prompt: at a small window Med-R²'s CoT demonstrations may not fit beside
    the evidence and the answer's room, and the table says so."""
    rows = [(run, done[run.name]["shots"]) for run in runs if run.name in done and done[run.name].get("shots")]
    if not rows:
        return []
    md = ["\n## Demonstrations in the prompt\n\n| run | window | available | mean per prompt | min | max | "
          "zero-shot prompts | skipped (no room) |\n|---|---|---|---|---|---|---|---|\n"]
    for run, shots in rows:
        md.append(f"| {run.name} | {run.window} | {shots['available']} | {shots['mean']} | {shots['min']} | "
                  f"{shots['max']} | {shots['zero_shot']} | {shots['skipped']} |\n")
    return md


def stats_table(stats: list[dict], reference: str) -> list[str]:
    md = [f"\n## Paired statistics (against {reference}, same items)\n\n| model | window | benchmark | method | n | "
          "Δ acc (pts) | 95% CI | McNemar p |\n|---|---|---|---|---|---|---|---|\n"]
    return md + [f"| {s['model']} | {s['window']} | {s['benchmark']} | {s['method']} | {s['n']} | {s['diff']:+.2f} | "
                 f"[{s['low']:+.2f}, {s['high']:+.2f}] | {s['mcnemar_p']:.3g} |\n" for s in stats]


def cost_table(runs: list, done: dict) -> list[str]:
    md = ["\n## Invalid answers and cost\n\n| run | invalid (%) | wall s | pre-pass s | model calls | prompt tokens | "
          "training |\n|---|---|---|---|---|---|---|\n"]
    for run in runs:
        got = done.get(run.name)
        if got:
            train = got["finetune"]
            train_text = (f"{train['train_seconds']} s, {train['tokens']} tokens, {train['steps']} steps"
                          if train else "")
            invalid = "n/a (log-likelihood)" if got["invalid"] is None else f"{got['invalid']:.1f}"
            md.append(f"| {run.name} | {invalid} | {got['wall_seconds']} | "
                      f"{'0 (packs reused)' if got.get('packs_reused') else got['prepass_seconds'] or ''} | "
                      f"{got['model_calls'] if got['model_calls'] is not None else ''} | "
                      f"{got['prompt_tokens'] or ''} | "
                      f"{train_text} |\n")
    return md


def reuse_lines(reuse: list[dict]) -> list[str]:
    if not reuse:
        return []
    return ["\n## Stage-cache reuse across windows\n\nPre-pass seconds of all windows of a model and method over "
            "those of its most expensive window (1.0 = the other windows cost nothing beyond packing):\n\n"] + [
        f"- {r['model']} {r['method']} {r['benchmark']}: {r['windows']} windows, {r['total']:.1f} s / "
        f"{r['max']:.1f} s = {r['ratio']:.3f}x\n" for r in reuse]
