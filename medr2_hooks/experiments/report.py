"""``medr2 report``: an experiment's results in the paper's layout, with statistics, costs and figures.

Writes ``results/<experiment>/``: ``report.md`` and ``table.csv`` (one row per model × method [× window], one
column per benchmark, plain mean as "Average" only when every cell is there; best **bold**, second <u>underlined</u>
within each model block; a run without results is a missing cell "—", never a number), the paper's own numbers
for the same table from ``experiments/paper_numbers.csv`` with the rows whose printed average disagrees with its
cells listed as errata, paired statistics (bootstrap 95% CI of the accuracy difference and McNemar p, every
method against the reference method on the same items), invalid-answer rates, compute cost per run, and figures
(grouped bars per benchmark; the % improvement heatmap of Med-R² over direct response across windows; accuracy
against wall seconds) as PNG and SVG.
"""

from __future__ import annotations

import csv
import io
import re
from collections import defaultdict
from pathlib import Path

from .. import settings
from ..data.readers import iter_jsonl
from ..data.replies import sample_files
from ..errors import RowError
from ..fs import atomic_write_text, write_json
from .config import Experiment
from .expand import Run, expand
from .sweep import read_record, read_summary, run_dir, summary_path
from .report_sections import (anchor_table, cache_reuse, cost_table, delta_table, evidence_tables, grading_table,
                              loop_table, packed_tokens_table, reading_table, rehearsal_header, reuse_lines,
                              setting_lines, shots_table, stats_table)
from ..stats import mcnemar, paired_bootstrap

PAPER_NUMBERS = settings.REPO_ROOT / "experiments" / "paper_numbers.csv"
MISSING = "—"


# RareArena's official metrics are top-1 and top-5 recall by an LLM judge. The paper's Table 8 does not name its
# metric; its GPT-4o numbers (RDS 47.50, RDC 73.76) lie between RareArena's published GPT-4o top-1 and top-5 total
# recalls (RDS 33.1 / 56.9, RDC 64.2 / 85.9). The main table uses top-5 "total" recall as RareArena publishes it
# (score 2 + score 1: ``top5_lenient``) — the judge's where the run had one (filter "judge"), else the offline
# Orphanet match (filter "orphanet", a lower bound) — with score-2 recall beside it, and the report adds top-1.
PRIMARY = ("acc,none", "top5_lenient,judge", "top5_lenient,orphanet", "top5,none")
LOWER_BOUND = "top5_lenient,orphanet"


def primary_metric(results: dict) -> tuple[str, float] | None:
    """``(metric key, score in %)``: the first of :data:`PRIMARY` the results hold."""
    for key in PRIMARY:
        if key in results:
            return key, 100 * float(results[key])
    return None


def load_runs(runs: list[Run]) -> dict[str, dict]:
    """Run name → {score, metric, invalid, wall_seconds, items: {doc id: 0/1}, finetune, …} for runs with results:
    read from the run folder where it is here (with its ``provenance``), else from the run's committed summary
    (``provenance``: None)."""
    out = {}
    for run in runs:
        got = _from_folder(run)
        summary = read_summary(run) if got is None else None
        if summary is not None:
            got = {**summary["summary"], "provenance": None}
        if got is not None:
            out[run.name] = got
    return out


def write_summaries(runs: list[Run], done: dict) -> None:
    """Keep each run read from its folder as ``results/<experiment>/runs/<run>.json`` (committed with the report),
    so the report regenerates, and the sweep resumes, on a machine without the run folders."""
    for run in runs:
        got = done.get(run.name)
        if got and got["provenance"] is not None:
            summary = {k: v for k, v in got.items() if k != "provenance"}
            path = summary_path(run)
            path.parent.mkdir(parents=True, exist_ok=True)
            write_json(path, {"run": run.name, "task": run.task, **got["provenance"], "summary": summary},
                       sort_keys=True, ascii=True)


