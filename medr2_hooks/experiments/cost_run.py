"""The pre-pass of a cost estimate, executed: the pipeline's own ``prepare`` (:mod:`medr2_hooks.pipeline.declare`)
runs on a sample of the run's questions with counting stand-ins wherever the real run would spend GPU time, so
the estimate counts the stages that run, as they run, and no second description of the pipeline exists.

- **Roles**: a :class:`CountingBackend` per role, with a backend's interface and no model. Each request's prompt is
  the stage's own prompt, counted under the role's tokenizer (its own when local, else a stand-in: see
  :mod:`.cost_sizes`); menus are read as the role's backend reads them (``hf``: one pass a menu; ``vllm`` and
  served roles: one request a menu of one-token labels, and labels of several tokens as one prompt-logprob
  sequence each, computed whole since vLLM skips its prefix cache for those). ``prompt_tokens_unique`` counts each
  distinct prompt of a role once (prefix caching), except those sequences.
- **Ceilings**, where only the real run decides: every generation uses its whole ``max_new_tokens``; every menu
  answers its first label, except the conflict judge which answers "no", so the filters keep every document;
  every demonstration's rationale agrees with its answer (every demonstration is shown); Alg. 2 never stops early
  (the counting searcher has no embeddings, so μ_t is undefined and the loop runs all T iterations).
- **Retrieval**: a :class:`CountingSearcher` returns, per search, the mean number of candidates the index's
  retrievers return (measured by searching the benchmark's first questions on a built index, else the no-overlap
  ceiling), each a new passage of the index's measured size: a marker line that makes it unique (no judged
  document repeats), then a pool text (passages sampled from a built index, else the benchmark's own question text
  cut to the recipe's planning size), whose tokens are counted once however many prompts carry it.
- **Cache**: a stage cache in memory (:class:`CountingCache`), so work a run repeats is free as it is in the real
  run (LLM-AMT's relevance filter finds the coarse rerank's judgements). Each cached call's key (stage, settings,
  inputs) is its lines' ``share`` key: two runs of a sweep whose calls are identical do that work once, as the
  stage cache would.
- **Sample**: up to :data:`SAMPLE_ITEMS` evaluation questions spread evenly over the run's and
  :data:`SAMPLE_DEMOS` demonstrations, repeated to the pool's size (a repeat is answered from the run's cache, so
  it costs nothing, yet packing fits as many shots as the real pool offers); each line is scaled to the run's
  questions and demonstrations (a demonstration-only stage: to its demonstrations).
"""

from __future__ import annotations

from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass

from ..cache import stable_hash
from ..pipeline.declare import all_roles
from ..pipeline.declare import pipeline
from ..pipeline.toolbox import StageToolbox
from ..redact import public_url
from .cost_eval import Line
from .cost_sizes import SAMPLE_QUERIES, passage_sample, tokens_for, union_size, unit_size
from .cost_stand_ins import (CountingBackend, CountingCache, CountingCrossEncoder, CountingHF, CountingSearcher,
                             CountingServed, Ledger, identity)

