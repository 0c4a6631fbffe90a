"""The gold answer never reaches a prompt: prompts are invariant to the answer, PubMedQA has no abstract."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from medr2_hooks import data
from medr2_hooks.apply.prompts import question_prompt
from medr2_hooks.lmeval import direct, generative


FIXTURES = {f"rarearena_{v}": Path(__file__).parent / "fixtures" / "rarearena" / f"{v.upper()}.json"
            for v in ("rds", "rdc")}


@pytest.mark.parametrize("name", list(data.BENCHMARKS))
def test_prompt_does_not_depend_on_the_answer(name):
    for record in data.pools(name, cases_file=FIXTURES.get(name)).eval:
        # free-text items (RareArena) have no options: another disease name stands in for another label
        other = next((label for label in record.options if label != record.answer), "Marfan syndrome")
        swapped = dataclasses.replace(record, answer=other)
        doc, swapped_doc = ({**r.to_doc(), "benchmark": name} for r in (record, swapped))
        assert direct.doc_to_text(doc) == direct.doc_to_text(swapped_doc)
        assert direct.doc_to_choice(doc) == direct.doc_to_choice(swapped_doc)
        assert generative.doc_to_text(doc) == generative.doc_to_text(swapped_doc)


def test_question_prompt_sees_only_the_public_question():
    record = data.load("medqa_usmle")[0]
    public = record.public()
    assert not hasattr(public, "answer")
    assert question_prompt("medqa_usmle", public).endswith("E. Trimethoprim\nAnswer:")


def test_pubmedqa_prompt_has_neither_abstract_nor_long_answer(data_root):
    from medr2_hooks.data.readers import read_json

    raw = read_json(data_root / "pubmedqa" / "ori_pqal.json")
    for record in data.pools("pubmedqa").eval:
        prompt = direct.doc_to_text({**record.to_doc(), "benchmark": "pubmedqa"})
        assert prompt == f"Question: {record.question}\nAnswer:"
        assert raw[record.id]["LONG_ANSWER"] not in prompt
        assert all(ctx not in prompt for ctx in raw[record.id]["CONTEXTS"])