def _from_folder(run: Run) -> dict | None:
    folder = run_dir(run)
    record = read_record(run)
    if record is None:
        return None
    metric = primary_metric(record.get("results", {}).get(run.task, {}))
    if metric is None:
        return None
    name, where = metric[0].split(",")
    items = {}
    for path in sample_files(folder, run.task):
        for lineno, row in iter_jsonl(path):
            if row.get("filter", "none") == where:
                doc, value = row.get("doc"), row.get(name, 0.0)
                if not isinstance(doc, dict) or not isinstance(doc.get("id"), (str, int)):
                    raise RowError(path, lineno, "doc.id", "expected the scored document with its id")
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    raise RowError(path, lineno, name, f"expected the item's score, a number, found {value!r:.80}")
                items[doc["id"]] = float(value)
    got = record["results"][run.task]
    invalid = got.get("invalid,none", got.get("invalid,orphanet"))
    top1 = got.get(f"top1_lenient,{where}", got.get(f"top1,{where}"))
    score2 = got.get(f"top5,{where}") if name == "top5_lenient" else None
    lower = got.get(LOWER_BOUND) if where == "judge" else None
    prepass = list((record.get("prepass") or {}).values())
    # packs made by an earlier run (the same pre-pass identity, e.g. every window above a rehearsal's cap) cost
    # this run nothing: their record describes the run that made them
    reused = bool(((record.get("prepared") or {}).get(run.task) or {}).get("reused"))
    paid = [] if reused else prepass
    if any("wall_seconds" not in p for p in paid):  # a pre-pass record the run could not find ({"missing": path})
        paid, prepass = [], []  # its cost is unknown, never a partial sum
    return {"metric": name if where == "none" else f"{name} ({where})", "score": metric[1], "items": items,
            "orphanet_top5": None if lower is None else 100 * float(lower),
            "judge": (record.get("judge") or {}).get(run.task),
            "wall_seconds": record.get("wall_seconds"),
            "prepass_seconds": sum(p["wall_seconds"] for p in paid) if prepass else None,
            "model_calls": sum(u["calls"] for p in paid for u in p["usage"].values()) if prepass else None,
            "prompt_tokens": sum(u["prompt_tokens"] for p in paid for u in p["usage"].values()) if prepass else None,
            "packs_reused": reused, "packed_tokens": _packed_mean(prepass),
            "invalid": None if invalid is None else 100 * float(invalid), "finetune": record.get("finetune"),
            "top1": None if top1 is None else 100 * float(top1), "top5_score2": _percent(score2),
            "subset": (record.get("subset") or {}).get(run.task),
            "loop": (prepass[0].get("loop") if len(prepass) == 1 else None),
            "shots": (prepass[0].get("shots") if len(prepass) == 1 else None),
            "acc_flexible": _percent(got.get("acc_flexible,none")), "acc_mirage": _percent(got.get("acc_mirage,none")),
            "evidence": (record.get("evidence") or {}).get(run.task),
            "cot_tokens": (prepass[0].get("cot_tokens") if len(prepass) == 1 else None),
            "provenance": {k: record.get(k) for k in ("git_commit", "resolved", "versions", "hardware")}}


def _percent(value) -> float | None:
    return None if value is None else 100 * float(value)


def _packed_mean(prepass: list[dict]) -> float | None:
    means = [(p.get("packed_tokens") or {}).get("mean") for p in prepass]
    return means[0] if len(means) == 1 else None


def _mark(values: list[float | None]) -> list[str]:
    present = sorted({v for v in values if v is not None}, reverse=True)
    out = []
    for v in values:
        if v is None:
            out.append(MISSING)
        elif v == present[0] and len(present) > 1:
            out.append(f"**{v:.2f}**")
        elif len(present) > 2 and v == present[1]:
            out.append(f"<u>{v:.2f}</u>")
        else:
            out.append(f"{v:.2f}")
    return out


def result_rows(exp: Experiment, runs: list[Run], done: dict) -> list[dict]:
    cells: dict[tuple, dict] = defaultdict(dict)
    for run in runs:
        got = done.get(run.name)
        cells[(run.model, run.window, run.method, run.scoring)][run.benchmark] = got["score"] if got else None
    rows = []
    for (model, window, method, scoring), by_bench in cells.items():
        values = [by_bench.get(b) for b in exp.benchmarks]
        average = sum(values) / len(values) if all(v is not None for v in values) else None
        rows.append({"model": model, "window": window, "method": method, "scoring": scoring,
                     **dict(zip(exp.benchmarks, values)), "average": average})
    return rows


