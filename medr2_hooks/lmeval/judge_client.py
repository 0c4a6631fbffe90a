"""The RareArena judge's client: its prompt (the case's Orphanet reference sets and the parsed diagnoses), one batched
call per task with replies cached on disk (stage ``judge``), and the reading of its grades. The lm-eval side (the
``judge`` filter, the run's checks and record) is :mod:`medr2_hooks.lmeval.judge`; ``medr2 judge`` re-grades a
finished run (:mod:`medr2_hooks.cli.judge_cmd`)."""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass

from ..data import orphanet
from .diagnosis import N_DIAGNOSES, parse_list

log = logging.getLogger(__name__)
MAX_REPLY_TOKENS = 48 * N_DIAGNOSES  # one "k. <name>: score X;" line per diagnosis
_GRADE_LINE = re.compile(r"^\s*\**\s*(\d+)\s*[.)].*?\bscore\b\W*([012])\b", re.IGNORECASE)


@dataclass(frozen=True)
class Case:
    gold: str
    orpha_id: str | None
    diagnosis: str
    items: tuple[str, ...]

    @classmethod
    def from_doc(cls, doc: dict, continuation: str) -> Case:
        meta = json.loads(doc["meta"])
        return cls(meta["orpha_name"], meta.get("orpha_id"), meta.get("diagnosis", ""), tuple(parse_list(continuation)))


def judge_prompt(case: Case) -> str:
    two, one = orphanet.load().score_sets(case.gold, case.orpha_id, case.diagnosis)
    rules = ["- 2: it is the same disease as one in the score-2 set (the same name, a strict synonym or a clear "
             "equivalent)."]
    if one:
        rules.append("- 1: it is not a 2, but it is the same as one in the score-1 set (a broader category that "
                     "contains the disease).")
    rules.append("- 0: anything else.")
    sets = [f"Score-2 set: {'; '.join(two)}"] + ([f"Score-1 set: {'; '.join(one)}"] if one else [])
    listed = "\n".join(f"{k}. {name}" for k, name in enumerate(case.items, 1))
    return ("You grade a student's differential diagnosis of a rare-disease case against reference diagnoses.\n"
            "Grade each of the student's diagnoses:\n" + "\n".join(rules) + "\n\nReference diagnoses:\n"
            + "\n".join(sets) + f"\n\nStudent's diagnoses:\n{listed}\n\n"
            f"Reply with one line per diagnosis, in order, as \"<number>. <diagnosis>: score "
            f"<{'0, 1 or 2' if one else '0 or 2'}>\".")


def parse_grades(reply: str, n: int) -> tuple[list[int], bool]:
    """``(grades of diagnoses 1..n, complete)``: the first ``score X`` of each numbered line; a diagnosis the
    reply does not grade gets 0 and makes the reply incomplete."""
    found: dict[int, int] = {}
    for line in reply.splitlines():
        m = _GRADE_LINE.match(line)
        if m and 1 <= int(m.group(1)) <= n:
            found.setdefault(int(m.group(1)), int(m.group(2)))
    return [found.get(k, 0) for k in range(1, n + 1)], len(found) == n


class Judge:
    """A judge backend with its on-disk reply cache."""

    def __init__(self, backend, cache=None):
        from ..cache import StageCache

        self.backend, self.cache = backend, cache or StageCache()

    @classmethod
    def from_spec(cls, spec: dict, cache=None) -> Judge:
        from ..llm import BackendPool

        return cls(BackendPool().get(spec), cache)

    def grade(self, cases: list[Case]) -> list[dict]:
        """Per case: ``{"items", "grades", "complete", "reply", "judge"}`` (no call for an empty list)."""
        asked = [c for c in cases if c.items]
        prompts = [self.backend.chat(judge_prompt(c)) for c in asked]
        config = {"judge": self.backend.model_id, "max_new_tokens": MAX_REPLY_TOKENS, "decoding": "greedy"}

        def ask(batch: list[str]) -> list[str]:
            return self.backend.generate(batch, max_new_tokens=MAX_REPLY_TOKENS, role="judge")

        # an empty or unreadable reply (a judge that answered `content: null`) is used for this run, never cached:
        # a later run over the same cases asks again instead of keeping the case at judge_unparseable
        n_of = {p: len(c.items) for p, c in zip(prompts, asked)}
        replies = self.cache.cached("judge", prompts, config, ask, batch_size=256, shape=str,
                                    keep=lambda prompt, reply: parse_grades(reply, n_of[prompt])[1]) if prompts else []
        unread = sum(not parse_grades(r, len(c.items))[1] for r, c in zip(replies, asked))
        if unread:
            log.warning("judge %s: %d of %d replies were empty or did not grade every diagnosis: counted as "
                        "judge_unparseable and not cached (the next run asks again)", self.backend.model_id, unread,
                        len(asked))
        replies = iter(replies)
        out = []
        for case in cases:
            reply = next(replies) if case.items else ""
            grades, complete = parse_grades(reply, len(case.items)) if case.items else ([], True)
            out.append({"items": list(case.items), "grades": grades, "complete": complete, "reply": reply,
                        "judge": self.backend.model_id})
        return out
