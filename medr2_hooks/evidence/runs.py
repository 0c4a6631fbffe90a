"""Where a run's evidence is: each retrieval task's stage runs (TREC files beside its pre-pass record), its index,
its packs; and a retrieval-only search of a collection's queries (``medr2 evidence --search``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .. import settings
from ..errors import Medr2Error
from .stage_runs import read_run


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
    """The evidence of every retrieval task of one run (``medr2 eval`` folder); a damaged ``run.json`` or stage run
    is a DataError naming the file and the field."""
    from ..errors import DataError
    from ..fs import read_json

    folder = run_folder(name_or_path)
    path = folder / "run.json"
    record = read_json(path, "run record")
    if not isinstance(record, dict):
        raise DataError(f"{path}: expected a run record (a JSON object), found {type(record).__name__}")
    prepass = record.get("prepass") or {}
    if not isinstance(prepass, dict):
        raise DataError(f"{path}: field 'prepass' must be an object of tasks, found {type(prepass).__name__}")
    out = []
    for task, pre in prepass.items():
        where = f"{path}: prepass.{task}"
        if not isinstance(pre, dict):
            raise DataError(f"{where} must be an object, found {type(pre).__name__}")
        runs = pre.get("stage_runs") or {}
        if not isinstance(runs, dict) or not runs.get("folder") or not Path(str(runs["folder"])).is_dir():
            raise Medr2Error(f"{folder.name}: task {task} has no stage runs (made before they were recorded?): run it "
                             "again to score its evidence")
        stages = runs.get("stages")
        if not isinstance(stages, list) or not all(isinstance(x, str) for x in stages):
            raise DataError(f"{where}.stage_runs.stages must be a list of stage names, found {stages!r:.80}")
        eval_ids = (pre.get("identity") or {}).get("eval_ids") if isinstance(pre.get("identity"), dict) else None
        if not isinstance(eval_ids, list) or not all(isinstance(x, str) for x in eval_ids):
            raise DataError(f"{where}.identity.eval_ids must be the list of the questions it evaluated, found "
                            f"{eval_ids!r:.80}")
        index = pre.get("index") if isinstance(pre.get("index"), dict) else {}
        packs = (pre.get("packs") or {}).get("packs") if isinstance(pre.get("packs"), dict) else None
        out.append(RunEvidence(f"{folder.name}:{task}", str(pre.get("method") or "?"),
                               str(pre.get("benchmark") or "?"), str(index.get("name") or "?"),
                               {s: read_run(Path(runs["folder"]) / f"{s}.trec") for s in stages}, eval_ids,
                               Path(packs) if isinstance(packs, str) and packs else None))
    if not out:
        raise Medr2Error(f"{folder.name}: no retrieval task (direct runs have no evidence to score)")
    return out


def search(index: str, queries: dict[str, str], k: int = 100) -> dict[str, dict[str, list[str]]]:
    """Each retriever's and the fused ranking of every query, searched directly (no method, no exclusion)."""
    from .stage_runs import StageRuns
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
    from ..fs import read_json

    stored = read_json(packs, "packs file")
    ids = stored["identity"]["eval_ids"]
    return {q: p["prefix"] for q, p in zip(ids, stored["packs"])}