def markdown_table(exp: Experiment, rows: list[dict]) -> str:
    """Our table in the paper's layout; every row names the scoring its cells were scored by (free-text
    benchmarks are always generative)."""
    columns = [*exp.benchmarks, "average"]
    head = "| model | window | method | scoring | " + " | ".join(columns) + " |\n|" + "---|" * (len(columns) + 4) + "\n"
    body = ""
    for key in dict.fromkeys((r["model"], r["window"]) for r in rows):
        block = [r for r in rows if (r["model"], r["window"]) == key]
        marked = {c: _mark([r[c] for r in block]) for c in columns}
        for i, r in enumerate(block):
            body += (f"| {r['model']} | {r['window']} | {r['method']} | {r['scoring']} | "
                     + " | ".join(marked[c][i] for c in columns) + " |\n")
    return head + body


def paper_table(table: str) -> tuple[list[dict], list[dict]]:
    """The paper's cells of one table and its errata (printed averages that disagree with their cells)."""
    with open(PAPER_NUMBERS, encoding="utf-8") as fh:
        rows = [r for r in csv.DictReader(fh) if r["table"] == table]
    groups: dict[tuple, dict] = defaultdict(dict)
    for r in rows:
        groups[(r["window"], r["model"], r["method"])][r["benchmark"]] = (float(r["value"]), int(r["line"]))
    errata = []
    for (window, model, method), cells in groups.items():
        values = [v for b, (v, _) in cells.items() if b != "average"]
        mean = sum(values) / len(values)
        printed, line = cells["average"]
        if abs(round(mean, 2) - printed) > 0.011:
            errata.append({"table": table, "window": int(window), "model": model, "method": method,
                           "printed_average": printed, "mean_of_cells": round(mean, 2), "paper_line": line})
    return rows, errata


def paired_statistics(runs: list[Run], done: dict, reference: str) -> list[dict]:
    by_cell = {(r.model, r.window, r.benchmark, r.method): done.get(r.name) for r in runs}
    out = []
    for (model, window, bench, method), got in by_cell.items():
        ref = by_cell.get((model, window, bench, reference))
        if method == reference or not got or not ref:
            continue
        shared = sorted(set(got["items"]) & set(ref["items"]))
        if not shared:
            continue
        a, b = [ref["items"][i] for i in shared], [got["items"][i] for i in shared]
        ci, mc = paired_bootstrap(a, b), mcnemar(a, b)
        out.append({"model": model, "window": window, "benchmark": bench, "method": method, "reference": reference,
                    "n": len(shared), "diff": 100 * ci["diff"], "low": 100 * ci["low"], "high": 100 * ci["high"],
                    "mcnemar_p": mc["p"], "b01": mc["b01"], "b10": mc["b10"]})
    return out


