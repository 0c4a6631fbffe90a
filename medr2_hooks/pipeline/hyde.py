"""HyDE, Hypothetical Document Embeddings (Gao et al., 2022, "Precise Zero-Shot Dense Retrieval without Relevance
Labels"): a baseline this harness adds beside vanilla RAG; the Med-R² paper does not run it.

1. **Write**: the ``hyde`` role's model writes a passage that answers the question, from the question stem only
   (never the options, never an answer): the original's prompt, ``Please write a passage to answer the question``.
2. **Retrieve**: the dense retriever searches with the passage encoded on the encoder's *document* side, averaged
   with the question's query-side embedding, as the original averages them
   (:meth:`~medr2_hooks.retrieve.searcher.Searcher.document_side_vectors`). An unusable passage (a few characters, no
   words) leaves the question's embedding alone, counted (``hyde_fallbacks``).
3. **Pack**: then vanilla RAG's packing and prompt: the top ``coarse_k`` candidates in retrieval order, as many as
   fit the window's evidence share, no demonstrations, no reasoning.

Where this differs from the original: it samples 8 passages at temperature 0.7 and averages them all; the backends
here decode greedily (a cached stage must give the same passage again), so one passage is written.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..config import in_range
from ..data.record import Demo, Question
from ..evidence.stage_runs import StageRuns
from ..reformulate import usable
from .declare import Stage, always, register
from .packing import finish, select_evidence
from .stages import OWN_RANK, PACK, RETRIEVE
from .toolbox import GENERATION_VERSION, StageToolbox


@dataclass(frozen=True)
class HydeOptions:
    """HyDE's own settings (a method config's ``options: {hyde: {...}}``)."""
    passage_max_new_tokens: int = 512  # the original's; the CPU settings cut it (experiments/settings.yaml)

    def __post_init__(self):
        in_range(self, "passage_max_new_tokens", 1)


def passage_prompt(backend, question: str) -> str:
    """The original's instruction (its web-search prompt), in the role model's chat template."""
    return backend.chat(f"Please write a passage to answer the question.\nQuestion: {question}") + "Passage:"


def write_passages(m: StageToolbox, questions: list[Question]) -> list[str]:
    """A hypothetical answer passage per question, from its stem (an unusable one replaced by "" and counted)."""
    options = HydeOptions(**m.cfg.options["hyde"])

    def compute(stems):
        backend = m.llm("hyde")
        replies = backend.generate([passage_prompt(backend, q) for q in stems], options.passage_max_new_tokens,
                                   stop=["\nQuestion:"], role="hyde")
        return [r.strip() for r in replies]

    passages = m.cached("hyde_passage", [q.question for q in questions],
                        {"model": m.ids["hyde"], "max_new_tokens": options.passage_max_new_tokens,
                         "version": GENERATION_VERSION}, compute)
    passages = [p if usable(p) else "" for p in passages]
    m.counts["hyde_fallbacks"] += sum(not p for p in passages)
    return passages


STAGES = (
    Stage("hyde_passage", "reformulate", ("hyde",), "question stem", "a hypothetical answer passage", shape=str),
    RETRIEVE.under(always, reads="question stem (query side), its passage (document side)"),
    OWN_RANK,
    PACK.under(always, reads="evidence"),
)


@register("hyde", STAGES, options=HydeOptions)
def prepare(m: StageToolbox, benchmark: str, questions: list[Question], demos: list[Demo],
            scoring: str = "letters", answer: str = "default") -> tuple[list[dict], dict]:
    """Evidence packs for ``questions`` (zero-shot, as vanilla RAG: the demonstration pool is not used)."""
    if answer != "default":
        raise ValueError(f"HyDE answers in the benchmark's own format, not {answer!r}")
    started = time.perf_counter()
    runs = StageRuns(m.searcher.retrievers)
    passages = write_passages(m, questions)
    candidates = m.retrieve([q.question for q in questions], [q.exclude_pmid for q in questions], passages)
    selected = [select_evidence(m, hits[: m.cfg.coarse_k]) for hits in candidates]
    for q, cand, sel in zip(questions, candidates, selected):
        runs.add_iteration(q.id, 1, cand, None, None, sel)
    return finish(m, benchmark, questions, selected, [None] * len(questions), runs, started, scoring,
                  kept=[1] * len(questions),
                  provenance=[{"hyde_passage": p, "retrieved_ids": [h["doc_id"] for h in cand], "iterations": [],
                               "stopped_at": None} for p, cand in zip(passages, candidates)])
