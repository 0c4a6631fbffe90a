"""The pre-pass of a cost estimate, executed: the pipeline's own ``prepare`` (:mod:`medr2_hooks.pipeline.declare`)
runs on a run's questions with counting stand-ins wherever the real run would spend GPU time, so it counts the
stages that run, as they run. The dry-run's fast counting model (:mod:`.cost_stages`) is checked against it
(:func:`.cost.check_model`): a stage that runs and that the model does not count, or counts otherwise, is an error.

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
  ceiling), each a new passage (a marker makes it unique, so no judged document repeats) of the index's measured
  size: passages sampled from a built index, else the benchmark's own question text cut to the recipe's planning
  size.
- **Cache**: an in-memory stage cache, so work a run repeats is free as it is in the real run (LLM-AMT's relevance
  filter finds the coarse rerank's judgements).
"""

from __future__ import annotations

import hashlib
import math
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass

from ..cache import StageCache
from ..llm.backend import Usage
from ..pipeline.config import ROLES
from ..pipeline.declare import pipeline
from ..pipeline.medr2 import MedR2
from ..redact import public_url
from ..retrieve.searcher import Hit
from .cost_stages import Line
from .cost_sizes import SAMPLE_QUERIES, Tokens, passage_sample, tokens_for, union_size, unit_size

# generated text: medical words without stop strings (no newline, no full stop)
FILLER = "the patient presents with acute pain and fever and raised inflammatory markers suggesting infection "
CEILING_CHOICE = {"conflict_judge": -1}  # the answer that keeps every document: "no" conflict; else the first label


class Ledger:
    """What the counting run sent, per stage and role."""

    def __init__(self):
        self.stage: str | None = None
        # (stage, role, model, endpoint) -> [requests, prompt tokens, computed prompt tokens, generated]
        self.usage: dict[tuple, list[float]] = defaultdict(lambda: [0.0] * 4)
        self.asked: dict[str, int] = defaultdict(int)  # stage -> distinct inputs asked per call (hits + misses)

    def add(self, role: str, model: str, endpoint: str | None, requests: float, sent: float, computed: float,
            generated: float = 0.0) -> None:
        row = self.usage[(self.stage, role, model, endpoint)]
        for i, v in enumerate((requests, sent, computed, generated)):
            row[i] += v


def _digest(*parts: str) -> str:
    """Eight hex digits of ``parts``: the marker that makes a reply or a passage its own."""
    return hashlib.blake2b("\x00".join(parts).encode(), digest_size=4).hexdigest()


