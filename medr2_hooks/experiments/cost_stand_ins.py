"""The counting stand-ins of a cost estimate's executed pre-pass (:mod:`.cost_run` says what each answers and
which figures are ceilings): roles with no model, the coarse cross-encoder, the searcher and the stage cache, all
writing what the run would send into one :class:`Ledger`."""

from __future__ import annotations

import hashlib
import json
import math
from collections import defaultdict

from ..cache import StageCache, stable_hash
from ..llm.backend import Usage
from ..retrieve.searcher import Hit
from .cost_sizes import Tokens, tokens_for

# generated text: medical words without stop strings (no newline, no full stop)
FILLER = "the patient presents with acute pain and fever and raised inflammatory markers suggesting infection "
CEILING_CHOICE = {"conflict": -1}  # the answer that keeps every document: "no" conflict; else the first label


class Ledger:
    """What the counting run sent, per cached call (its stage and share key) and role."""

    def __init__(self):
        self.stage: str | None = None
        self.share: str | None = None
        # (stage, share, role) -> [requests, prompt tokens, computed prompt tokens, generated]; the role's model and
        # server are the run's own (a counted run may stand for several runs whose models count alike)
        self.usage: dict[tuple, list[float]] = defaultdict(lambda: [0.0] * 4)
        self.asked: dict[tuple[str, str], int] = defaultdict(int)  # (stage, share) -> inputs asked (hits + misses)

    def add(self, role: str, requests: float, sent: float, computed: float, generated: float = 0.0) -> None:
        row = self.usage[(self.stage, self.share, role)]
        for i, v in enumerate((requests, sent, computed, generated)):
            row[i] += v


def _digest(*parts: str) -> str:
    """Eight hex digits of ``parts``: the marker that makes a reply or a passage its own."""
    return hashlib.blake2b("\x00".join(parts).encode(), digest_size=4).hexdigest()


def identity(spec: dict) -> str:
    """How a role's backend counts: menus read as its kind reads them, tokens under its tokenizer (or the stand-in)."""
    kind = "hf" if spec.get("backend", "hf") == "hf" else "served"
    return f"{kind}:{tokens_for(spec.get('tokenizer') or spec['model']).used}"


class CountingBackend:
    """A role's backend that counts instead of computing (see the module docstring for what it answers)."""

    def __init__(self, role: str, spec: dict, ledger: Ledger):
        self.role, self.ledger = role, ledger
        self.tokens: Tokens = tokens_for(spec.get("tokenizer") or spec["model"])
        self.model_id = identity(spec)  # how it counts, not which model: runs whose roles count alike share a run
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
        self.ledger.add(self.role, rows * len(prompts), sent, computed, generated)

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
        parts = [d.split("\n", 1) for _, d in pairs]
        tokens = self._total([q for q, _ in pairs]) + self._total([p[-1] for p in parts]) + \
            self._total([p[0] for p in parts if len(p) == 2])
        self.ledger.add("cross_encoder", len(pairs), tokens, tokens)
        return [0.5] * len(pairs)


class CountingSearcher:
    """Per search, ``union`` candidates on average (each query gets its floor or ceiling), each a new passage."""

    def __init__(self, cfg, union: float, pool: list[str]):
        self.manifest = {"name": cfg.index, "recipe_hash": "counted", "corpus_hash": "counted"}  # no "dense": no μ
        self.retrievers = tuple(cfg.retrievers or ())
        self.union, self.pool = union, pool

    def overlong_queries(self, queries: list[str]) -> dict:
        return {}

    def document_side_vectors(self, queries: list[str], documents: list[str]) -> None:
        return None  # an encoder pass, as a query's: not a role's model call (the estimate counts those)

    def search(self, queries: list[str], k: int = 10, unit: str = "passage", fusion: str = "union",
               exclude_pmids=None, **_) -> list[list[Hit]]:
        out = []
        for q in queries:
            extra = int(_digest(q), 16) / 16 ** 8 < self.union - math.floor(self.union)
            out.append([self._hit(q, r) for r in range(math.floor(self.union) + extra)])
        return out

    def _hit(self, query: str, rank: int) -> Hit:
        mark = _digest(query, str(rank))
        text = f"{mark}\n{self.pool[int(mark, 16) % len(self.pool)]}"  # its own line: the pool text's is counted once
        return Hit(f"counted:{mark}", "", "book", "en", None, {}, 0, 0, len(text), text)


class CountingCache(StageCache):
    """The counting run's stage cache: a dict (values as computed; a hit reads them back through JSON, as a stored
    value is read); each call's share key is read off the keys it computes (the stage, and every input's key under
    the call's config), so a call's inputs are hashed once."""

    def __init__(self, ledger: Ledger):
        super().__init__(":memory:")
        self.ledger, self.calling, self.suffix = ledger, "", ""
        self.digests: dict[str, str] = {}
        self.values: dict[tuple[str, str, str], object] = {}

    def get_many(self, stage: str, keys: list[str], config, shape=None) -> dict:
        settings = stable_hash(config)
        found = {k: json.loads(json.dumps(self.values[(stage, k, settings)], ensure_ascii=False))
                 for k in keys if (stage, k, settings) in self.values}
        self.stats[f"{stage}:hit"] += len(found)
        self.stats[f"{stage}:miss"] += len(set(keys)) - len(found)
        return found

    def put_many(self, stage: str, items: dict, config) -> None:
        settings = stable_hash(config)
        self.values.update(((stage, k, settings), v) for k, v in items.items())

    def keys(self, inputs: list, config) -> list[str]:
        """As the stage cache's keys, each distinct input with its own key. Texts and lists of texts (the judges'
        documents, the coarse (query, document) pairs: nearly all inputs) are keyed from their texts' digests, each
        text digested once: a search's query is in every one of its ~1,800 pairs."""
        if not all(isinstance(x, str) or (isinstance(x, list) and all(isinstance(y, str) for y in x))
                   for x in inputs):
            return self._shared(super().keys(inputs, config))
        if len(self.digests) > 200_000:
            self.digests = {}
        settings = stable_hash(config)
        return self._shared([self._text("\x00".join([settings, *(map(self._text, x) if isinstance(x, list)
                                                                 else ["", self._text(x)])]), remember=False)
                             for x in inputs])

    def _text(self, text: str, remember: bool = True) -> str:
        if text in self.digests:
            return self.digests[text]
        digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()
        if remember:
            self.digests[text] = digest
        return digest

    def _shared(self, keys: list[str]) -> list[str]:
        self.ledger.share = stable_hash([self.calling, keys]) + self.suffix  # the call's share key
        return keys
