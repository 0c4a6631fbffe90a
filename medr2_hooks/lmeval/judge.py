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
(:func:`medr2_hooks.cli.judge_cmd.judge_run`) to grade a finished run's logged samples. The judge's prompt, client
and grade reading are :mod:`.judge_client`. The judge is part of the scorer: it sees the gold
names, which no pipeline role ever does.
"""

from __future__ import annotations

import json

from ..config import ConfigError
from ..data import benchmark as benchmark_of
from ..redact import has_credentials, public_url
from .diagnosis import Judged
from .judge_client import Case, Judge


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


def judge_record(samples: dict) -> dict:
    """Per task graded by a judge in this run: ``{"model", "cases", "unparseable"}`` (for ``run.json``)."""
    out = {}
    for task, rows in (samples or {}).items():
        graded = [g for g in map(logged_grading, rows) if g is not None]
        if graded:
            out[task] = {"model": graded[0]["judge"], "cases": len(graded),
                         "unparseable": sum(not g["complete"] for g in graded)}
    return out
