"""Window packing: fit the question, its evidence and the CoT demonstrations into the context window ``w``.

Order of priority (tokenizer-aware, counted with the target model's tokenizer):
1. the question with its options — always kept whole; if it alone exceeds the window the item gets no
   evidence and no demonstrations (``question_over_window``), and the evaluator's own truncation applies;
2. this question's evidence, best fine score first, while the evidence stays within ``evidence_share · w``;
   a document that does not fit is skipped (never cut silently), and the next one is tried;
3. demonstrations in pool order, each one that fits in what is left (one that does not is skipped and counted,
   and the next is tried: a long demonstration never ends the list).
The effective numbers of documents and demonstrations are returned, so nothing is truncated unrecorded.
"""

from __future__ import annotations

from dataclasses import dataclass, field

RESERVE = 16  # tokens kept free besides the answer's own room: lm-eval's target delimiter and the first answer token


@dataclass
class Packed:
    evidence: list[int] = field(default_factory=list)  # indices into the candidate evidence, in order
    demos: list[int] = field(default_factory=list)  # indices into the demonstrations, in order
    tokens: int = 0
    question_over_window: bool = False
    skipped_evidence: int = 0
    skipped_demos: int = 0


def pack(question_tokens: int, evidence_tokens: list[int], demo_tokens: list[int], window: int,
         evidence_share: float = 0.5, reserve: int = RESERVE, max_evidence: int | None = None) -> Packed:
    budget = window - reserve
    out = Packed(tokens=question_tokens)
    if question_tokens > budget:
        out.question_over_window = True
        return out
    evidence_budget = int(evidence_share * window)
    used_evidence = 0
    for i, n in enumerate(evidence_tokens):
        if max_evidence is not None and len(out.evidence) >= max_evidence:
            break
        if used_evidence + n <= evidence_budget and out.tokens + n <= budget:
            out.evidence.append(i)
            used_evidence += n
            out.tokens += n
        else:
            out.skipped_evidence += 1
    for i, n in enumerate(demo_tokens):
        if out.tokens + n > budget:
            out.skipped_demos += 1
            continue
        out.demos.append(i)
        out.tokens += n
    return out