def figures(exp: Experiment, rows: list[dict], runs: list[Run], done: dict, out: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    written = []

    # Regenerating a report from the same results gives the same files: no creation date, fixed SVG element ids.
    plt.rcParams["svg.hashsalt"] = "medr2-report"
    no_date = {"png": {"Software": None}, "svg": {"Date": None}}

    def save(fig, stem):
        for ext in ("png", "svg"):
            fig.savefig(out / f"{stem}.{ext}", bbox_inches="tight", dpi=120, metadata=no_date[ext])
            written.append(f"{stem}.{ext}")
        plt.close(fig)

    first = [r for r in rows if (r["model"], r["window"]) == (rows[0]["model"], rows[0]["window"])]
    fig, ax = plt.subplots(figsize=(1.6 + 1.2 * len(exp.benchmarks) * max(1, len(first)) / 4, 3.2))
    width = 0.8 / max(1, len(first))
    for i, r in enumerate(first):
        ax.bar(np.arange(len(exp.benchmarks)) + i * width, [r[b] or 0 for b in exp.benchmarks], width,
               label=r["method"])
    ax.set_xticks(np.arange(len(exp.benchmarks)) + 0.4 - width / 2, exp.benchmarks)
    ax.set_ylabel("accuracy (%)")
    ax.set_title(f"{exp.name}: {rows[0]['model']}, window {rows[0]['window']} (missing cells drawn at 0)")
    ax.legend(fontsize=7, ncol=2)
    save(fig, "methods")

    windows = sorted({r["window"] for r in rows})
    index = {(r["model"], r["window"], r["method"]): r for r in rows}
    models = list(dict.fromkeys(r["model"] for r in rows))
    if len(windows) > 1 and {"direct", "medr2"} <= {r["method"] for r in rows}:
        grid = np.full((len(models) * len(windows), len(exp.benchmarks)), np.nan)
        for mi, model in enumerate(models):
            for wi, w in enumerate(windows):
                d, m = index.get((model, w, "direct")), index.get((model, w, "medr2"))
                for bi, b in enumerate(exp.benchmarks):
                    if d and m and d[b] and m[b] is not None:
                        grid[mi * len(windows) + wi, bi] = 100 * (m[b] - d[b]) / d[b]
        fig, ax = plt.subplots(figsize=(1.5 + 1.1 * len(exp.benchmarks), 0.9 + 0.35 * len(grid)))
        im = ax.imshow(grid, cmap="RdYlGn", aspect="auto")
        ax.set_xticks(range(len(exp.benchmarks)), exp.benchmarks, rotation=30)
        ax.set_yticks(range(len(grid)), [f"{m} {w // 1024}K" for m in models for w in windows])
        fig.colorbar(im, label="% improvement of Med-R² over direct")
        save(fig, "improvement_heatmap")

    points = [(done[r.name]["wall_seconds"], done[r.name]["score"], r.method) for r in runs if r.name in done]
    if points:
        fig, ax = plt.subplots(figsize=(4.5, 3.2))
        for method in dict.fromkeys(p[2] for p in points):
            xs, ys = zip(*[(x, y) for x, y, m in points if m == method])
            ax.scatter(xs, ys, label=method, s=18)
        ax.set_xscale("log")
        ax.set_xlabel("wall seconds per run (pre-pass + answering)")
        ax.set_ylabel("accuracy (%)")
        ax.legend(fontsize=7)
        save(fig, "accuracy_vs_cost")
    return written


def check_no_loss(exp: Experiment, done: dict) -> None:
    """A report rendered here must not hold fewer runs than the one it replaces: run folders are not in git, so on
    another machine (without run summaries) rendering would overwrite committed numbers with missing cells."""
    from ..errors import Medr2Error

    path = settings.results_dir() / exp.name / "report.md"
    found = re.search(r"^Runs with results: (\d+) of", path.read_text(encoding="utf-8"),
                      re.M) if path.is_file() else None
    if found and int(found.group(1)) > len(done):
        raise Medr2Error(f"{path} holds {found.group(1)} runs with results, but only {len(done)} have results here "
                         f"(run folders in {settings.results_dir() / 'runs'} or summaries in {path.parent / 'runs'}): "
                         f"run `medr2 sweep {exp.name}` first, or pass --force to render the smaller report")


def check_subsets(exp: Experiment, done: dict, allow: bool) -> list[str]:
    """Runs that evaluated part of a benchmark where the experiment asks for all of it (no ``limit``): an error
    naming them, unless ``allow``ed (then they are listed under the table)."""
    from ..errors import Medr2Error

    if exp.limit is not None:
        return []
    partial = [f"{name} ({got['subset']['items']} of {got['subset']['of']} items)" for name, got in done.items()
               if got.get("subset")]
    if partial and not allow:
        raise Medr2Error(f"{exp.name} asks for whole benchmarks, but {len(partial)} runs evaluated a subset: "
                         f"{', '.join(partial[:5])}; re-run them without a limit, or pass --allow_subset to show "
                         "them, marked as subsets")
    return partial


def render(exp: Experiment, force: bool = False, allow_subset: bool = False) -> Path:
    runs = expand(exp)
    done = load_runs(runs)
    if not force:
        check_no_loss(exp, done)
    partial = check_subsets(exp, done, allow_subset)
    write_summaries(runs, done)
    rows = result_rows(exp, runs, done)
    out = settings.results_dir() / exp.name
    out.mkdir(parents=True, exist_ok=True)
    _write_csv(out / "table.csv", exp, rows)
    reference = "direct" if "direct" in exp.methods else "vanilla_rag"
    stats = paired_statistics(runs, done, reference)
    missing = [r.name for r in runs if r.name not in done]
    md = rehearsal_header(exp) if exp.rehearsal else [f"# {exp.name}\n", exp.description or ""]
    if exp.limit is not None:
        md.append(f"\nItems: the first {exp.limit} of each benchmark (a fixed slice, not the benchmarks' scores).\n")
    if partial:
        md.append("\nSUBSET RUNS (--allow_subset; their cells are not the benchmarks' scores): " + ", ".join(partial)
                  + "\n")
    md.append(setting_lines(exp, runs))
    md += [f"\nRuns with results: {len(done)} of {len(runs)}; missing cells are "
           f"marked {MISSING}. Accuracy in % (RareArena: top-5 recall, by the run's LLM judge where it had one, else "
           "the offline Orphanet match, a lower bound; top-1 below. The paper does not name its RareArena metric: its "
           "GPT-4o cells lie between RareArena's published top-1 and top-5 recalls).\n\n",
           markdown_table(exp, rows)]
    md += packed_tokens_table(runs, done)
    md += loop_table(runs, done)
    md += delta_table(runs, done)
    md += evidence_tables(exp, runs, done)
    if exp.anchors:
        md += anchor_table(exp)
    top1 = {name: {**got, "score": got["top1"]} for name, got in done.items() if got.get("top1") is not None}
    if top1:
        md.append("\n## RareArena top-1 total recall (%)\n\n" + markdown_table(exp, result_rows(exp, runs, top1)))
    md += grading_table(runs, done)
    md += reading_table(runs, done)
    md += shots_table(runs, done)
    md += stats_table(stats, reference)
    md += cost_table(runs, done)
    md += reuse_lines(cache_reuse(runs, done))
    if exp.paper_table:
        md += paper_table_lines(exp)
    if missing:
        md.append("\nMissing runs: " + ", ".join(missing) + "\n")
    written = figures(exp, rows, runs, done, out) if done else []
    md.append("\nFigures: " + ", ".join(f"[{f}]({f})" for f in written if f.endswith(".png")) + "\n")
    atomic_write_text(out / "report.md", "".join(md))
    write_json(out / "stats.json", stats, ascii=True)
    return out


def _write_csv(path: Path, exp: Experiment, rows: list[dict]) -> None:
    buf = io.StringIO(newline="")
    writer = csv.DictWriter(buf, fieldnames=["model", "window", "method", "scoring", *exp.benchmarks, "average"])
    writer.writeheader()
    writer.writerows({k: ("" if v is None else round(v, 2) if isinstance(v, float) else v) for k, v in r.items()}
                     for r in rows)
    atomic_write_text(path, buf.getvalue())


def paper_table_lines(exp: Experiment) -> list[str]:
    """The paper's own cells of the experiment's table (experiments/paper_numbers.csv) and its errata."""
    paper = exp.paper_table
    cells, errata = paper_table(paper)
    md = [f"\n## The paper's Table {paper} (experiments/paper_numbers.csv)\n\nIts Average is over all of the "
          "table's benchmarks, as printed.\n\n"]
    wanted = set(exp.benchmarks) | {"average"}
    grouped: dict[tuple, dict] = defaultdict(dict)
    for c in cells:
        if c["benchmark"] in wanted:
            grouped[(c["window"], c["model"], c["method"])][c["benchmark"]] = c["value"]
    cols = [*exp.benchmarks, "average"]
    md.append("| window | model | method | " + " | ".join(cols) + " |\n|" + "---|" * (len(cols) + 3) + "\n")
    md += [f"| {w} | {m} | {meth} | " + " | ".join(v.get(c, MISSING) for c in cols) + " |\n"
           for (w, m, meth), v in grouped.items()]
    md.append("\nErrata (printed average ≠ mean of the printed cells; shown as printed above, not corrected):\n\n")
    md += [f"- Table {e['table']}, {e['model']}, {e['method']}, window {e['window']}: printed "
           f"{e['printed_average']}, cells give {e['mean_of_cells']} (paper text line {e['paper_line']})\n"
           for e in errata] or ["- none\n"]
    return md
