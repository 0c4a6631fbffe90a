"""Strict extraction for the generative variants: explicit statements only, else invalid."""

from __future__ import annotations

import pytest

from medr2_hooks.lmeval.generative import INVALID, extract_choice, process_results

LETTERS = list("ABCDE")


@pytest.mark.parametrize(
    "text, expected",
    [
        ("The patient has gonorrhea. Therefore, the answer is (D).", "D"),
        ("So the answer is D", "D"),
        ("Answer: c", "C"),
        ("the answer is [B] because ...", "B"),
        ("First I thought the answer is A. On reflection the answer is (E).", "E"),
        ("The answer is option B.", "B"),
    ],
)
def test_explicit_statements_are_extracted(text, expected):
    assert extract_choice(text, LETTERS) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "D",  # a bare letter is not an explicit statement
        "I think ceftriaxone is right.",
        "The answer is F.",  # not an option
        "The answer is Atropine.",  # a word starting with an option letter
        "Answer: Absolutely unclear",
    ],
)
def test_everything_else_is_invalid(text):
    assert extract_choice(text, LETTERS) == INVALID


def test_invalid_counts_as_wrong_and_invalid():
    doc = {"choice_labels": LETTERS, "answer": "A"}
    strict = lambda reply: {k: v for k, v in process_results(doc, [reply]).items() if k in ("acc", "invalid")}  # noqa: E731
    assert strict("no idea") == {"acc": 0.0, "invalid": 1.0}
    assert strict("... the answer is (A).") == {"acc": 1.0, "invalid": 0.0}
    assert strict("... the answer is (B).") == {"acc": 0.0, "invalid": 0.0}
