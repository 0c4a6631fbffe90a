"""lm-eval hooks for every retrieval method's tasks (``*_medr2``, ``*_vanilla_rag``, ``*_hyde``, ``*_llm_amt``,
ablations, ...).

``load_dataset`` (lm-eval's ``custom_dataset``, called once per task) loads the evaluation and demo pools,
runs the method's pre-pass over all of them in batches (cached on disk), and returns docs that carry the
prompt prefix (demonstrations + selected evidence) and the provenance (evidence with f_h, f_g, f_u, F,
iterations, CoT) as JSON, so ``--log_samples`` shows what each answer was given. The run record (stage
times, model calls, tokens, cache hits, fallback counts) is written next to the cache and logged.

Task keywords: ``benchmark``, ``method`` (a name in the registry, :mod:`medr2_hooks.methods`), ``scoring``,
``subject``, and from ``--metadata`` optionally ``limit`` (pre-pass only the first N evaluation items: lm-eval's
``--limit`` is not visible to dataset hooks), ``source``, ``data_dir``.
``--metadata '{"method_override": {"window": 8192}}'`` overrides method settings.

The dataset always holds the whole benchmark, so lm-eval reports its true size (``n-samples.original``); with a
``limit`` only the first N rows carry packs, and evaluating any other row stops with an error naming the fix
(``--limit N``), so a subset is never presented as the benchmark and never evaluated without evidence.
"""

from __future__ import annotations

import json

from ..apply import prompts
from ..data.record import Record
from ..errors import Medr2Error
from ..prepass.packs import packs_for
from ..prepass.spec import prepass_spec
from .direct import answer_fields, judge_field


def load_dataset(**kwargs):
    import datasets

    judge = kwargs.pop("judge", None)
    answer_format = answer_fields(kwargs.get("method"), kwargs.pop("medrag_template", None))
    spec = prepass_spec(**kwargs)
    extra = {**judge_field(spec.benchmark, judge), **answer_format}
    packs = packs_for(spec)
    rows = []
    for r, p in zip(spec.eval_records, packs):
        p = dict(p)
        rows.append({**r.to_doc(), **extra, "benchmark": spec.benchmark, "prefix": p.pop("prefix"),
                     "reasoning": p.pop("reasoning", None) or "", "provenance": json.dumps(p, ensure_ascii=False)})
    prepared = len(rows)
    for r in spec.unprepared:  # counted by lm-eval (n-samples.original), never evaluated: see _prefix
        rows.append({**r.to_doc(), **extra, "benchmark": spec.benchmark, "prefix": None, "reasoning": "",
                     "provenance": json.dumps({"unprepared": f"{spec.name}: first {prepared} items prepared"})})
    return datasets.DatasetDict(test=datasets.Dataset.from_list(rows))


def _prefix(doc: dict) -> str:
    """The row's evidence prefix; a row past the prepared ``limit`` is an error, never a prompt without evidence."""
    if doc["prefix"] is None:
        raise Medr2Error(f"item {doc['id']} was not prepared: {json.loads(doc['provenance'])['unprepared']} (the task "
                         "metadata's limit). Evaluate the same number with lm-eval's --limit, or drop the metadata "
                         "limit to prepare and evaluate the whole benchmark")
    return doc["prefix"]


def doc_to_text(doc: dict) -> str:
    question = prompts.question_prompt(doc["benchmark"], Record.from_doc(doc).public())
    return _prefix(doc) + prompts.with_reasoning(question, doc.get("reasoning"))


def doc_to_choice(doc: dict) -> list[str]:
    return list(doc["choice_labels"])


def doc_to_target(doc: dict) -> int:
    return doc["gold"]


def doc_to_text_generative(doc: dict) -> str:
    """Generative scoring: demonstrations and evidence, then the question (with the method's reasoning where the
    method gives the target one) and the cue to reason and answer."""
    question = prompts.question_prompt(doc["benchmark"], Record.from_doc(doc).public())
    return _prefix(doc) + prompts.generative_prompt(question, doc.get("reasoning"), list(doc["choice_labels"]))
