"""Where a run's evidence is: each retrieval task's stage runs (TREC files beside its pre-pass record), its index,
its packs; and a retrieval-only search of a collection's queries (``medr2 evidence --search``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from .. import settings
from ..errors import Medr2Error
from ..pipeline.stage_runs import read_run


@dataclass(frozen=True)
class RunEvidence:
    label: str  # "<run>:<task>"
    method: str
    benchmark: str
    index: str
    stages: dict[str, dict[str, list[str]]]  # stage -> question -> ranked doc ids
    questions: list[str]  # every item the run evaluated (a stage may have returned nothing for some)
    packs: Path | None


def run_folder(name_or_path: str) -> Path:
    path = Path(name_or_path)
    if (path / "run.json").is_file():
        return path
    named = settings.results_dir() / "runs" / name_or_path
    if (named / "run.json").is_file():
        return named
    raise Medr2Error(f"no run {name_or_path!r}: give a run folder (with run.json) or a name in "
                     f"{settings.results_dir() / 'runs'}")


def from_run(name_or_path: str) -> list[RunEvidence]:
    """The evidence of every retrieval task of one run (``medr2 eval`` folder)."""
    folder = run_folder(name_or_path)
    record = json.loads((folder / "run.json").read_text(encoding="utf-8"))
    out = []
    for task, pre in (record.get("prepass") or {}).items():
        runs = pre.get("stage_runs") or {}
        if not runs.get("folder") or not Path(runs["folder"]).is_dir():
            raise Medr2Error(f"{folder.name}: task {task} has no stage runs (made before they were recorded?): run it "
                             "again to score its evidence")
        stages = {s: read_run(Path(runs["folder"]) / f"{s}.trec") for s in runs["stages"]}
        packs = (pre.get("packs") or {}).get("packs")
        out.append(RunEvidence(f"{folder.name}:{task}", pre.get("method", "?"), pre.get("benchmark", "?"),
                               (pre.get("index") or {}).get("name", "?"), stages, pre["identity"]["eval_ids"],
                               Path(packs) if packs else None))
    if not out:
        raise Medr2Error(f"{folder.name}: no retrieval task (direct runs have no evidence to score)")
    return out


def search(index: str, queries: dict[str, str], k: int = 100) -> dict[str, dict[str, list[str]]]:
    """Each retriever's and the fused ranking of every query, searched directly (no method, no exclusion)."""
    from ..pipeline.stage_runs import StageRuns
    from ..retrieve.searcher import Searcher

    searcher = Searcher.open(index)
    ids, texts = list(queries), list(queries.values())
    runs = StageRuns(searcher.retrievers)
    for start in range(0, len(ids), 256):
        hits = searcher.search(texts[start:start + 256], k=k)
        for qid, row in zip(ids[start:start + 256], hits):
            runs.add_iteration(qid, 1, [h.to_json(with_text=False) for h in row], None, None, None)
    return {stage.removesuffix(".t1"): rows for stage, rows in runs.lists.items()}


def packed_texts(packs: Path) -> dict[str, str]:
    """The evidence each question was given (its prompt prefix), by question id, from a packs file and its identity."""
    stored = json.loads(packs.read_text(encoding="utf-8"))
    ids = stored["identity"]["eval_ids"]
    return {q: p["prefix"] for q, p in zip(ids, stored["packs"])}