SAMPLE_ITEMS = 2  # evaluation questions run through the pipeline (evenly spaced over the run's)
SAMPLE_DEMOS = 1  # demonstrations run through it (repeated to the pool's size, so packing sees every shot)
class CountedMedR2(StageToolbox):
    """The pipeline's toolbox over counting roles, searcher and cross-encoder, with an in-memory stage cache."""

    def __init__(self, cfg, searcher: CountingSearcher, ledger: Ledger, per_label_menus: bool = False):
        super().__init__(cfg, cache=CountingCache(ledger), searcher=searcher)
        self.ledger, self.per_label_menus = ledger, per_label_menus
        self.ids = {role: identity(cfg.role(role)) for role in all_roles()}  # no server asked for its live identity
        self._backends: dict[str, CountingBackend] = {}
        self._target_tok = tokens_for(cfg.target_tokenizer).tokenizer
        self.selected = False

    def llm(self, role: str) -> CountingBackend:
        if role not in self._backends:
            spec = self.cfg.role(role)
            kind = CountingHF if spec.get("backend", "hf") == "hf" else CountingServed
            self._backends[role] = kind(role, spec, self.ledger)
            self._backends[role].per_label = self.per_label_menus
        return self._backends[role]

    def cross_encoder(self) -> CountingCrossEncoder:
        return CountingCrossEncoder(self.cfg.cross_encoder, self.ledger)

    @contextmanager
    def stage(self, name: str):
        outer, self.ledger.stage = self.ledger.stage, name
        try:
            with super().stage(name):
                yield
        finally:
            self.ledger.stage = outer

    def target_tokens(self, texts: list[str]) -> list[int]:
        self.selected = True  # from here on, what is asked depends on the evidence the target's tokenizer fitted
        return tokens_for(self.cfg.target_tokenizer).count(texts)

    def cots(self, items: list[list]) -> list[dict]:
        self.selected = True  # ... and on the CoT model's own reasoning (Med-R²-CoT's first query)
        return super().cots(items)

    def cached(self, stage: str, inputs: list, config: dict, compute, batch_size: int = 64) -> list:
        stats = self.cache.stats
        before = stats[f"{stage}:hit"] + stats[f"{stage}:miss"]
        outer = self.ledger.share
        self.cache.calling, self.cache.suffix = stage, "|target" if self.selected else ""
        try:
            # one batch: nothing to resume, no progress bar; the cache sets the ledger's share key
            return super().cached(stage, inputs, config, compute, batch_size=max(len(inputs), 1))
        finally:
            share, self.ledger.share = self.ledger.share, outer
            # distinct inputs asked (a demonstration repeated to fill the pool is asked once)
            self.ledger.asked[(stage, share)] += stats[f"{stage}:hit"] + stats[f"{stage}:miss"] - before

    def demo_rationales(self, items: list[list]) -> list[dict]:
        return [{**r, "agrees": True} for r in super().demo_rationales(items)]

    def own_article_ranks(self, questions, depth: int = 100) -> dict:
        return {}  # a search of the question's own abstract: no model

    def run_record(self, started: float, questions: int, demos: int) -> dict:
        return {"cache": dict(self.cache.stats)}


@dataclass
class Counted:
    """One run's counted pre-pass: its lines (scaled to the run), what was assumed, the packed prompts' mean tokens
    under the target's tokenizer and the counting run's stage-cache statistics (over the sample)."""
    lines: list[Line]
    assumptions: dict
    packed: float | None
    cache: dict


def passages(cfg, unit: float, questions: list) -> list[str]:
    """Passages of the index's measured size: sampled from a built index, else the questions' own text cut to
    ``unit`` tokens of the target's tokenizer."""
    sample = passage_sample(cfg.index) if cfg.unit == "passage" else None
    if sample is not None:
        return list(sample[0])
    tok = tokens_for(cfg.target_tokenizer).tokenizer
    ids = tok(" ".join(q.question for q in questions[:400]), add_special_tokens=False)["input_ids"]
    size = max(int(round(unit)), 1)
    while len(ids) < 2 * size:
        ids = ids + ids
    return [tok.decode(ids[i:i + size]) for i in range(0, len(ids) - size + 1, size)]


def evenly(items: list, n: int) -> list:
    step = max(1.0, len(items) / n)
    return [items[int(i * step)] for i in range(min(len(items), n))]


# counted runs by what they depend on: the runs of a sweep whose roles count alike (hub models counted under the
# stand-in tokenizer, one per target) run the pipeline once; each run's lines carry its own models (bounded)
_COUNTED: OrderedDict[str, tuple] = OrderedDict()


