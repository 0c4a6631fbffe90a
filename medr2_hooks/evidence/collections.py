"""Test collections with relevance judgements: a corpus (an index recipe), queries and qrels.

- ``bioasq_gold``: one document per BioASQ gold PubMed id (its gold snippets; ``index/bioasq_gold.yaml``, and
  ``bioasq_gold_bge`` with the paper's retrievers), queries the 2,310 question bodies, qrels each question's gold
  PubMed ids that are in the corpus. Every document is some question's gold evidence: a run over it measures
  retrieval, and its accuracy is a gold-corpus upper bound.
- ``pubmedqa_abstracts``: the 1,000 PQA-L abstracts (``index/pubmedqa_abstracts.yaml``), qrels each question's
  own PubMed id. The PubMedQA tasks exclude that abstract from a question's evidence, so over this collection a
  method's retrieval is scored by ``medr2 evidence --search`` (no exclusion), never by its runs.

Benchmarks whose items are a collection's queries (their ids are the query ids) are listed with it, so a run of such
a benchmark over the collection's index is scored against the qrels.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from .. import settings
from ..errors import DataError, UnknownNameError


@dataclass(frozen=True)
class Collection:
    name: str
    indexes: tuple[str, ...]  # recipes whose corpus is this collection's (CPU first)
    benchmarks: tuple[str, ...]  # benchmarks whose item ids are query ids here
    description: str

    def queries(self) -> dict[str, str]:
        return dict(_load(self.name)[0])

    def qrels(self) -> dict[str, dict[str, int]]:
        return {q: dict(docs) for q, docs in _load(self.name)[1]}


COLLECTIONS = {c.name: c for c in (
    Collection("bioasq_gold", ("bioasq_gold", "bioasq_gold_bge"), ("bioasq_yn", "mirage_bioasq"),
               "BioASQ 7B-11B gold evidence: 13,449 PubMed documents (gold snippets), 2,310 questions"),
    Collection("pubmedqa_abstracts", ("pubmedqa_abstracts",), (),
               "PubMedQA PQA-L: 1,000 abstracts, each question's own abstract relevant"),
)}


def collection(name: str) -> Collection:
    if name not in COLLECTIONS:
        raise UnknownNameError("test collection", name, list(COLLECTIONS))
    return COLLECTIONS[name]


def for_index(index: str) -> Collection | None:
    """The collection whose corpus an index holds (None: an index without relevance judgements)."""
    return next((c for c in COLLECTIONS.values() if index in c.indexes), None)


@lru_cache(maxsize=4)
def _load(name: str) -> tuple[tuple, tuple]:
    root = settings.data_dir()
    if root is None:
        raise DataError("test collections read the benchmark files: set MEDR2_DATA_DIR")
    if name == "bioasq_gold":
        from ..data import bioasq

        questions = bioasq.questions(root)
        corpus = {pmid for pmid, _ in bioasq.gold_documents(root)}
        queries = tuple((q["id"], q["body"]) for q in questions)
        qrels = tuple((q["id"], tuple((d, 1) for d in q["gold"] if d in corpus)) for q in questions)
        return queries, tuple((q, d) for q, d in qrels if d)
    from ..data import pubmedqa

    records = pubmedqa.load(root)
    return tuple((r.id, r.question) for r in records), tuple((r.id, ((f"pmid:{r.id}", 1),)) for r in records)
