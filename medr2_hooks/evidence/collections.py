"""Test collections with relevance judgements: a corpus (an index recipe), queries and qrels.

- ``bioasq_gold``: BioASQ's gold snippets grouped per PubMed id, one document each (not the abstracts;
  ``index/bioasq_gold.yaml``, and ``bioasq_gold_bge`` with the paper's retrievers), queries the 2,310 question
  bodies. A question's relevant documents are its gold documents and the documents its gold snippets come from;
  scores use those the collection holds (what a run can retrieve), and recall is also given over all of them
  (``R@10 (all judged)``, ``R@100 (all judged)``), which counts the judged documents the collection lacks. Every
  document is some question's gold evidence: a run over it measures retrieval, and its accuracy is a gold-corpus
  upper bound.
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

    def qrels(self, scope: str = "collection") -> dict[str, dict[str, int]]:
        """Each question's relevant documents: those the collection holds, or with ``scope="all"`` every judged
        document (recall over these counts what the collection lacks)."""
        return {q: dict(docs) for q, docs in _load(self.name)[1 if scope == "collection" else 2]}


COLLECTIONS = {c.name: c for c in (
    Collection("bioasq_gold", ("bioasq_gold", "bioasq_gold_bge"), ("bioasq_yn", "mirage_bioasq"),
               "BioASQ 7B-11B gold snippets per PubMed id: 13,449 documents (snippets, not abstracts), 2,310 "
               "questions; relevant: gold documents and snippet documents"),
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
        judged = [(q["id"], list(dict.fromkeys(q["gold"] + [d for d, _ in q["snippets"]]))) for q in questions]
        held = tuple((q, tuple((d, 1) for d in docs if d in corpus)) for q, docs in judged)
        every = tuple((q, tuple((d, 1) for d in docs)) for q, docs in judged)
        kept = {q for q, d in held if d}  # a question none of whose documents the collection holds is not scored
        return queries, tuple((q, d) for q, d in held if q in kept), tuple((q, d) for q, d in every if q in kept)
    from ..data import pubmedqa

    records = pubmedqa.load(root)
    qrels = tuple((r.id, ((f"pmid:{r.id}", 1),)) for r in records)
    return tuple((r.id, r.question) for r in records), qrels, qrels