def count_prepass(cfg, benchmark: str, items: list, demos: list, scoring: str = "letters", answer: str = "default",
                  sample: int = SAMPLE_ITEMS, per_label_menus: bool = False, sample_demos: int = SAMPLE_DEMOS
                  ) -> Counted:
    """Runs ``cfg``'s pipeline on up to ``sample`` of ``items`` (public questions) and ``sample_demos`` of ``demos``
    (:class:`~medr2_hooks.data.record.Demo`, repeated to their number) against counting stand-ins; returns lines
    scaled to all of them.
    ``per_label_menus``: served menus read one label per request (how records before ``menu-v2`` were made)."""
    demo_stages = {s.name for s in pipeline(cfg.pipeline).stages if s.demos}
    demos = demos if demo_stages else []  # a pipeline without demonstration stages never runs them (LLM-AMT)
    picked, shown = evenly(items, sample), evenly(demos, sample_demos)
    run_demos = [shown[i % len(shown)] for i in range(len(demos))] if shown else []
    unit, unit_source = unit_size(cfg.index, cfg.unit, cfg.target_tokenizer)
    queries = tuple(q.question for q in items[:SAMPLE_QUERIES])
    union, union_source = union_size(cfg.index, tuple(cfg.retrievers) if cfg.retrievers else None, cfg.retrieve_k,
                                     cfg.unit, cfg.fusion, queries)
    declared = pipeline(cfg.pipeline)
    key = stable_hash({"cfg": {k: v for k, v in cfg.to_json().items() if k not in ("llm", "roles", "target_tokenizer")},
                       "roles": {r: identity(cfg.role(r)) for r in cfg.roles_used()},
                       "target": tokens_for(cfg.target_tokenizer).used, "declared": id(declared),
                       "benchmark": benchmark, "items": [q.id for q in picked],
                       "demos": [d.question.id for d in run_demos], "texts": [q.id for q in items[:400]],
                       "scoring": scoring, "answer": answer, "per_label": per_label_menus})
    if key not in _COUNTED:
        ledger = Ledger()
        m = CountedMedR2(cfg, CountingSearcher(cfg, union, passages(cfg, unit, items)), ledger, per_label_menus)
        packs, record = declared.prepare(m, benchmark, picked, run_demos, scoring=scoring, answer=answer)
        packed = sum(p["prompt_tokens"] for p in packs) / len(packs) if packs else None
        _COUNTED[key] = (ledger, packed, record["cache"])
        while len(_COUNTED) > 64:
            _COUNTED.popitem(last=False)
    ledger, packed, cache = _COUNTED[key]
    scale = (len(items) + len(demos)) / max(len(picked) + len(shown), 1)
    demo_scale = len(demos) / max(len(shown), 1)
    assumptions = {
        "unit_tokens": (round(unit, 1), unit_source), "candidates": (round(union, 1), union_source),
        "counted_on": f"{len(picked)} of {len(items)} questions and {len(shown)} of {len(demos)} demonstrations run "
                      f"through the pipeline, scaled x{scale:.2f}",
        "generations": "every generation uses its whole max_new_tokens (ceiling)",
        "decisions": "every filter keeps every document; every demonstration is shown (ceiling)",
        "judged_documents": "every retrieved document new to the judges (ceiling)",
    }
    if cfg.rerank and cfg.coarse == "cross_encoder":
        assumptions["cross_encoder_tokens"] = f"query + passage, counted with {tokens_for(cfg.cross_encoder).used}"
    if cfg.pipeline == "medr2":
        assumptions["iterations"] = f"{cfg.iterations} (ceiling: no early stop)" if cfg.cot else 1
    return Counted(_lines(cfg, ledger, scale, demo_scale, demo_stages), assumptions, packed, cache)


def _lines(cfg, ledger: Ledger, scale: float, demo_scale: float, demo_stages: set[str]) -> list[Line]:
    declared = {s.name: s for s in pipeline(cfg.pipeline).active(cfg) if s.roles}
    lines, asked_left = [], dict(ledger.asked)
    for (stage, share, role), (requests, sent, computed, generated) in ledger.usage.items():
        f = demo_scale if stage in demo_stages else scale
        items = asked_left.pop((stage, share), 0)
        model, endpoint = _model(cfg, role)
        lines.append(Line("prepass", stage, role, model, items * f, requests * f, sent * f, computed * f,
                          generated * f, f"{_target(cfg, share)}|{role}|{model}|{f:.6g}", endpoint))
    for (stage, share), asked in asked_left.items():  # asked, all answered from the run's own cache
        if stage in declared and asked:
            role = declared[stage].roles[0]
            f = demo_scale if stage in demo_stages else scale
            lines.append(Line("prepass", stage, role, cfg.role(role)["model"], asked * f, 0.0, 0.0, 0.0, 0.0,
                              f"{_target(cfg, share)}|{role}|{f:.6g}", None))
    return lines


def _model(cfg, role: str) -> tuple[str, str | None]:
    """The run's model and server (credentials stripped) of a role."""
    if role == "cross_encoder":
        return f"cross_encoder:{cfg.cross_encoder}", None
    spec = cfg.role(role)
    return spec["model"], public_url(spec["base_url"]) if spec.get("base_url") else None


def _target(cfg, share: str) -> str:
    """A call made after evidence was fitted with the target's tokenizer, or after the CoT model reasoned, is shared
    only with runs of the same tokenizer and CoT model (the counting run may stand for several)."""
    return f"{share}={cfg.target_tokenizer}|{cfg.role('cot')['model']}" if share.endswith("|target") else share
