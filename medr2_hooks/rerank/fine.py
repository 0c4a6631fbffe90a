"""Fine rerank, paper Eq. 1:  F(x) = f_h(x) · f_g(x) · (1 + α · f_u(x)),  α = 1.

- ``f_h = 9 − (e − 1)`` for the evidence level ``e ∈ 1..9`` (1 = meta-analysis … 9 = expert opinion), from
  the leveler; documents whose source type is *guideline* are fixed at ``e = 3`` (``f_h = 7``).
- ``f_g = Σ_{c ∈ C(q)} p(x | c)``: the document's 16-way genre distribution (typer) summed over the genres the
  question type expects (the authors' Figure 8 projection, with *process* added to the directive group).
- ``f_u = max(ℓ_init − ℓ_x, 0)``: the usefulness proxy's mean token cross-entropy of the *reference answer*
  (from ``M_F``, never the gold label) without any document and with document ``x`` in the prompt.
- Conflict filtering: among the top documents, pairs judged to contradict each other lose the side with the
  lower evidence level (higher ``e``; ties: lower coarse score).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from ..config import in_range
from ..corpus.document import GUIDELINE_LEVEL
from ..llm.closed_set import answer_instruction, choice_distribution, label_distribution, lettered

# evidence level name -> e (1 = most credible); f_h = 9 − (e − 1): meta-analysis 9 ... expert opinion 1
EVIDENCE_LEVELS = {
    "meta-analysis": 1,
    "systematic review": 2,
    "practice guideline": 3,
    "randomized controlled trial": 4,
    "non-randomized controlled trial": 5,
    "cohort study": 6,
    "case series": 7,
    "case report": 8,
    "expert opinion": 9,
}

DOC_TYPES = ("argumentation", "definition", "description", "explanation", "purpose", "narration", "process",
             "instruction", "command", "problem-solving", "comparison", "evaluation", "classification", "condition",
             "prediction", "cause-and-effect")

_GROUPS = (
    (("factual", "referential", "definition", "explanatory", "descriptive"),
     ("argumentation", "definition", "description", "explanation", "purpose", "narration")),
    (("directive", "opinion", "procedural"), ("purpose", "instruction", "command", "problem-solving", "process")),
    (("comparative", "evaluative", "verification"), ("comparison", "evaluation", "classification")),
    (("hypothetical",), ("condition", "prediction", "cause-and-effect")),
)
EXPECTED_DOC_TYPES: dict[str, tuple[str, ...]] = {q: genres for qtypes, genres in _GROUPS for q in qtypes}


def f_h(level: int) -> float:
    if not 1 <= level <= 9:
        raise ValueError(f"evidence level must be 1..9, found {level}")
    return float(9 - (level - 1))


def f_g(doc_type_probs: dict[str, float], question_type: str) -> float:
    return float(sum(doc_type_probs.get(c, 0.0) for c in EXPECTED_DOC_TYPES[question_type]))


def f_u(loss_without: float, loss_with: float) -> float:
    return max(loss_without - loss_with, 0.0)


def fine_score(fh: float, fg: float, fu: float, alpha: float = 1.0) -> float:
    return fh * fg * (1.0 + alpha * fu)


# -- the model-backed factors (document-only ones are cached per document by the pipeline) ----------------------
def level_prompt(document: str, scoring: str = "letters") -> str:
    return (f"Text: {document}\n\nWhich kind of evidence is this medical text?\n{lettered(list(EVIDENCE_LEVELS))}\n"
            f"{answer_instruction('kind of evidence', scoring)}\nAnswer:")


def doc_type_prompt(document: str, scoring: str = "letters") -> str:
    return (f"Text: {document}\n\nWhich kind of text is this?\n{lettered(list(DOC_TYPES))}\n"
            f"{answer_instruction('kind of text', scoring)}\nAnswer:")


def evidence_levels(backend, documents: list[str], source_types: list[str], scoring: str = "letters") -> list[dict]:
    """``{"level": e, "probs": {...}}`` per document; guidelines fixed at e = 3 without a model call."""
    need = [i for i, s in enumerate(source_types) if s != "guideline"]
    probs = choice_distribution(backend, [level_prompt(documents[i], scoring) for i in need], list(EVIDENCE_LEVELS),
                                "leveler", scoring)
    out = [{"level": GUIDELINE_LEVEL, "probs": None, "fixed": True} for _ in documents]
    for i, p in zip(need, probs):
        name = list(EVIDENCE_LEVELS)[int(np.argmax(p))]
        out[i] = {"level": EVIDENCE_LEVELS[name], "probs": dict(zip(EVIDENCE_LEVELS, map(float, p))), "fixed": False}
    return out


def doc_type_distributions(backend, documents: list[str], scoring: str = "letters") -> list[dict[str, float]]:
    probs = choice_distribution(backend, [doc_type_prompt(d, scoring) for d in documents], list(DOC_TYPES),
                                "doc_typer", scoring)
    return [dict(zip(DOC_TYPES, map(float, p))) for p in probs]


def answer_prompt(question: str, document: str | None) -> str:
    """The usefulness proxy's prompt. ``document=None`` is the no-document row: it truly has no document."""
    head = f"Document: {document}\n\n" if document is not None else ""
    return f"{head}Question: {question}\nAnswer:"