class CountingBackend:
    """A role's backend that counts instead of computing (see the module docstring for what it answers)."""

    def __init__(self, role: str, spec: dict, ledger: Ledger):
        self.role, self.ledger = role, ledger
        self.tokens: Tokens = tokens_for(spec.get("tokenizer") or spec["model"])
        self.model_id = spec["model"]
        self.endpoint = public_url(spec["base_url"]) if spec.get("base_url") else None
        self.usage = Usage()
        self._seen: set[int] = set()  # distinct prompts this role was sent (computed once under prefix caching)
        self._filler = self.tokens.tokenizer(FILLER, add_special_tokens=False)["input_ids"]

    def count_tokens(self, texts: list[str]) -> list[int]:
        return self.tokens.count(list(texts))

    def truncate(self, text: str, max_tokens: int) -> str:
        return self.tokens.truncate(text, max_tokens)

    def chat(self, user: str, system: str | None = None) -> str:
        return self.tokens.chat(user, system)

    def _add(self, prompts: list[str], rows: int = 1, extra: float = 0.0, generated: float = 0.0,
             whole: bool = False) -> None:
        counts = self.tokens.count(prompts)
        sent = rows * sum(counts) + extra
        computed = sent if whole else extra
        if not whole:
            for p, n in zip(prompts, counts):
                if hash(p) not in self._seen:
                    self._seen.add(hash(p))
                    computed += n
        self.ledger.add(self.role, self.model_id, self.endpoint, rows * len(prompts), sent, computed, generated)

    def _text(self, prompt: str, n: int) -> str:
        """A reply of ``n`` tokens, different for every model and prompt (a marker first): nothing downstream repeats
        that would not repeat in the real run."""
        ids = (self._filler * (n // max(len(self._filler), 1) + 2))[: max(n - 4, 1)]
        return f"{_digest(self.model_id, prompt)} {self.tokens.tokenizer.decode(ids)}"

    def generate(self, prompts: list[str], max_new_tokens: int, stop: list[str] | None = None,
                 role: str = "generate") -> list[str]:
        self._add(prompts, generated=len(prompts) * max_new_tokens)
        return [self._text(p, max_new_tokens) for p in prompts]

    def score(self, prompts: list[str], continuations: list[str], role: str = "score") -> list[tuple[float, int]]:
        lengths = [max(n, 1) for n in self.tokens.count(continuations)]
        self._add(prompts, extra=sum(lengths), whole=not isinstance(self, CountingHF))
        return [(-float(n), n) for n in lengths]

    @staticmethod
    def _decision(n: int, role: str) -> list[float]:
        pick = CEILING_CHOICE.get(role, 0) % n
        return [0.0 if i == pick else -30.0 for i in range(n)]


class CountingHF(CountingBackend):
    """``hf``: a menu is one pass over its prompt, every label scored on its cached keys."""

    def score_choices(self, prompts: list[str], choices: list[str], role: str = "score") -> list[list[float]]:
        self._add(prompts, extra=len(prompts) * sum(self.tokens.count(choices)))
        return [self._decision(len(choices), role) for _ in prompts]


class CountingServed(CountingBackend):
    """``vllm`` and served roles: a menu of one-token labels is one request; longer labels go to :meth:`score`
    (``per_label``: every menu, as served menus were read before one request per menu, ``menu-v2``)."""

    per_label = False

    def next_token_logprobs(self, prompts: list[str], choices: list[str],
                            role: str = "score") -> list[list[float]] | None:
        if self.per_label or any(n != 1 for n in self.tokens.count(choices)):
            return None
        self._add(prompts, generated=len(prompts))
        return [self._decision(len(choices), role) for _ in prompts]


class CountingCrossEncoder:
    """The coarse cross-encoder: one scored (query, passage) pair per request, counted under its tokenizer (query
    and passage apart, each counted once: a query meets every candidate, a passage is a marker and a pool text)."""

    def __init__(self, name: str, ledger: Ledger):
        self.name, self.ledger, self.tokens = name, ledger, tokens_for(name)

    def overlong(self, pairs: list[tuple[str, str]]) -> int:
        return 0

    def _total(self, texts: list[str]) -> int:
        """Tokens of ``texts``, each distinct text tokenized once."""
        distinct = list(dict.fromkeys(texts))
        counts = dict(zip(distinct, self.tokens.count(distinct)))
        return sum(counts[t] for t in texts)

    def score(self, pairs: list[tuple[str, str]]) -> list[float]:
        parts = [d.split(" ", 1) for _, d in pairs]
        tokens = self._total([q for q, _ in pairs]) + self._total([p[-1] for p in parts]) + \
            self._total([p[0] for p in parts if len(p) == 2])
        self.ledger.add("cross_encoder", f"cross_encoder:{self.name}", None, len(pairs), tokens, tokens)
        return [0.5] * len(pairs)


class CountingSearcher:
    """Per search, ``union`` candidates on average (each query gets its floor or ceiling), each a new passage."""

    def __init__(self, cfg, union: float, pool: list[str]):
        self.manifest = {"name": cfg.index, "recipe_hash": "counted", "corpus_hash": "counted"}  # no "dense": no μ
        self.retrievers = tuple(cfg.retrievers or ())
        self.union, self.pool = union, pool

    def overlong_queries(self, queries: list[str]) -> dict:
        return {}

    def search(self, queries: list[str], k: int = 10, unit: str = "passage", fusion: str = "union",
               exclude_pmids=None, **_) -> list[list[Hit]]:
        out = []
        for q in queries:
            extra = int(_digest(q), 16) / 16 ** 8 < self.union - math.floor(self.union)
            out.append([self._hit(q, r) for r in range(math.floor(self.union) + extra)])
        return out

    def _hit(self, query: str, rank: int) -> Hit:
        mark = _digest(query, str(rank))
        text = f"{mark} {self.pool[int(mark, 16) % len(self.pool)]}"
        return Hit(f"counted:{mark}", "", "book", "en", None, {}, 0, 0, len(text), text)


class CountedMedR2(MedR2):
    """The pipeline's toolbox over counting roles, searcher and cross-encoder, with an in-memory stage cache."""

    def __init__(self, cfg, searcher: CountingSearcher, ledger: Ledger, per_label_menus: bool = False):
        super().__init__(cfg, cache=StageCache(":memory:"), searcher=searcher)
        self.ledger, self.per_label_menus = ledger, per_label_menus
        self.ids = {role: cfg.role(role)["model"] for role in ROLES}  # no server asked for its live identity
        self._backends: dict[str, CountingBackend] = {}
        self._target_tok = tokens_for(cfg.target_tokenizer).tokenizer

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

    def cached(self, stage: str, inputs: list, config: dict, compute, batch_size: int = 64) -> list:
        stats = self.cache.stats
        before = stats[f"{stage}:hit"] + stats[f"{stage}:miss"]
        try:
            # one batch: nothing to resume, no progress bar
            return super().cached(stage, inputs, config, compute, batch_size=max(len(inputs), 1))
        finally:
            self.ledger.asked[stage] += stats[f"{stage}:hit"] + stats[f"{stage}:miss"] - before

    def demo_rationales(self, items: list[list]) -> list[dict]:
        return [{**r, "agrees": True} for r in super().demo_rationales(items)]

    def own_article_ranks(self, questions, depth: int = 100) -> dict:
        return {}  # a search of the question's own abstract: no model

    def run_record(self, started: float, questions: int, demos: int) -> dict:
        return {"cache": dict(self.cache.stats)}


@dataclass
class Counted:
    """One counted pre-pass: its lines, the packed prompts' mean tokens under the target's tokenizer and the counting
    run's stage-cache statistics."""
    lines: list[Line]
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


def count_prepass(cfg, benchmark: str, items: list, demos: list, scoring: str = "letters", answer: str = "default",
                  per_label_menus: bool = False) -> Counted:
    """Runs ``cfg``'s pipeline on ``items`` (public questions) and ``demos`` (:class:`~medr2_hooks.data.record.Demo`)
    against counting stand-ins. ``per_label_menus``: served menus read one label per request (how records before
    ``menu-v2`` were made)."""
    unit, _ = unit_size(cfg.index, cfg.unit, cfg.target_tokenizer)
    union, _ = union_size(cfg.index, tuple(cfg.retrievers) if cfg.retrievers else None, cfg.retrieve_k, cfg.unit,
                          cfg.fusion, tuple(q.question for q in items[:SAMPLE_QUERIES]))
    ledger = Ledger()
    m = CountedMedR2(cfg, CountingSearcher(cfg, union, passages(cfg, unit, items)), ledger, per_label_menus)
    packs, record = pipeline(cfg.pipeline).prepare(m, benchmark, items, demos, scoring=scoring, answer=answer)
    packed = sum(p["prompt_tokens"] for p in packs) / len(packs) if packs else None
    return Counted(_lines(cfg, ledger), packed, record["cache"])


def _lines(cfg, ledger: Ledger) -> list[Line]:
    """A line per stage and role; a declared stage asked and answered wholly from the run's own cache gets its
    asked inputs on a line of no requests (LLM-AMT's relevance filter)."""
    asked = dict(ledger.asked)
    lines = [Line("prepass", stage, role, model, asked.pop(stage, 0), requests, sent, computed, generated,
                  endpoint=endpoint)
             for (stage, role, model, endpoint), (requests, sent, computed, generated) in ledger.usage.items()]
    declared = {s.name: s for s in pipeline(cfg.pipeline).active(cfg) if s.roles}
    for stage, n in asked.items():
        if stage in declared and n:
            role = declared[stage].roles[0]
            lines.append(Line("prepass", stage, role, cfg.role(role)["model"], n, 0.0, 0.0, 0.0, 0.0))
    return lines
