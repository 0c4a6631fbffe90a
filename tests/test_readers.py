"""Issue 40.1-40.2: replies read as the field reads them, and prompts that say what can be answered.

The replies below are written for these tests in the shapes real models use (GPT-4's MedRAG JSON with the option's
text after its label, raw newlines inside JSON strings, markdown emphasis, Chinese answer statements, hedges); none is
copied from a published run."""

from __future__ import annotations

import json

import pytest

from medr2_hooks.cli.main import main
from medr2_hooks.lmeval.answers import INVALID, read_flexible, read_json_choice, read_mirage, read_statement

LETTERS = list("ABCD")
OPTIONS = {"A": "Aspirin", "B": "Heparin", "C": "Clopidogrel", "D": "Warfarin"}


@pytest.mark.parametrize("reply, expected", [
    ("Ischemia after PCI calls for DAPT. Therefore, the answer is (C).", "C"),
    ("**Answer:** **(B)**", "B"),
    ("The answer is **D**.", "D"),
    ("Weighing both, the answer is most likely B.", "B"),
    ("so the answer is probably (A)", "A"),
    ("答案是（C）", "C"),
    ("综上所述，答案：B", "B"),
    ("答案为【D】。", "D"),
    ("The answer is option D", "D"),
    ("Answer: c", "C"),
    ("The answer is not A. Rechecking the dose, the answer is (B).", "B"),
])
def test_explicit_statements_in_the_forms_models_write(reply, expected):
    assert read_statement(reply, LETTERS) == expected


@pytest.mark.parametrize("reply", [
    "The answer is a benign tumor of the liver.",  # "a" is a word here, not option A
    "The answer is not A.",  # a negation names no answer
    "The answer is probably not C.",
    "The answer is (E).",  # not an option among A-D
    "I would choose clopidogrel.",  # no statement: the strict reading stays invalid
])
def test_what_is_not_an_answer_statement_stays_invalid(reply):
    assert read_statement(reply, LETTERS) == INVALID


def test_the_flexible_reading_adds_option_texts_and_bracketed_labels():
    assert read_flexible("Therefore, the answer is Clopidogrel.", OPTIONS) == "C"
    assert read_flexible("Between them I pick (B) for its onset.", OPTIONS) == "B"
    assert read_flexible("The answer is (D).", OPTIONS) == "D"  # the strict reading first
    assert read_flexible("No clear choice.", OPTIONS) == INVALID
    assert read_statement("the answer is (maybe)", ["yes", "no", "maybe"]) == "maybe"
    assert read_statement("The answer is Yes.", ["yes", "no", "maybe"]) == "yes"


@pytest.mark.parametrize("reply, strict, mirage", [
    ('{"step_by_step_thinking": "P2Y12 after a stent.", "answer_choice": "C. Clopidogrel"}', "C", "C"),
    ('{"step_by_step_thinking": "first\nsecond line", "answer_choice": "B"}', "B", "B"),  # raw newline: not strict JSON
    ('```json\n{"step_by_step_thinking": "x",\n "answer_choice": "D"\n}\n```', "D", "D"),
    ('{"step_by_step_thinking": "x", "answer_choice": "(C) Clopidogrel"}', "C", "A"),  # MIRAGE's patterns miss "(C)"
    ('{"step_by_step_thinking": "x", "answer_choice": "Option D"}', "D", "D"),
    ('{"step_by_step_thinking": "x", "answer_choice": "Clopidogrel"}', "C", "A"),
    ('{"step_by_step_thinking": "x", "answer_choice": "None of the above"}', INVALID, "A"),  # MIRAGE's default
    ('{"step_by_step_thinking": "x", "answer_choice": "A or B"}', INVALID, "A"),
    ('{"step_by_step_thinking": "x", "answer_choice": "C. Heparin"}', INVALID, "C"),  # label and text disagree
    ("I cannot answer this question.", INVALID, "A"),
])
def test_medrag_replies_strictly_and_by_mirages_rule(reply, strict, mirage):
    assert read_json_choice(reply, OPTIONS) == strict
    assert read_mirage(reply, LETTERS) == mirage


def test_pubmedqas_generative_prompt_names_its_answers():
    from medr2_hooks import data
    from medr2_hooks.lmeval.generative import doc_to_text

    record = data.pools("pubmedqa").eval[0]
    prompt = doc_to_text({**record.to_doc(), "benchmark": "pubmedqa"})
    assert prompt.endswith('finish with "the answer is (X)", where X is yes, no or maybe.')
    letters = data.pools("medqa_usmle").eval[0]
    assert doc_to_text({**letters.to_doc(), "benchmark": "medqa_usmle"}).endswith('"the answer is (X)".')


