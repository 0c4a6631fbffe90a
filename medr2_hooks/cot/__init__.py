"""Chain-of-thought generator and answer reading.

The CoT generator answers the question (with its options) from the selected evidence; its reasoning feeds the
next iteration's retrieval query and serves as a demonstration for the target model. It writes until it ends its
turn (end of sequence) or starts another question or evidence block (:data:`STOP`), within its token budget; a
blank line no longer ends it (instruction-tuned models write several paragraphs). A demonstration's rationale is
generated knowing its gold answer (demonstrations are training-side, :func:`cot_prompt` with ``answer``). Its
answer is read by closed-set scoring of the option labels after "Therefore, the answer is" — robust with small
base models, where parsing free text would mostly fail. Free-text questions (RareArena: no options) get a short
generated answer after "Therefore, the most likely diagnosis is", as ``{normalised name: 1.0}`` (``{}`` when
empty), so Alg. 2 compares it with the reference answer by name.
"""

from __future__ import annotations

from ..apply.prompts import options_block
from ..data.orphanet import normalise
from ..llm.backend import Backend
from ..llm.closed_set import label_distribution

FREE_ANSWER_TOKENS = 16
STOP = ["\nQuestion:", "\nEvidence:"]


def question_block(question: str, options: dict[str, str], labelled: bool) -> str:
    if not options:
        return f"Question: {question}"
    if labelled:
        return f"Question: {question}\n{options_block(options)}".rstrip("\n")
    return f"Question: {question}\nOptions: {', '.join(options)}"


def evidence_block(evidence: list[str]) -> str:
    return "\n".join(f"[{i}] {text}" for i, text in enumerate(evidence, 1))


def cot_prompt(backend: Backend, question: str, options: dict[str, str], evidence: list[str],
               answer: str | None = None) -> str:
    """The CoT generator's prompt; with ``answer`` (a demonstration's gold label or diagnosis), a rationale for it."""
    labelled = list(options) != list(options.values())  # letters with texts, or PubMedQA's bare labels
    if answer is None:
        task = "Answer the medical question using the evidence. Think step by step."
    else:
        given = f"({answer}) {options[answer]}" if labelled and answer in options else answer
        task = (f"The correct answer to the medical question is {given}. Explain step by step, using the evidence, "
                "how to reach it.")
    evidence_text = evidence_block(evidence) or "(none)"
    user = f"{task}\n\nEvidence:\n{evidence_text}\n\n{question_block(question, options, labelled)}"
    return backend.chat(user) + "Reasoning:"


def generate_cot(backend: Backend, prompts: list[str], max_new_tokens: int = 128) -> list[str]:
    return [r.strip() for r in backend.generate(prompts, max_new_tokens, stop=STOP, role="cot")]


def cot_answers(backend: Backend, prompts: list[str], cots: list[str],
                labels: list[list[str]]) -> list[dict[str, float]]:
    """The answer distribution after each CoT (questions may have different label sets)."""
    groups: dict[tuple[str, ...], list[int]] = {}
    for i, ls in enumerate(labels):
        groups.setdefault(tuple(ls), []).append(i)
    result: dict[int, dict[str, float]] = {}
    free = groups.pop((), [])
    if free:
        names = backend.generate([f"{prompts[i]} {cots[i]}\nTherefore, the most likely diagnosis is" for i in free],
                                 FREE_ANSWER_TOKENS, stop=["\n", "."], role="cot")
        for i, name in zip(free, names):
            result[i] = {normalise(name): 1.0} if normalise(name) else {}
    for ls, idx in groups.items():
        probs = label_distribution(backend, [f"{prompts[i]} {cots[i]}\nTherefore, the answer is" for i in idx],
                                   list(ls), role="cot")
        for i, p in zip(idx, probs):
            result[i] = dict(zip(ls, map(float, p)))
    return [result[i] for i in range(len(labels))]
