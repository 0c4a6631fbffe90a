"""Chain-of-thought generator and answer reading.

The CoT generator answers the question (with its options) from the selected evidence; its reasoning feeds the
next iteration's retrieval query and serves as a demonstration for the target model. Its answer is read by
closed-set scoring of the option labels after "Therefore, the answer is" — robust with small base models,
where parsing free text would mostly fail. Free-text questions (RareArena: no options) get a short generated
answer after "Therefore, the most likely diagnosis is", as ``{normalised name: 1.0}`` (``{}`` when empty), so
Alg. 2 compares it with the reference answer by name.
"""

from __future__ import annotations

from ..apply.prompts import options_block
from ..data.orphanet import normalise
from ..llm.closed_set import label_distribution

FREE_ANSWER_TOKENS = 16


def question_block(question: str, options: dict[str, str], labelled: bool) -> str:
    if not options:
        return f"Question: {question}"
    if labelled:
        return f"Question: {question}\n{options_block(options)}".rstrip("\n")
    return f"Question: {question}\nOptions: {', '.join(options)}"


def evidence_block(evidence: list[str]) -> str:
    return "\n".join(f"[{i}] {text}" for i, text in enumerate(evidence, 1))


def cot_prompt(backend, question: str, options: dict[str, str], evidence: list[str]) -> str:
    labelled = list(options) != list(options.values())  # letters with texts, or PubMedQA's bare labels
    user = ("Answer the medical question using the evidence. Think step by step in a few sentences.\n\n"
            f"Evidence:\n{evidence_block(evidence) or '(none)'}\n\n{question_block(question, options, labelled)}")
    return backend.chat(user) + "Reasoning:"


def generate_cot(backend, prompts: list[str], max_new_tokens: int = 128) -> list[str]:
    return [r.strip() for r in backend.generate(prompts, max_new_tokens, stop=["\n\n", "Question:"], role="cot")]


def cot_answers(backend, prompts: list[str], cots: list[str], labels: list[list[str]]) -> list[dict[str, float]]:
    """The answer distribution after each CoT (questions may have different label sets)."""
    groups: dict[tuple[str, ...], list[int]] = {}
    for i, ls in enumerate(labels):
        groups.setdefault(tuple(ls), []).append(i)
    result: dict[int, dict[str, float]] = {}
    free = groups.pop((), [])
    if free:
        names = backend.generate([f"{prompts[i]} {cots[i]}\nTherefore, the most likely diagnosis is" for i in free],
                                 FREE_ANSWER_TOKENS, stop=["\n", "."], role="cot_answer")
        for i, name in zip(free, names):
            result[i] = {normalise(name): 1.0} if normalise(name) else {}
    for ls, idx in groups.items():
        probs = label_distribution(backend, [f"{prompts[i]} {cots[i]}\nTherefore, the answer is" for i in idx],
                                   list(ls), role="cot_answer")
        for i, p in zip(idx, probs):
            result[i] = dict(zip(ls, map(float, p)))
    return [result[i] for i in range(len(labels))]
