"""Question formulation, step 2: rewrite the question for evidence search with its EBM category's
instruction (paper Table 4, in our words). From iteration 2 the previous chain of thought is appended to the
retrieval query (``q_EBM + q_CoT``); never at iteration 1 unless the Med-R²-CoT variant asks for it.

Only the question text reaches this stage: options and answers never do. A reformulation that comes back
empty or unusable is replaced by the original question, and counted. The CoT was generated from a prompt that
lists the options, so before it joins a retrieval query every option text and option-letter reference is cut
out of it (:func:`without_options`): the retriever sees the question, its reformulation and the CoT's reasoning,
never the options.
"""

from __future__ import annotations

import re

from ..llm.backend import Backend

INSTRUCTIONS = {
    "diagnosis": "Name the condition to be diagnosed and ask how accurate, sensitive or specific the relevant "
                 "diagnostic tests or findings are.",
    "therapy": "Name the disease or symptom and the treatment under consideration, and ask about its "
               "effectiveness, safety, or how it compares with other treatments.",
    "prognosis": "Name the disease or condition and ask about long-term outcomes: survival, recovery, or progression.",
    "etiology": "Describe the health problem and ask about its possible causes: risk factors, pathogens, "
                "mechanisms, or genetic background.",
    "prevention": "Name the disease or health problem and ask how well preventive measures or recommendations work.",
    "cost": "Name the medical intervention or service and ask about its costs and cost-effectiveness.",
    "other": "Restate the question as a short, precise search query with the key medical terms.",
}

TASK = "Rewrite the medical question as a search query for finding evidence."
FORMAT = "Write one query on one line."
MIN_CHARS = 12


def reformulation_prompt(backend: Backend, question: str, category: str) -> str:
    user = f"{TASK} {INSTRUCTIONS[category]}\n{FORMAT}\n\nQuestion: {question}"
    return backend.chat(user) + "Search query:"


def usable(text: str) -> bool:
    return len(text.strip()) >= MIN_CHARS and any(ch.isalpha() for ch in text)


def echoes_prompt(question: str, category: str, query: str) -> bool:
    """True when a reformulation only repeats its prompt (an instruction or the question itself), as small base
    models do. Counted in the run record (``reformulation_echoes``); such a query is still used as generated."""
    norm = lambda text: " ".join(text.lower().split())  # noqa: E731
    reply = norm(query).removeprefix("question:").strip()
    prompt = norm(f"{TASK} {INSTRUCTIONS[category]} {FORMAT} {question}")
    return bool(reply) and reply in prompt


def reformulate(backend: Backend, questions: list[str], categories: list[str], max_new_tokens: int = 64) -> list[dict]:
    """``{"query": text, "fallback": bool}`` per question (fallback: the original question was kept)."""
    prompts = [reformulation_prompt(backend, q, c) for q, c in zip(questions, categories)]
    replies = backend.generate(prompts, max_new_tokens=max_new_tokens, stop=["\n"], role="reformulator")
    return [{"query": r.strip(), "fallback": False} if usable(r) else {"query": q, "fallback": True}
            for q, r in zip(questions, replies)]


QUERY_COMPOSITIONS = ("paper", "question_first")


def retrieval_query(question: str, reformulation: str | None, cot: str | None,
                    composition: str = "question_first") -> str:
    """What the retriever sees. ``paper`` (§3.1, Alg. 2): the reformulated query q_EBM (the question when there is
    no reformulation), then (from iteration 2) the previous CoT. ``question_first``: the question, its
    reformulation, then the CoT."""
    if composition not in QUERY_COMPOSITIONS:
        raise ValueError(f"query composition {composition!r}; valid: {', '.join(QUERY_COMPOSITIONS)}")
    reformulated = reformulation if reformulation and reformulation.strip() != question.strip() else None
    parts = ([reformulated or question] if composition == "paper"
             else [question, *([reformulated] if reformulated else [])])
    if cot:
        parts.append(cot)
    return "\n".join(parts)


_LETTER_REFS = re.compile(
    r"\((?:[A-J])\)|(?<![\w])(?:options?|choices?|answers?)(?:\s+(?:is|are|was))?\s*[:=]?\s*\(?[A-J]\)?(?![\w'’])"
    r"|(?m:^\s*[A-J][.)](?=\s))", re.IGNORECASE)


def without_options(text: str, options: dict[str, str] | None) -> str:
    """``text`` with each option's text and every option-letter reference ("(C)", "answer is C", "option B",
    a line opening "D.") removed. Options whose text is their own label (PubMedQA's yes/no/maybe) are no
    option texts to remove."""
    if not text:
        return text
    texts = sorted({t.strip() for label, t in (options or {}).items() if t.strip() and t.strip() != label},
                   key=len, reverse=True)
    for option_text in texts:
        text = re.sub(rf"(?<!\w){re.escape(option_text)}(?!\w)", " ", text, flags=re.IGNORECASE)
    if options:
        text = _LETTER_REFS.sub(" ", text)
    return re.sub(r"[ \t]+", " ", text).strip()


def iteration_query(question: str, reformulation: str | None, previous_cot: str | None, t: int,
                    cot_in_first_query: bool = False, options: dict[str, str] | None = None,
                    composition: str = "question_first") -> str:
    """The retrieval query of Alg. 2 iteration ``t``: the CoT (option texts and letters removed) joins from
    t = 2 (from t = 1 for Med-R²-CoT)."""
    use_cot = t > 1 or cot_in_first_query
    return retrieval_query(question, reformulation, without_options(previous_cot, options) if use_cot else None,
                           composition)
