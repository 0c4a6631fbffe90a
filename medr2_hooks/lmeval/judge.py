"""RareArena graded as its authors grade: an LLM judge scores each case's five diagnoses on their 0/1/2 scale.

RareArena's evaluation (``zhao-zy15/RareArena`` ``eval/eval_updated.py``, GPT-4o) shows the judge the case's
reference sets (:meth:`medr2_hooks.data.orphanet.Orphanet.score_sets`: the case's diagnosis and Orphanet name
earn 2, close Orphanet parents earn 1) and the model's answer, and reads one ``score X`` per diagnosis; top-1
takes the first diagnosis's score and top-5 the best of five. Their published "total" recall counts scores 1
and 2 (here ``top1_lenient``/``top5_lenient``); ``top1``/``top5`` count score 2 only.

Here the judge grades the parsed list (:func:`medr2_hooks.lmeval.diagnosis.parse_list`, what the offline grade
sees too), one prompt per case, all cases of a task in one batched call whose replies are cached on disk
(stage ``judge``, keyed by prompt and judge model: a killed run resumes, a re-run costs nothing). A reply that
does not grade every diagnosis of its list counts as ``judge_unparseable`` and its missing grades are 0 — never
guessed. Greedy decoding (RareArena sampled at temperature 0.1: a re-run here reproduces its grades).

Two ways in, one grading: the tasks' ``judge`` filter (lm-eval calls :func:`filter_grades` with every response
and doc of a task once, after generation) when the run's metadata names a judge (``--metadata
'{"judge": {"backend": "openai", "model": "gpt-4o"}}'``, an experiment's ``judge:``), and ``medr2 judge RUN_DIR``
(:func:`judge_run`) to grade a finished run's logged samples. The judge is part of the scorer: it sees the gold
names, which no pipeline role ever does.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path

from ..data import benchmark as benchmark_of, orphanet
from ..config import ConfigError
from ..errors import DataError
from ..fs import write_json
from ..redact import has_credentials, public_url
from .diagnosis import N_DIAGNOSES, Judged, judged_metrics, parse_list

log = logging.getLogger(__name__)
MAX_REPLY_TOKENS = 48 * N_DIAGNOSES  # one "k. <name>: score X;" line per diagnosis
_GRADE_LINE = re.compile(r"^\s*\**\s*(\d+)\s*[.)].*?\bscore\b\W*([012])\b", re.IGNORECASE)


def check_judge(benchmark: str, judge) -> str:
    """The doc field that carries a run's judge (JSON of its backend spec, ``""`` for none): an error when the
    spec cannot work or the benchmark has nothing for a judge to grade."""
    if judge in (None, "", {}):
        return ""
    from ..llm import check_spec

    try:
        check_spec(judge, "metadata judge")
    except ValueError as err:
        raise ConfigError(f"{benchmark}: {err}") from None
    if benchmark_of(benchmark).style != "diagnosis":
        raise ConfigError(f"{benchmark}: metadata judge grades free-text diagnosis lists (RareArena); this benchmark "
                          "is scored by its options")
    if any(k in judge for k in ("api_key", "token")):
        raise ConfigError(f"{benchmark}: metadata judge carries a secret: give it through the environment "
                          "(OPENAI_API_KEY, or api_key_env naming a variable) so it never reaches a results file")
    url = judge.get("base_url")
    if isinstance(url, str) and has_credentials(url):
        # the spec travels in each doc's `judge` field, which lm-eval logs with every sample
        raise ConfigError(f"{benchmark}: metadata judge.base_url carries credentials (user:password@ or a key in "
                          f"its query): give {public_url(url)} and the key through the environment "
                          "(OPENAI_API_KEY, or api_key_env naming a variable), so it never reaches a samples file")
    return json.dumps(judge, sort_keys=True)


def preflight(judge: dict) -> None:
    """A served judge answers before the run spends its generation on it (an unreachable endpoint or a missing
    key is an error naming the endpoint); local judges load when the filter runs."""
    if judge.get("backend", "hf") == "openai":
        from ..llm import BackendPool

        BackendPool().get(judge).check_reachable("judge")


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


def filter_grades(resps, docs) -> list[Judged]:
    """lm-eval ``custom`` filter (after ``take_first``): each response graded by the run's judge, named in the
    docs' ``judge`` field; ungraded (``null``) when the run names no judge (the task then reports Orphanet only)."""
    resps, docs = list(resps), list(docs)
    spec = docs[0].get("judge") if docs else ""
    if not spec:
        return [Judged(None) for _ in resps]
    cases = [Case.from_doc(doc, r if isinstance(r, str) else r[0]) for r, doc in zip(resps, docs)]
    return [Judged(g) for g in Judge.from_spec(json.loads(spec)).grade(cases)]


def logged_grading(row: dict) -> dict | None:
    """The judge's grading of a logged sample row (None for the Orphanet filter's rows or an unjudged run)."""
    if row.get("filter") != "judge":
        return None
    got = (row.get("filtered_resps") or [None])[0]
    return got.graded if isinstance(got, Judged) else json.loads(got) if isinstance(got, str) else got


def judge_run(run_dir: str | Path, judge: Judge) -> dict:
    """Grade a finished run's logged RareArena samples; writes ``RUN_DIR/judged.json`` and returns it."""
    files = sorted(Path(run_dir).rglob("samples_rarearena_*.jsonl"))
    if not files:
        raise DataError(f"{run_dir}: no samples_rarearena_*.jsonl (run a rarearena task with --log_samples)")
    tasks: dict[str, list[Case]] = {}
    for path in files:
        task = path.name[len("samples_"):].rsplit("_", 1)[0]
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            if row.get("filter", "orphanet") not in ("orphanet", "none"):
                continue  # the same response under the judge filter
            response = row["filtered_resps"][0] if isinstance(row["filtered_resps"], list) else row["filtered_resps"]
            tasks.setdefault(task, []).append(Case.from_doc(row["doc"], response))
    result = {"judge": judge.backend.model_id, "tasks": {}}
    for task, cases in tasks.items():
        rows = [judged_metrics(g) for g in judge.grade(cases)]
        result["tasks"][task] = {k: sum(r[k] for r in rows) / len(rows) for k in rows[0]} | {"n": len(rows)}
    write_json(Path(run_dir) / "judged.json", result, ascii=True)
    return result


def judge_record(samples: dict) -> dict:
    """Per task graded by a judge in this run: ``{"model", "cases", "unparseable"}`` (for ``run.json``)."""
    out = {}
    for task, rows in (samples or {}).items():
        graded = [g for g in map(logged_grading, rows) if g is not None]
        if graded:
            out[task] = {"model": graded[0]["judge"], "cases": len(graded),
                         "unparseable": sum(not g["complete"] for g in graded)}
    return out