def answer_losses(backend, items: list[tuple[str, str, list[str]]]) -> list[tuple[float, list[float]]]:
    """For each ``(question, reference, documents)``: ``ℓ_init`` and ``ℓ_x`` per document, the mean token
    cross-entropy of ``" " + reference``. The ``k + 1`` rows of every question go to the backend in one batch."""
    prompts, continuations, sizes = [], [], []
    for question, reference, documents in items:
        rows = [answer_prompt(question, None)] + [answer_prompt(question, d) for d in documents]
        prompts += rows
        continuations += [f" {reference}"] * len(rows)
        sizes.append(len(rows))
    losses = [-lp / n for lp, n in backend.score(prompts, continuations, role="proxy")] if prompts else []
    out, start = [], 0
    for size in sizes:
        out.append((losses[start], losses[start + 1:start + size]))
        start += size
    return out


def conflict_prompt(a: str, b: str) -> str:
    return f"Text A: {a}\n\nText B: {b}\n\nDo texts A and B state facts that contradict each other (yes or no)? Answer:"


@dataclass(frozen=True)
class ConflictConfig:
    top: int = 5  # judge pairs among this many best documents: at most top·(top−1)/2 judgements a question
    threshold: float = 0.5  # p(yes) above this is a conflict

    def __post_init__(self):
        in_range(self, "top", 0)
        in_range(self, "threshold", 0, 1)


def conflicts(backend, document_sets: list[list[str]], cfg: ConflictConfig) -> list[list[tuple[int, int, float]]]:
    """Per document set, the conflicting pairs ``(i, j, p_yes)`` among its ``cfg.top`` first documents; the
    pairs of every set are judged in one batched call."""
    pairs = [(s, i, j) for s, docs in enumerate(document_sets)
             for i, j in itertools.combinations(range(min(cfg.top, len(docs))), 2)]
    probs = label_distribution(backend, [conflict_prompt(document_sets[s][i], document_sets[s][j]) for s, i,
                                         j in pairs],
                               ["yes", "no"], "conflict")
    out: list[list[tuple[int, int, float]]] = [[] for _ in document_sets]
    for (s, i, j), p in zip(pairs, probs):
        if p[0] > cfg.threshold:
            out[s].append((i, j, float(p[0])))
    return out


def drop_conflicting(levels: list[int], coarse: list[float], conflicting: list[tuple[int, int, float]]) -> set[int]:
    """Indices to drop: for each conflicting pair, the lower-level side (larger e; ties: lower coarse score)."""
    dropped: set[int] = set()
    for i, j, _ in conflicting:
        if i in dropped or j in dropped:
            continue
        loser = j if (levels[j], -coarse[j]) >= (levels[i], -coarse[i]) else i  # full tie: the later one
        dropped.add(loser)
    return dropped


