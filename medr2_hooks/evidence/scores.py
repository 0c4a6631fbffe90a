"""Evidence scores: each stage's ranked documents against a collection's relevance judgements.

Measures are computed by ``ir_measures`` (its pytrec_eval backend: trec_eval's definitions, the names IR papers
use): recall at 1, 10, 32 and 100, nDCG@10, reciprocal rank within 100, and ``Success@1000`` (at least one gold document
anywhere in the list: for the packed evidence, "gold in what the target read"). A question that a stage returned
nothing for scores 0 (trec_eval would leave it out). Paired comparisons resample the questions two runs share.
"""

from __future__ import annotations

from dataclasses import dataclass

MEASURES = ("R@1", "R@10", "R@32", "R@100", "nDCG@10", "RR@100", "Success@1000")
PAIRED = ("R@10", "nDCG@10", "Success@1000")  # the measures runs are compared on, with bootstrap intervals


@dataclass(frozen=True)
class StageScore:
    run: str
    stage: str
    n: int  # questions scored (those with relevance judgements)
    means: dict[str, float]
    items: dict[str, dict[str, float]]  # measure -> question id -> value


def score(run: dict[str, list[str]], qrels: dict[str, dict[str, int]], questions: list[str],
          names: tuple[str, ...] = MEASURES) -> dict[str, dict]:
    """``{measure: {question: value}}`` over ``questions`` (each must have judgements)."""
    import ir_measures

    measures = [ir_measures.parse_measure(m) for m in names]
    judged = [ir_measures.Qrel(q, d, rel) for q in questions for d, rel in qrels[q].items()]
    ranked = []
    for q in questions:
        docs = list(dict.fromkeys(run.get(q, [])))  # a document listed twice keeps its first rank
        ranked += [ir_measures.ScoredDoc(q, d, float(len(docs) - i)) for i, d in enumerate(docs)]
    out = {m: dict.fromkeys(questions, 0.0) for m in names}
    for metric in ir_measures.iter_calc(measures, judged, ranked):
        out[str(metric.measure)][metric.query_id] = float(metric.value)
    return out


ALL_JUDGED = ("R@10", "R@100")  # recall also over every judged document, those the collection lacks included


def stage_scores(label: str, stages: dict[str, dict[str, list[str]]], qrels: dict[str, dict[str, int]],
                 questions: list[str], all_qrels: dict[str, dict[str, int]] | None = None) -> list[StageScore]:
    """Every stage of one run, over the run's ``questions`` that have relevance judgements (a stage that returned
    nothing for one scores 0 there: a TREC file has no line for it). With ``all_qrels`` (every judged document,
    where the collection lacks some), recall over those too: ``R@10 (all judged)``, ``R@100 (all judged)``."""
    questions = sorted(q for q in questions if qrels.get(q))
    extra = all_qrels is not None and any(all_qrels.get(q) != qrels.get(q) for q in questions)
    out = []
    for stage, run in stages.items():
        if not questions:
            continue
        items = score(run, qrels, questions)
        means = {m: sum(v.values()) / len(v) for m, v in items.items()}
        if extra:
            wider = score(run, all_qrels, questions, ALL_JUDGED)
            means |= {f"{m} (all judged)": sum(v.values()) / len(v) for m, v in wider.items()}
        out.append(StageScore(label, stage, len(questions), means, items))
    return out


def check_judged(label: str, stages: dict[str, dict[str, list[str]]], qrels: dict[str, dict[str, int]],
                 collection: str) -> list[str]:
    """The stages that ranked nothing (to be flagged beside the others); a Medr2Error when nothing can be scored:
    no stage ranked a document, or none of the ranked documents is judged in ``collection`` (the run searched
    another corpus, or the collection is not the one its index holds: every score would be 0)."""
    from ..errors import Medr2Error

    ranked = {d for run in stages.values() for docs in run.values() for d in docs}
    if not ranked:
        raise Medr2Error(f"{label}: its stages ranked no document: nothing to score")
    judged = {d for docs in qrels.values() for d in docs}
    if not ranked & judged:
        raise Medr2Error(f"{label}: none of the {len(ranked)} documents it ranked is judged in collection "
                         f"{collection!r} ({len(judged)} judged documents): it searched another corpus; score it "
                         "against the collection its index holds")
    return [s for s, run in stages.items() if not any(run.values())]


