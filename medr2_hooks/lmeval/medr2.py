"""lm-eval hooks for the retrieval-augmented tasks (``*_medr2``, ``*_medr2_cot``, ablations).

``load_dataset`` (lm-eval's ``custom_dataset``, called once per task) loads the evaluation and demo pools,
runs the method's pre-pass over all of them in batches (cached on disk), and returns docs that carry the
prompt prefix (demonstrations + selected evidence) and the provenance (evidence with f_h, f_g, f_u, F,
iterations, CoT) as JSON, so ``--log_samples`` shows what each answer was given. The run record (stage
times, model calls, tokens, cache hits, fallback counts) is written next to the cache and logged.

Task metadata: ``benchmark``, ``method`` (a MethodConfig mapping), ``variant`` (settings a task family
changes, e.g. Med-R²-CoT's ``cot_in_first_query``), and optionally ``limit`` (pre-pass only the
first N evaluation items: lm-eval's ``--limit`` is not visible to dataset hooks), ``source``, ``data_dir``,
``subject``. ``--metadata '{"method_override": {"window": 8192}}'`` overrides method settings.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

from .. import data, settings
from ..apply import prompts
from ..cache import stable_hash
from ..config import ConfigError
from ..data.record import Record
from ..fs import atomic_write_text, safe_component
from ..redact import redact
from ..pipeline.config import MethodConfig
from .direct import refuse_trained, select

log = logging.getLogger(__name__)


def _merge(base: dict, override: dict) -> dict:
    out = dict(base)
    for k, v in override.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


@dataclass(frozen=True)
class PrepassSpec:
    """Everything that determines a task's pre-pass: benchmark, subject/split, the resolved method config and
    the items. Its :attr:`key` (a hash of that content) names the pre-pass record, so a run finds exactly the
    records of its own tasks and concurrent runs with other settings never share one."""

    benchmark: str
    subject: str | None
    split: str | None
    source: str
    cfg: MethodConfig
    eval_records: list[Record]
    demos: list[Record]

    def identity(self) -> dict:
        return {"benchmark": self.benchmark, "subject": self.subject, "split": self.split, "source": self.source,
                "method": redact(self.cfg.to_json()), "eval_ids": [r.id for r in self.eval_records],
                "demo_ids": [r.id for r in self.demos]}

    @property
    def key(self) -> str:
        return stable_hash(self.identity())[:20]

    @property
    def record_path(self) -> Path:
        name = "_".join(x for x in (self.cfg.method, self.benchmark, self.subject) if x)
        return settings.results_dir() / "prepass" / f"{safe_component(name, 'pre-pass record name')}__{self.key}.json"


def prepass_spec(benchmark: str, method: dict | None = None, variant: dict | None = None, source: str = "local",
                 data_dir: str | None = None, subject: str | None = None, limit: int | None = None,
                 split: str | None = None, trained_items: list[str] | None = None,
                 cases_file: str | dict | None = None, **metadata) -> PrepassSpec:
    """The pre-pass of a task from the keyword arguments lm-eval gives its ``custom_dataset`` hook (task
    metadata merged with ``--metadata``, then ``dataset_kwargs``)."""
    # settings: the template's method, the task's variant (e.g. Med-R²-CoT), then the user's overrides
    merged = _merge(_merge(method or {}, variant or {}), metadata.pop("method_override", {}) or {})
    cfg = MethodConfig.from_dict(merged, f"{benchmark} method")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, (int, float)) or limit < 0):
        raise ConfigError(f"{benchmark}: metadata limit must be a number >= 0, found {limit!r}")
    pools = data.pools(benchmark, source=source, data_dir=data_dir, cases_file=cases_file)
    eval_records = select(pools.eval, subject, split)
    refuse_trained(benchmark, eval_records, trained_items, limit)
    if limit:
        eval_records = eval_records[: int(limit)]
    demos = pools.demos[: cfg.max_demos] if cfg.max_demos is not None else pools.demos
    return PrepassSpec(benchmark, subject, split, source, cfg, list(eval_records), list(demos))


def load_dataset(**kwargs):
    import datasets

    from ..pipeline.medr2 import MedR2

    spec = prepass_spec(**kwargs)
    packs, record = prepare_records(MedR2(spec.cfg), spec.benchmark, spec.eval_records, spec.demos)
    record.update(benchmark=spec.benchmark, subject=spec.subject, key=spec.key, identity=spec.identity())
    _write_record(redact(record), spec.record_path)
    rows = []
    for r, p in zip(spec.eval_records, packs):
        rows.append({**r.to_doc(), "benchmark": spec.benchmark, "prefix": p.pop("prefix"),
                     "reasoning": p.pop("reasoning", None) or "", "provenance": json.dumps(p, ensure_ascii=False)})
    return datasets.DatasetDict(test=datasets.Dataset.from_list(rows))


PREPARE = {"medr2": "medr2_hooks.pipeline.run:prepare", "llm_amt": "medr2_hooks.pipeline.llm_amt:prepare"}


def prepare_records(pipeline, benchmark: str, eval_records: list[Record], demos: list[Record]):
    """The pre-pass over records: stages get :meth:`Record.public` questions only; the demonstrations' own
    answers go to the rendered demonstrations, and evaluation answers go nowhere but lm-eval's scorer."""
    from importlib import import_module

    module, func = PREPARE[pipeline.cfg.pipeline].split(":")
    prepare = getattr(import_module(module), func)
    return prepare(pipeline, benchmark, [r.public() for r in eval_records], [r.meta.get("pmid") for r in eval_records],
                   [d.public() for d in demos], [d.answer for d in demos], [d.meta.get("pmid") for d in demos])


def _write_record(record: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(record, indent=1, ensure_ascii=False, default=str))
    log.info("pre-pass record: %s (stages %s)", path, record["stage_seconds"])


def doc_to_text(doc: dict) -> str:
    question = prompts.question_prompt(doc["benchmark"], Record.from_doc(doc).public())
    return doc["prefix"] + prompts.with_reasoning(question, doc.get("reasoning"))


def doc_to_choice(doc: dict) -> list[str]:
    return list(doc["choice_labels"])


def doc_to_target(doc: dict) -> int:
    return doc["gold"]


def doc_to_text_generative(doc: dict) -> str:
    """The generative variant: evidence and demonstrations, then the question with the CoT cue."""
    from .generative import doc_to_text as question_with_cue

    return doc["prefix"] + question_with_cue(doc)