# -- the stage: Eq. 1 assembled over a toolbox's cached judges --------------------------------------------------
def rerank(m, questions: list, labels: list[dict], refs: list[dict], coarse: list[list[dict]]) -> list[list[dict]]:
    """The fine rerank stage of the toolbox ``m`` (a :class:`~medr2_hooks.pipeline.toolbox.StageToolbox`): Eq. 1 for
    every coarse document — f_h from the leveler, f_g from the typer and the question type, f_u from the usefulness
    proxy's losses on the reference answer — then the conflict filter, sorted by F. Each factor is its own cached
    stage (``evidence_level``, ``doc_type``, ``usefulness``, ``conflict``)."""
    if not m.cfg.rerank:
        return [[{**h, "evidence_level": h.get("evidence_level"), "f_h": None, "f_g": None, "f_u": None, "F": None}
                 for h in hits] for hits in coarse]
    cfg, judge_len = m.cfg, m.cfg.max_doc_tokens
    docs = {_doc_key(h): h for hits in coarse for h in hits}
    keys = list(docs)

    def judged(role: str, texts: list[str]):
        """The role's backend and the texts cut to the judges' length."""
        backend = m.llm(role)
        return backend, [backend.truncate(t, judge_len) for t in texts]

    levels = dict(zip(keys, m.cached(
        "evidence_level", [[docs[k]["text"], docs[k]["source_type"]] for k in keys],
        {"model": m.ids["leveler"], "max_doc_tokens": judge_len, "labels": m.label_rule},
        lambda xs: evidence_levels(*judged("leveler", [x[0] for x in xs]), [x[1] for x in xs],
                                        cfg.label_scoring))))
    types = dict(zip(keys, m.cached(
        "doc_type", [docs[k]["text"] for k in keys],
        {"model": m.ids["doc_typer"], "max_doc_tokens": judge_len, "labels": m.label_rule},
        lambda xs: doc_type_distributions(*judged("doc_typer", xs), cfg.label_scoring))))

    def losses(items):
        # Rule: an empty reference answer (M_F generated nothing) has no loss to lower: f_u = 0, counted above.
        backend = m.llm("proxy")
        scorable = [x for x in items if x["ref"].strip()]
        asked = [(x["q"], x["ref"], [backend.truncate(d, judge_len) for d in x["docs"]]) for x in scorable]
        scored = iter(answer_losses(backend, asked) if scorable else [])
        return [dict(zip(("init", "docs"), next(scored))) if x["ref"].strip()
                else {"init": None, "docs": [None] * len(x["docs"])} for x in items]

    def judge_conflicts(sets):
        backend = m.llm("conflict")
        return conflicts(backend, [[backend.truncate(d, judge_len) for d in docs_] for docs_ in sets],
                              cfg.conflict)

    loss = m.cached("usefulness", [{"q": q.question, "ref": answer_text(r), "docs": [h["text"] for h in hits]}
                                      for q, r, hits in zip(questions, refs, coarse)],
                       {"model": m.ids["proxy"], "max_doc_tokens": judge_len}, losses, batch_size=8)
    conflict_pairs = m.cached(
        "conflict", [[h["text"] for h in hits[: cfg.conflict.top]] for hits in coarse],
        {"model": m.ids["conflict"], "top": cfg.conflict.top, "threshold": cfg.conflict.threshold,
         "max_doc_tokens": judge_len}, judge_conflicts, batch_size=16)
    out = []
    for lab, hits, lo, confl in zip(labels, coarse, loss, conflict_pairs):
        scored = []
        for h, l_x in zip(hits, lo["docs"]):
            level = levels[_doc_key(h)]["level"]
            fh, fg = f_h(level), f_g(types[_doc_key(h)], lab["qtype"])
            fu = f_u(lo["init"], l_x) if l_x is not None else 0.0
            scored.append({**h, "evidence_level": level, "f_h": fh, "f_g": fg, "f_u": fu, "l_init": lo["init"],
                           "l_x": l_x, "F": fine_score(fh, fg, fu, cfg.alpha)})
        dropped = drop_conflicting([s["evidence_level"] for s in scored], [s["coarse"] for s in scored],
                                        [tuple(c) for c in confl])
        m.counts["conflict_drops"] += len(dropped)
        # a pair never loses both sides, so at least one document of a non-empty set survives the filter
        kept = [s for i, s in enumerate(scored) if i not in dropped]
        out.append(sorted(kept, key=lambda s: -s["F"]))
    return out


def answer_text(reference: dict) -> str:
    """The reference answer as the usefulness proxy scores it: the answer's text alone ("Ceftriaxone", not
    "D. Ceftriaxone"), since the proxy's prompt (question + document, no options) never shows the letters."""
    label, text = reference.get("label") or "", reference["text"]
    return text[len(label) + 2:] if label and text.startswith(f"{label}. ") else text


def _doc_key(hit: dict) -> str:
    """Document-only factors are keyed by the evidence unit: the document and its passage."""
    return f"{hit['doc_id']}#{hit['passage']}"
