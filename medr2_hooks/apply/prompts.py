"""Question prompts that match lm-evaluation-harness's built-in medical tasks, so scores stay comparable.

- ``medqa``   (``medqa_4options``): ``Question: {q}\\nA. ..\\n...Answer:``
- ``medmcqa`` (``medmcqa``):        ``Question: {q}\\nChoices:\\nA. ..\\n...Answer:``
- ``mmlu``    (``mmlu_*``):          ``{q.strip()}\\nA. ..\\n...Answer:`` after the subject description
- ``pubmedqa``: the built-in prompt without its ``Abstract:`` line (question only, as in the paper);
  the choices are the labels ``yes``/``no``/``maybe`` and are not listed in the prompt.
- MedXpertQA and NEJMQA use the ``medqa`` layout (options A–J / A–E); a declared benchmark names one of
  ``medqa``, ``medmcqa``, ``mmlu`` (``prompt:``, default ``medqa``). Each benchmark's layout is its ``style``
  in :data:`medr2_hooks.data.BENCHMARKS`.
- ``diagnosis`` (RareArena): the case report, then a request for five ranked diagnoses, ending in
  ``Diagnoses:\n1.`` — the model continues the list (see :mod:`medr2_hooks.lmeval.diagnosis`).
"""

from __future__ import annotations

from ..data.record import Question

ANSWER_CUE, DIAGNOSIS_CUE = "Answer:", "Diagnoses:\n1."


def options_block(options: dict[str, str]) -> str:
    return "".join(f"{label}. {text}\n" for label, text in options.items())


def question_prompt(benchmark: str, question: Question) -> str:
    """The question part of the prompt, ending in ``Answer:`` (lm-eval adds `` <choice>``) or, for free-text
    diagnosis, in ``Diagnoses:\n1.``."""
    from .. import data

    style = data.benchmark(benchmark).style  # a declared benchmark names its layout (``prompt:``)
    if style == "medqa":
        return f"Question: {question.question}\n{options_block(question.options)}Answer:"
    if style == "medmcqa":
        return f"Question: {question.question}\nChoices:\n{options_block(question.options)}Answer:"
    if style == "mmlu":
        return f"{question.question.strip()}\n{options_block(question.options)}Answer:"
    if style == "diagnosis":  # RareArena's instruction, in our words: rare diseases, five, ranked, nothing else
        return (f"Case report:\n{question.question.strip()}\n\n"
                "The patient has a rare disease. List the five most likely rare diseases, most likely first, one per "
                f"line, giving only the disease names.\n{DIAGNOSIS_CUE}")
    return f"Question: {question.question}\nAnswer:"


def with_reasoning(prompt: str, cot: str | None) -> str:
    """A question prompt with ``Reasoning: <cot>`` put before its closing cue (``Answer:`` or the list cue)."""
    if not cot:
        return prompt
    cue = DIAGNOSIS_CUE if prompt.endswith(DIAGNOSIS_CUE) else ANSWER_CUE
    return f"{prompt[: -len(cue)]}Reasoning: {cot.strip()}\n{cue}"


def mmlu_description(subject: str) -> str:
    """lm-eval's ``mmlu_*`` description of a subject (the generated MMLU-Med tasks carry it)."""
    return f"The following are multiple choice questions (with answers) about {subject.replace('_', ' ')}.\n\n"


# Generative scoring: the target reasons after this cue and states its answer as the demonstrations do.
COT_CUE = " Let's think step by step, then finish with \"the answer is (X)\"."


def cot_cue(labels: list[str] | None = None) -> str:
    """The generative cue; where the answers are words (PubMedQA's yes/no/maybe, which the prompt does not list as
    lettered options) it names them."""
    words = [label for label in labels or () if len(label) > 1]
    if not words:
        return COT_CUE
    named = ", ".join(words[:-1]) + f" or {words[-1]}" if len(words) > 1 else words[0]
    return f"{COT_CUE[:-1]}, where X is {named}."


def answer_statement(label: str) -> str:
    """How a generative demonstration states its answer (what :mod:`medr2_hooks.lmeval.generative` extracts)."""
    return f"Therefore, the answer is ({label})."


def generative_prompt(prompt: str, reasoning: str | None = None, labels: list[str] | None = None) -> str:
    """A question prompt (``…Answer:``) for generative scoring: the given reasoning, if any, then the cue (naming the
    answers when they are words)."""
    return with_reasoning(prompt, reasoning) + cot_cue(labels)


MEDRAG_SYSTEM = ("You are a medical expert. Answer the multiple-choice medical question using the documents given "
                 "with it, if any. Think step by step first, then choose one of the options. Write your output as a "
                 'JSON object {"step_by_step_thinking": "<your reasoning>", "answer_choice": "<the option\'s label>"}.')


def medrag_document(i: int, title: str | None, text: str) -> str:
    """One retrieved snippet as MedRAG numbers it: from 0, its title kept with its text."""
    return f"Document [{i}] (Title: {(title or '').strip()}) {text.strip()}\n"


def medrag_prompt(documents: list[tuple[str | None, str]], question: Question) -> str:
    """The user turn of MedRAG's answering prompt (MIRAGE's setting; its instruction is :data:`MEDRAG_SYSTEM`, given
    as the system message: the task's description, which lm-eval's chat template puts in the system turn): the
    documents (``(title, text)``, numbered from 0), the question, its lettered options, the request for JSON. With no
    documents it is MIRAGE's CoT setting (``medrag_cot``)."""
    docs = "".join(medrag_document(i, t, d) for i, (t, d) in enumerate(documents))
    head = f"Here are the relevant documents:\n{docs}\n" if documents else ""
    return (f"{head}Here is the question:\n{question.question.strip()}\n\nHere are the potential choices:\n"
            f"{options_block(question.options)}\nPlease think step by step and write your output as JSON:\n")


def demonstration(prompt: str, answer: str, cot: str | None, scoring: str, labels: list[str] | None = None) -> str:
    """A solved demonstration after its question prompt. Letters: ``Reasoning: <cot>\nAnswer: <label>`` (the
    label the letter scorer compares); generative: the cue, the reasoning and ``the answer is (<label>)``, the way
    the target is asked to answer. Free-text prompts (a diagnosis list) continue the list with the answer."""
    if scoring == "generative" and not prompt.endswith(DIAGNOSIS_CUE):
        return f"{generative_prompt(prompt, labels=labels)} {(cot or '').strip()} {answer_statement(answer)}" \
            .replace("  ", " ")
    return f"{with_reasoning(prompt, cot)} {answer}"

