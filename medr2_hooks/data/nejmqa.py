"""NEJMQA. The paper's NEJM/Lancet case-challenge set is not public, so the task reads either

- a user's own set (``cases_file``): JSON lines ``{id, case, question, options, answer}`` with ``options`` a
  ``{letter: text}`` mapping or a list of texts (lettered A, B, ... in order) and ``answer`` a letter; or
- by default, AgentClinic-NEJM extended (``clinical_cases/agentclinic_nejm/agentclinic_nejm_extended.jsonl``,
  120 NEJM Image Challenge cases, text only): the case question plus the physical-examination text, options
  lettered in file order, the one marked correct as the answer. Its ``patient_info`` is a role-play script
  restating the history for AgentClinic's simulated patient and is not used.

Every record names its data source in ``meta.dataset``, so results never pass for the paper's set.
"""

from __future__ import annotations

import string
from pathlib import Path

from ..errors import RowError
from .readers import field, iter_jsonl, require_file
from .record import Record

AGENTCLINIC = "clinical_cases/agentclinic_nejm/agentclinic_nejm_extended.jsonl"
AGENTCLINIC_NAME = "AgentClinic-NEJM extended (NEJM Image Challenge, text only) - not the paper's NEJMQA"


def _lettered(texts: list[str], path, line: int) -> dict[str, str]:
    if not 2 <= len(texts) <= 26:
        raise RowError(path, line, "options", f"expected 2-26 options, found {len(texts)}")
    return dict(zip(string.ascii_uppercase, texts))


def load(root: Path) -> list[Record]:
    path = require_file(root / AGENTCLINIC)
    out = []
    for line, obj in iter_jsonl(path):
        answers = field(obj, "answers", path, line, list)
        texts = [field(a, "text", path, line) for a in answers]
        correct = [i for i, a in enumerate(answers) if a.get("correct") is True]
        if len(correct) != 1:
            raise RowError(path, line, "answers", f"expected exactly one correct answer, found {len(correct)}")
        options = _lettered(texts, path, line)
        exam = str(obj.get("physical_exams") or "").strip()
        case = field(obj, "question", path, line)
        out.append(Record(
            id=f"agentclinic-{line:04d}", question=f"{case}\n\nExamination: {exam}" if exam else case, options=options,
            answer=list(options)[correct[0]], language="en",
            meta={"dataset": AGENTCLINIC_NAME, "specialty": obj.get("type"), "source": f"{path.name}:{line}"}))
    return out


def load_cases(path: Path) -> list[Record]:
    """A user's NEJMQA-style set: ``{id, case, question, options, answer}`` per line."""
    path = require_file(Path(path))
    out = []
    for line, obj in iter_jsonl(path):
        raw = field(obj, "options", path, line, (dict, list))
        options = dict(raw) if isinstance(raw, dict) else _lettered(list(raw), path, line)
        answer = field(obj, "answer", path, line)
        if answer not in options:
            raise RowError(path, line, "answer", f"answer {answer!r} is not one of the options {list(options)}")
        case, question = field(obj, "case", path, line), field(obj, "question", path, line)
        out.append(Record(id=str(field(obj, "id", path, line, (str, int))), question=f"{case}\n\n{question}",
                          options=options, answer=answer, language="en",
                          meta={"dataset": f"user cases file {path.name}", "source": f"{path.name}:{line}"}))
    return out
