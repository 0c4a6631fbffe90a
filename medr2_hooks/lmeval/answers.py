"""How an answer is read out of a reply: the readers the tasks score with, and ``medr2 rescore`` re-reads with.

Every reader returns one of the option labels or :data:`INVALID` (scored wrong and counted, never a default).

- :func:`read_statement` (the ``_gen`` tasks, strict: the headline): the last explicit statement of one option —
  ``the answer is (C)``, ``Answer: C``, ``the answer is most likely **(C)**``, ``答案是（C）``, ``答案：C``. A
  single-letter label is matched in its own case, or in the other where no word follows it ("Answer: c"; "the
  answer is a benign tumor" names no option); a statement
  that negates ("the answer is not A") or names a label that is not an option ("(E)" among A–D) is no answer.
- :func:`read_flexible` (beside it, as lm-eval's generative multiple-choice tasks report a flexible extraction):
  the strict reading, else an answer statement that names one option's text, else the last parenthesised label.
- :func:`read_json_choice` (``medrag``: MedRAG's JSON answer, strict): the ``answer_choice`` of the last JSON object
  that has one, read as MedRAG's own pipeline reads its replies (whitespace collapsed, non-strict JSON): a label,
  a label followed by its option's text (``"C. Clopidogrel"``), a parenthesised label, ``Option C`` or the option's
  text alone. "None of the above", two labels ("A or B") and a label whose text names another option are invalid.
- :func:`read_mirage` (``acc_mirage``): MIRAGE's own scorer's rule, for a like-for-like comparison with its table:
  the text after the last ``"answer_choice": "``, matched by its patterns in its order, and ``A`` when none matches.
"""

from __future__ import annotations

import json
import re
import unicodedata

INVALID = "[invalid]"

_STATEMENT = r"(?i:answer\s+is|answer\s+would\s+be|answer\s*[:：])|答案\s*(?:应该是|應該是|是|为|為|[:：])"
# what may stand between a statement and its label: spaces, emphasis, a colon, a hedge or "option"
_FILLER = (r"(?:[\s*_:：]|(?i:(?:most|more|very)\s+likely|likely|probably|possibly|perhaps|clearly|definitely|"
           r"certainly|option|choice)\b)*")
_OPEN, _CLOSE = r"[(\[（【]", r"[)\]）】]"


def _alternation(labels: list[str], lower_alone: bool = False) -> str:
    """The labels as a regex alternation: letters in their own case, words in any case; with ``lower_alone`` a
    letter in the other case too where no word follows it ("Answer: c", never "the answer is a benign tumor")."""
    def one(label: str) -> str:
        if len(label) != 1:
            return f"(?i:{re.escape(label)})"
        other = label.swapcase()
        if lower_alone and other != label:
            return f"{re.escape(label)}|{re.escape(other)}(?![ \t]+[A-Za-z])"
        return re.escape(label)
    return "|".join(one(label) for label in sorted(labels, key=len, reverse=True))


def _canonical(found: str, labels: list[str]) -> str:
    return next((label for label in labels if label == found), None) or \
        next(label for label in labels if label.lower() == found.lower())


def read_statement(text: str, labels: list[str]) -> str:
    """The option the last explicit answer statement names, or :data:`INVALID`."""
    # the filler alone takes the spaces before an unbracketed label, so each statement is read in one pass (a
    # second `\s*` there would make a reply of "the answer is" and 64,000 spaces quadratic)
    pattern = re.compile(rf"(?:{_STATEMENT}){_FILLER}(?:{_OPEN}\s*)?({_alternation(labels, True)})\s*{_CLOSE}?[*_]*"
                         r"(?![A-Za-z0-9])")
    found = pattern.findall(text)
    return _canonical(found[-1], labels) if found else INVALID


def _norm(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).lower()
    return re.sub(r"[\s*_`\"'.,;:!?()\[\]]+", " ", text).strip()


def read_flexible(text: str, options: dict[str, str]) -> str:
    """:func:`read_statement`, else an answer statement followed by exactly one option's text, else the last
    parenthesised option label in the reply; :data:`INVALID` when none."""
    labels = list(options)
    strict = read_statement(text, labels)
    if strict != INVALID:
        return strict
    texts = {label: _norm(t) for label, t in options.items() if _norm(t)}
    # an option's text is a prefix of the statement's rest: a bounded head of it is enough to compare (a line of
    # many statements would otherwise normalise the rest of the line once per statement)
    head = 4 * max((len(t) for t in options.values()), default=0) + 1024
    for m in reversed(list(re.finditer(rf"(?:{_STATEMENT})\s*[:：]?(.+)", text))):
        stated = _norm(m.group(1)[:head])
        named = [label for label, t in texts.items() if stated.startswith(t)]
        if len(named) == 1:
            return named[0]
    found = re.findall(rf"{_OPEN}\s*({_alternation(labels)})\s*{_CLOSE}", text)
    return _canonical(found[-1], labels) if found else INVALID


