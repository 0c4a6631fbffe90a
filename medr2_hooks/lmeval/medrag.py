"""MedRAG's answer format (MIRAGE's setting) as lm-eval hooks: ``medrag`` (32 fused snippets) and ``medrag_cot``
(MIRAGE's CoT row: the same prompt and JSON answer, no documents).

MedRAG sends its instruction as the system message and the documents, question and options as the user turn. Here
the instruction is each doc's ``system`` field, which the task names as its ``description``: lm-eval puts it in the
system turn under ``--apply_chat_template`` and before the prompt otherwise. The wording is ours
(:data:`~medr2_hooks.apply.prompts.MEDRAG_SYSTEM`, :func:`~medr2_hooks.apply.prompts.medrag_prompt`); a user who
holds MedRAG's own template text gives it by file: ``--metadata '{"medrag_template": "medrag.json"}'``, a JSON object
``{"system": "...", "user": "...{documents}...{question}...{options}..."}`` (``{documents}``: the ``Document [i]
(Title: …) …`` lines; ``{options}``: ``A. …`` lines); the rows carry it
(:func:`~medr2_hooks.lmeval.direct.answer_fields`).
"""

from __future__ import annotations

import json

from ..apply import prompts
from ..data.record import Record
from .retrieval import _prefix

def doc_to_text(doc: dict) -> str:
    """The user turn: the pack's snippets (titles kept, numbered from 0, as packed within the window; none for
    ``medrag_cot``), the question and its options."""
    documents: list[tuple[str | None, str]] = []
    if doc.get("provenance"):
        _prefix(doc)  # a row past the prepared limit is an error, never a prompt without its documents
        provenance = json.loads(doc["provenance"])
        texts = provenance.get("evidence_texts") or []
        titles = [e.get("title") for e in provenance.get("evidence") or []]
        documents = list(zip(titles + [None] * (len(texts) - len(titles)), texts))
    question = Record.from_doc(doc).public()
    if doc.get("user_template"):
        return doc["user_template"].format(
            documents="".join(prompts.medrag_document(i, t, d) for i, (t, d) in enumerate(documents)),
            question=question.question.strip(), options=prompts.options_block(question.options))
    return prompts.medrag_prompt(documents, question)