def paired(a: StageScore, b: StageScore, measure: str) -> dict | None:
    """``b − a`` on the questions both scored, with the bootstrap 95% interval (None when they share none)."""
    from ..stats import paired_bootstrap

    shared = sorted(set(a.items[measure]) & set(b.items[measure]))
    if not shared:
        return None
    got = paired_bootstrap([a.items[measure][q] for q in shared], [b.items[measure][q] for q in shared])
    return {"measure": measure, "stage": a.stage, "a": a.run, "b": b.run, **got}


def answer_in_evidence(texts: dict[str, str], answers: dict[str, str]) -> dict[str, float]:
    """Per question: 1 when the gold option's text appears in the packed evidence (case-insensitive). A weak signal
    where no judgements exist (MedQA with the textbooks, MedMCQA, MMLU): an answer's words in a passage are neither
    needed nor sufficient for it to be evidence."""
    return {q: float(bool(answers.get(q)) and answers[q].lower() in texts.get(q, "").lower()) for q in texts}


def summarize(prepass: dict) -> dict:
    """The evidence scores of a run's retrieval tasks whose index holds a test collection: per task, per stage
    (``packed`` and every stage of the kept iteration), the mean of each measure over the judged questions, and the
    per-question values of the compared measures (what a report's paired statistics resample)."""
    from pathlib import Path

    from .stage_runs import read_run
    from .collections import for_index

    out = {}
    for task, record in prepass.items():
        own = (record or {}).get("own_article")
        if own:  # PubMedQA: where the excluded own abstract would have ranked (not evidence the target saw)
            out[task] = {"own_article": {k: v for k, v in own.items() if k != "ranks"}}
        col = for_index(((record or {}).get("index") or {}).get("name", ""))
        runs = (record or {}).get("stage_runs") or {}
        if col is None:
            weak = answer_recall(record or {})
            if weak is not None:
                out[task] = {**out.get(task, {}), **weak}
            continue
        if not runs.get("folder") or not Path(runs["folder"]).is_dir():
            continue
        stages = {s: read_run(Path(runs["folder"]) / f"{s}.trec") for s in runs["stages"]
                  if s == "packed" or s.endswith(".final")}
        scored = stage_scores(task, stages, col.qrels(), record["identity"]["eval_ids"], col.qrels("all"))
        out[task] = {**out.get(task, {}), "collection": col.name, "stages": {
            r.stage: {"n": r.n, **{m: round(v, 4) for m, v in r.means.items()},
                      "items": {m: {q: round(v, 4) for q, v in r.items[m].items()} for m in PAIRED}}
            for r in scored}}
    return out


def answer_recall(record: dict) -> dict | None:
    """Where no judgements exist: how often the gold option's text appears in the packed evidence (a weak signal,
    labelled so), read from the packs and the benchmark's gold answers (the scorer's side; no stage saw them)."""
    from pathlib import Path

    from .. import data
    from ..errors import Medr2Error

    packs = Path(((record.get("packs") or {}).get("packs")) or "")
    if not packs.is_file() or not record.get("benchmark"):
        return None
    from .runs import packed_texts

    texts = packed_texts(packs)
    try:
        gold = {r.id: r.options.get(r.answer, r.answer) for r in data.pools(record["benchmark"]).eval if r.id in texts}
    except Medr2Error:  # a benchmark whose files are not here has no weak signal to give
        return None
    hits = answer_in_evidence({q: t for q, t in texts.items() if q in gold}, gold)
    if not hits:
        return None
    return {"collection": None, "answer_in_evidence": round(sum(hits.values()) / len(hits), 4), "n": len(hits),
            "note": "weak signal: the gold option's text appears in the packed evidence (no relevance judgements)"}
