"""Issue 52: nothing of the user's deleted, no score of no task (each test failed on 397ef77)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from medr2_hooks.cli.main import main
from medr2_hooks.lmeval import readers
from medr2_hooks.lmeval.diagnosis import parse_list

LETTERS = ["A", "B", "C", "D"]
OPTIONS = {label: f"option {label} text" for label in LETTERS}


def _rows(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def _doc(answer: str, **extra) -> dict:
    return {"id": "x1", "choice_labels": LETTERS, "choice_texts": list(OPTIONS.values()), "answer": answer, **extra}


def _sample(doc, reply, metrics=("acc", "invalid", "acc_flexible", "invalid_flexible")) -> dict:
    return {"doc_id": 0, "doc": doc, "filter": "none", "resps": [[reply]], "metrics": list(metrics)}


def test_rescore_scores_each_task_apart_and_follows_no_link(tmp_path, capsys):
    run = tmp_path / "run"
    (run / "sub").mkdir(parents=True)
    stamp = "2026-12-07T07-00-00.123456"
    _rows(run / f"samples_medqa_usmle_direct_gen_{stamp}.jsonl", [_sample(_doc("A"), "the answer is (B)")])
    _rows(run / f"samples_medqa_usmle_medr2_gen_{stamp}.jsonl", [_sample(_doc("B"), "the answer is (B)")])
    # what `medr2 eval --tasks medqa_usmle_direct,medqa_usmle_direct_gen` records for the log-likelihood task
    _rows(run / f"samples_medqa_usmle_direct_{stamp}.jsonl",
          [{"doc_id": 0, "doc": _doc("B"), "filter": "none", "resps": [[["-1.0", "False"]]] * 4,
            "metrics": ["acc", "acc_norm"]}])
    os.symlink("..", run / "sub" / "loop")
    assert main(["rescore", str(run), "--reader", "generative", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {t: s["n"] for t, s in out["tasks"].items()} == {"medqa_usmle_direct_gen": 1, "medqa_usmle_medr2_gen": 1}
    assert out["tasks"]["medqa_usmle_direct_gen"]["acc"] == 0.0 and out["tasks"]["medqa_usmle_medr2_gen"]["acc"] == 1.0
    assert "log-likelihood" in out["skipped_tasks"]["medqa_usmle_direct"] and out["links_skipped"] == 1
    # a reader that does not fit the task is refused, never scored as all-invalid
    assert main(["rescore", str(run), "--reader", "diagnosis"]) == 2
    assert "read by --reader generative, not diagnosis" in capsys.readouterr().err
    medrag = _rows(tmp_path / f"samples_mirage_medqa_medrag_{stamp}.jsonl",
                   [_sample(_doc("A"), '{"answer_choice": "A"}', ("acc", "invalid", "acc_mirage"))])
    assert main(["rescore", str(medrag), "--reader", "generative"]) == 2
    assert "read by --reader medrag" in capsys.readouterr().err


BAD_ROWS = {
    "short choice_texts": (_sample({**_doc("D"), "choice_texts": ["a", "b"]}, "(D)"), "doc.choice_texts"),
    "resps a string": ({"doc_id": 0, "doc": _doc("A"), "filter": "none", "resps": "abc"}, "resps"),
    "resps [[]]": ({"doc_id": 0, "doc": _doc("A"), "filter": "none", "resps": [[]]}, "resps"),
    "doc null": (_sample(None, "x"), "doc"),
    "doc a string": (_sample("text", "x"), "doc"),
    "doc without answer": (_sample({"id": "x", "choice_labels": LETTERS}, "x"), "doc.answer"),
    "answer not a label": ({"id": "q", "reply": "x", "labels": LETTERS, "answer": "E"}, "answer"),
    "answer an int": ({"id": "q", "reply": "x", "labels": LETTERS, "answer": 1}, "answer"),
    "options a list": ({"id": "q", "reply": "x", "options": ["a", "b"], "answer": "A"}, "options"),
    "options of ints": ({"id": "q", "reply": "x", "options": {"A": 1, "B": 2}, "answer": "A"}, "options"),
    "labels []": ({"id": "q", "reply": "x", "labels": [], "answer": "A"}, "labels"),
    "labels 5": ({"id": "q", "reply": "x", "labels": 5, "answer": "A"}, "labels"),
    "labels [1, 2]": ({"id": "q", "reply": "x", "labels": [1, 2], "answer": 1}, "labels"),
    "labels [[A]]": ({"id": "q", "reply": "x", "labels": [["A"]], "answer": "A"}, "labels"),
    "no labels": ({"id": "q", "reply": "x", "answer": "A"}, "labels"),
    "reply not text": ({"id": "q", "reply": ["x"], "labels": LETTERS, "answer": "A"}, "reply"),
    "a NaN id": ('{"id": NaN, "reply": "x", "labels": ["A"], "answer": "A"}', None),
    "nested brackets": ("[" * 100000, None),
}


@pytest.mark.parametrize("case", list(BAD_ROWS))
def test_rescore_refuses_a_damaged_row_naming_file_line_and_field(case, tmp_path, capsys):
    row, field = BAD_ROWS[case]
    path = _rows(tmp_path / "replies.jsonl", [{"id": "q0", "reply": "x", "labels": LETTERS, "answer": "A"}, row])
    assert main(["rescore", str(path), "--reader", "generative", "--json"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"{path}:2:" in err, err
    assert field is None or f"field {field!r}" in err, err


def test_rescore_refuses_repeated_ids_and_diagnoses_that_are_no_names(tmp_path, capsys):
    row = {"id": "q1", "reply": "the answer is (B)", "labels": LETTERS, "answer": "B"}
    assert main(["rescore", str(_rows(tmp_path / "dup.jsonl", [row] * 3)), "--reader", "generative"]) == 2
    assert "dup.jsonl:2: field 'id' 'q1' is repeated" in capsys.readouterr().err
    for answer in (5, None):
        path = _rows(tmp_path / "dx.jsonl", [{"id": "q", "reply": "1. Marfan syndrome", "answer": answer}])
        assert main(["rescore", str(path), "--reader", "diagnosis"]) == 2
        assert "dx.jsonl:1: field 'answer' expected the gold disease name" in capsys.readouterr().err


def test_rescore_json_parses_with_a_lone_surrogate_id_and_huge_numbers(tmp_path, capsys):
    path = _rows(tmp_path / "r.jsonl", ['{"id": "\\ud800", "reply": "{\\"answer_choice\\": \\"B\\", \\"n\\": '
                                        + "9" * 5000 + '}", "labels": ["A", "B"], "answer": "B"}'])
    assert main(["rescore", str(path), "--reader", "medrag", "--json", "--per_item"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["tasks"]["r"]["acc"] == 1.0 and out["tasks"]["r"]["items"][0]["id"] == "\ud800"
    path = _rows(tmp_path / "d.jsonl", [{"id": 1, "reply": "9" * 5000 + ". x\n1. Marfan syndrome",
                                         "answer": "Marfan syndrome"}])
    assert main(["rescore", str(path), "--reader", "diagnosis", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["tasks"]["d"]["n"] == 1


MB = 1_000_000
HOSTILE = {
    "statement and spaces": "The answer is" + " " * (MB - 13),
    "colon and spaces": "Answer:" + " " * MB,
    "braces": "{" * MB,
    "nested unclosed objects": '{"a":' * (MB // 5),
    "quoted keys": '{"' * (MB // 2),
    "siblings": '{"a":[' + "{}," * (MB // 3),
    "brackets": "[" * MB,
    "statements": "the answer is " * (MB // 14),
    "a long answer value": '{"answer_choice": "' + "A" * MB + '"}',
    "explanation spaces": "1. x" + " " * MB + "y",
    "because spaces": "1. x" + " " * MB + "because ",
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_every_reader_reads_a_megabyte_reply_in_under_a_second(case):
    text = HOSTILE[case]
    for read in (lambda t: readers.read_statement(t, LETTERS), lambda t: readers.read_flexible(t, OPTIONS),
                 lambda t: readers.read_json_choice(t, OPTIONS), lambda t: readers.read_mirage(t, LETTERS),
                 parse_list):
        started = time.perf_counter()
        read(text)
        assert time.perf_counter() - started < 1.0, case


def test_bounded_readers_read_as_before():
    assert readers.read_statement("so the answer is   (C).", LETTERS) == "C"
    assert readers.read_statement("Answer:  c", LETTERS) == "C"
    assert readers.read_json_choice('{"a": {"answer_choice": "B"}, "answer_choice": "A"} {"x": 1}', OPTIONS) == "B"
    assert readers.read_json_choice('{"answer_choice": "D"} and later {"answer_choice": "C"}', OPTIONS) == "C"
    assert readers.read_json_choice('"answer_choice": "B" {{{', OPTIONS) == "B"
    assert parse_list("1. Marfan syndrome   -   because of x\n2. Ehlers-Danlos syndrome, because y") == [
        "Marfan syndrome", "Ehlers-Danlos syndrome"]