# -- MedRAG's JSON answer ------------------------------------------------------------------------------------------
_CHOICE_FIELD = re.compile(r'"answer_choice"\s*:\s*"((?:[^"\\]|\\.)*)"')
_OBJECT_START = re.compile(r'\{\s*["}]')


def _json_values(text: str, key: str) -> list[str]:
    """``key``'s string value in the last JSON object in ``text`` that parses and has one (non-strict: raw control
    characters inside strings are allowed), else the values of ``"key": "..."`` fields, in order.

    Objects are tried from the last one that opens like an object (``{`` then ``"`` or ``}``) backwards, and the text
    the decoder is handed is bounded by a few dozen times the reply's length: a reply of a megabyte of braces or of
    nested, unclosed objects reads in well under a second, and an ordinary reply is tried at every brace."""
    decoder = json.JSONDecoder(strict=False)
    budget = 32 * len(text) + (1 << 20)
    for start in reversed([m.start() for m in _OBJECT_START.finditer(text)]):
        budget -= len(text) - start  # the slice, and an error's line count over it
        if budget < 0:
            break
        try:
            obj, _ = decoder.raw_decode(text[start:])
        except (ValueError, RecursionError):  # not JSON; a number over int's digit limit; nesting too deep
            continue
        if isinstance(obj, dict) and isinstance(obj.get(key), str):
            return [obj[key]]
    if key != "answer_choice":
        return []
    values = []
    for raw in _CHOICE_FIELD.findall(text):
        try:
            values.append(json.loads(f'"{raw}"', strict=False))
        except ValueError:  # an escape JSON does not know ("\x"): the field as written
            values.append(raw)
    return values


def _read_value(value: str, options: dict[str, str]) -> str:
    """One ``answer_choice`` value as a careful reader takes it."""
    labels = list(options)
    value = value.strip().strip("*_` ").strip()
    alt = _alternation(labels)
    alone = re.fullmatch(rf"{_OPEN}?\s*({alt})\s*{_CLOSE}?\.?", value, re.IGNORECASE)  # "c", "(C)", "C."
    if alone:
        return _canonical(alone.group(1), labels)
    m = re.fullmatch(rf"(?i:option\s+|choice\s+)?(?:{_OPEN}\s*({alt})\s*{_CLOSE}|({alt}))"
                     rf"(\s*[.:\-–—)]\s*|\s+|$)(.*)", value, re.DOTALL)
    if m:
        label = _canonical(m.group(1) or m.group(2), labels)
        rest = _norm(m.group(4))
        if not rest:
            return label
        named = [lab for lab, t in options.items() if _norm(t) and rest.startswith(_norm(t))]
        if named:
            return label if label in named else INVALID  # "C. <B's text>" says two things
        # text that is no option's: taken after a label that closes ("C. ...", "(C) ..."), never after a bare
        # space ("A or B", "A and C")
        return label if (m.group(1) or m.group(3).strip()) and not re.match(r"(or|and)\b", rest) else INVALID
    named = [label for label, t in options.items() if _norm(t) and _norm(value) == _norm(t)]
    return named[0] if len(named) == 1 else INVALID


def read_json_choice(text: str, options: dict[str, str], key: str = "answer_choice") -> str:
    """The option the last JSON answer names under ``key``, or :data:`INVALID`."""
    values = _json_values(re.sub(r"\s+", " ", text), key)
    return _read_value(values[-1], options) if values else INVALID


# -- MIRAGE's scorer ------------------------------------------------------------------------------------------------
def read_mirage(text: str, labels: list[str]) -> str:
    """The label MIRAGE's evaluation script reads from one reply (its rule, for ``acc_mirage``): the text after the
    last ``"answer_choice": "`` (the whole reply when there is none), stripped, matched by these patterns in this
    order — the label alone; the label then `` or``/`` and``/``/``/``,``; ``Option X`` anywhere; ``:`` then the
    label anywhere; the label then ``.``, ``"`` or ``:`` — and the first label (``A``) when none matches."""
    tail = text.split('"answer_choice": "')[-1].strip()
    alt = "|".join(re.escape(label) for label in labels)
    for pattern in (rf"^\s*({alt})$", rf"^\s*({alt}) or", rf"^\s*({alt}) and", rf"^\s*({alt})/", rf"^\s*({alt}),",
                    rf"[Oo]ption ({alt})", rf":\s*({alt})", rf"^\s*({alt})\.", rf'^\s*({alt})"', rf"^\s*({alt}):"):
        found = re.findall(pattern, tail)
        if found:
            return found[0]
    return labels[0]
