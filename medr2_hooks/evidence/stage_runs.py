"""Each stage's ranked documents, per question and iteration, as TREC run files: what ``medr2 evidence`` scores
against gold evidence, so a researcher sees which stage found, kept or lost the evidence.

Stages (``<stage>.t<t>`` per iteration, ``<stage>.final`` for the iteration the method kept): each retriever's own
ranking (``dense``, ``bm25``, ``splade``: the union's members in that retriever's order), the fused candidate set D
(``fused``), the coarse set S^c (``coarse``), the fine ranking S^f by F after the conflict filter (``fine``), the
evidence selected within the window (``selected``); and ``packed``, what the target's prompt holds. Documents are
identified by ``doc_id`` (a passage's document); a document listed twice keeps its first rank.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..fs import atomic_write_text, safe_component


class StageRuns:
    def __init__(self, retrievers: tuple[str, ...] = ()):
        self.retrievers = tuple(retrievers)
        self.lists: dict[str, dict[str, list[str]]] = {}  # stage -> question id -> ranked doc ids
        self._by_iteration: dict[tuple[str, int], dict[str, list[str]]] = {}

    def _put(self, stage: str, qid: str, hits: list[dict]) -> None:
        ranked = list(dict.fromkeys(h["doc_id"] for h in hits))
        self.lists.setdefault(stage, {})[qid] = ranked

    def add_iteration(self, qid: str, t: int, candidates: list[dict], coarse: list[dict] | None,
                      fine: list[dict] | None, selected: list[dict] | None) -> None:
        stages = {}
        for name in self.retrievers:
            own = sorted((h for h in candidates if name in (h.get("ranks") or {})), key=lambda h: h["ranks"][name])
            stages[name] = own
        stages["fused"] = candidates
        for name, hits in (("coarse", coarse), ("fine", fine), ("selected", selected)):
            if hits is not None:
                stages[name] = hits
        for name, hits in stages.items():
            self._put(f"{name}.t{t}", qid, hits)
        self._by_iteration[(qid, t)] = {name: self.lists[f"{name}.t{t}"][qid] for name in stages}

    def add_packed(self, qid: str, used: list[dict], final_t: int | None) -> None:
        """What the prompt holds, and every stage of the iteration the method kept as ``<stage>.final``."""
        self._put("packed", qid, used)
        for name, ranked in self._by_iteration.get((qid, final_t), {}).items():
            self.lists.setdefault(f"{name}.final", {})[qid] = ranked

    def for_items(self, ids: set[str]) -> dict[str, dict[str, list[str]]]:
        return {stage: {q: r for q, r in rows.items() if q in ids} for stage, rows in sorted(self.lists.items())}


def own_article_summary(ranks: dict[str, dict[str, int | None]], depth: int = 100) -> dict:
    """Where the questions' excluded own articles would have ranked (``StageToolbox.own_article_ranks``): per retriever
    and fused, how many questions had it at rank 1, within 10, within ``depth``, and its median rank among those found;
    with the per-question ranks."""
    names = sorted({name for r in ranks.values() for name in r}, key=lambda n: (n == "fused", n))
    per = {}
    for name in names:
        got = sorted(r[name] for r in ranks.values() if r.get(name) is not None)
        per[name] = {"at_1": sum(x == 1 for x in got), "within_10": sum(x <= 10 for x in got),
                     f"within_{depth}": len(got), "median_rank": float(np.median(got)) if got else None}
    return {"n": len(ranks), "depth": depth, "query": "question stem", "by_retriever": per, "ranks": ranks}


def trec_text(rows: dict[str, list[str]], run_name: str) -> str:
    """TREC run lines ``qid Q0 doc rank score run``: scores descend with rank (ties never reorder a list)."""
    lines = []
    for qid, ranked in rows.items():
        n = len(ranked)
        lines += [f"{qid} Q0 {doc} {rank} {n - rank} {run_name}" for rank, doc in enumerate(ranked, 1)]
    return "\n".join(lines) + ("\n" if lines else "")


def write_runs(folder: Path, runs: dict[str, dict[str, list[str]]], run_name: str) -> list[str]:
    """One ``<stage>.trec`` file per stage in ``folder``; the stage names written."""
    folder.mkdir(parents=True, exist_ok=True)
    for stage, rows in runs.items():
        atomic_write_text(folder / f"{safe_component(stage, 'stage')}.trec", trec_text(rows, run_name))
    return list(runs)


def read_run(path: Path) -> dict[str, list[str]]:
    """A TREC run file as ``{qid: ranked doc ids}`` (by descending score, then rank); a missing file or a line
    that is not ``qid Q0 doc rank score tag`` is a DataError naming the file and line."""
    import math

    from ..errors import DataError, RowError

    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DataError(f"{path}: stage run file missing (the run folder is incomplete)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: cannot be read as a TREC run ({exc})") from None
    rows: dict[str, list[tuple[float, int, str]]] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split()
        if len(fields) != 6:
            raise RowError(path, lineno, None, f"a TREC run line has 6 fields (qid Q0 doc rank score tag), "
                                               f"found {len(fields)}")
        qid, _, doc, rank, score, _ = fields
        try:
            value = float(score)
        except ValueError:
            raise RowError(path, lineno, "score", f"not a number: {score!r}") from None
        if not rank.isascii() or not rank.isdigit() or not math.isfinite(value):
            raise RowError(path, lineno, "rank" if not rank.isdigit() else "score",
                           f"expected a whole rank and a finite score, found {rank!r} {score!r}")
        rows.setdefault(qid, []).append((-value, int(rank), doc))
    return {q: [d for _, _, d in sorted(items)] for q, items in rows.items()}