def test_mirages_yes_no_sets_are_lettered_and_search_the_own_article_as_mirage_did():
    from medr2_hooks import data
    from medr2_hooks.apply.prompts import question_prompt

    record = data.pools("mirage_pubmedqa").eval[0]
    assert record.options == {"A": "yes", "B": "no", "C": "maybe"} and record.answer in "ABC"
    assert record.public().exclude_pmid is None and record.meta["article_pmid"]
    assert "\nA. yes\nB. no\nC. maybe\n" in question_prompt("mirage_pubmedqa", record.public())
    assert data.pools("pubmedqa").eval[0].public().exclude_pmid  # the paper's PubMedQA keeps the exclusion
    assert data.pools("mirage_bioasq").eval[0].options == {"A": "yes", "B": "no"}


def test_medrags_prompt_is_a_system_instruction_and_a_user_turn_with_titled_documents_from_zero(tmp_path):
    from medr2_hooks import data
    from medr2_hooks.apply.prompts import MEDRAG_SYSTEM
    from medr2_hooks.lmeval import medrag
    from medr2_hooks.lmeval.direct import answer_fields

    record = data.pools("mirage_medqa").eval[0]
    provenance = {"evidence_texts": ["Clopidogrel blocks P2Y12.", "Aspirin blocks COX."],
                  "evidence": [{"title": "Antiplatelets"}, {"title": "NSAIDs"}]}
    doc = {**record.to_doc(), "benchmark": "mirage_medqa", "prefix": "", "provenance": json.dumps(provenance),
           **answer_fields("medrag", None)}
    user = medrag.doc_to_text(doc)
    assert doc["system"] == MEDRAG_SYSTEM and MEDRAG_SYSTEM not in user
    assert "Document [0] (Title: Antiplatelets) Clopidogrel blocks P2Y12.\nDocument [1] (Title: NSAIDs)" in user
    assert "\nA. " in user and user.rstrip().endswith("write your output as JSON:")
    cot = medrag.doc_to_text({**record.to_doc(), "benchmark": "mirage_medqa", **answer_fields("medrag_cot", None)})
    assert "Document [" not in cot and "Here is the question:" in cot
    # a user's own MedRAG template text, by file
    template = tmp_path / "medrag.json"
    template.write_text(json.dumps({"system": "SYS", "user": "DOCS:\n{documents}Q: {question}\n{options}JSON:"}))
    own = {**doc, **answer_fields("medrag", str(template))}
    assert own["system"] == "SYS" and medrag.doc_to_text(own).startswith("DOCS:\nDocument [0] (Title: Antiplatelets)")
    template.write_text(json.dumps({"system": "SYS", "user": "no placeholders"}))
    with pytest.raises(Exception, match="no \\{documents\\} placeholder"):
        answer_fields("medrag", str(template))


def test_the_medrag_cot_task_is_mirages_cot_row():
    from medr2_hooks import methods
    from medr2_hooks.lmeval.registry import task_manager

    assert methods.method("medrag_cot").answer == "medrag" and not methods.method("medrag_cot").retrieval
    assert "mirage_medqa_medrag_cot" in task_manager().all_tasks


def test_rescore_reads_a_replies_file_and_a_runs_samples(tmp_path, capsys):
    replies = tmp_path / "replies.jsonl"
    rows = [{"id": "q1", "reply": '{"step_by_step_thinking": "x", "answer_choice": "C. Clopidogrel"}', "answer": "C",
             "options": OPTIONS},
            {"id": "q2", "reply": '{"step_by_step_thinking": "x", "answer_choice": "None of the above"}',
             "labels": LETTERS, "answer": "A"}]
    replies.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["rescore", str(replies), "--reader", "medrag", "--json", "--per_item"]) == 0
    out = json.loads(capsys.readouterr().out)["tasks"]["replies"]
    assert (out["n"], out["acc"], out["invalid"], out["acc_mirage"]) == (2, 0.5, 0.5, 1.0)
    assert [i["reading"] for i in out["items"]] == ["C", INVALID]
    # an lm-eval samples file of a generative task
    doc = {"id": "x1", "choice_labels": LETTERS, "choice_texts": list(OPTIONS.values()), "answer": "B"}
    sample = {"doc_id": 0, "doc": doc, "filter": "none", "resps": [["... so the answer is Heparin."]]}
    run = tmp_path / "run"
    run.mkdir()
    (run / "samples_medqa_usmle_direct_gen_2026.jsonl").write_text(json.dumps(sample) + "\n")
    assert main(["rescore", str(run), "--reader", "generative", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)["tasks"]["medqa_usmle_direct_gen"]
    assert (out["acc"], out["invalid"], out["acc_flexible"]) == (0.0, 1.0, 1.0)
    (run / "bad.jsonl").write_text('{"id": "q"}\n')
    assert main(["rescore", str(run / "bad.jsonl"), "--reader", "generative"]) == 2
    assert "bad.jsonl:1: field 'reply'" in capsys.readouterr().err
