"""What a cost estimate reads from the data, the index and the tokenizers: token counts of a run's real prompts.

- :class:`Tokens` counts under a model's own tokenizer when it is local (an ``embedded:`` name, a folder, a hub id
  in the local cache), else under a stand-in (Gemma-3-270M's) and says so: Llama's and Qwen's tokenizers give
  counts within ~15% of it on English medical text.
- :func:`unit_size`: the mean tokens of one evidence unit, measured on up to 1,000 passages spread over a built
  index (a passage ends where its document does, so the mean is below the segmentation's passage size), else the
  recipe's planning figure or passage size (:func:`medr2_hooks.experiments.budget.unit_tokens`).
- :func:`union_size`: the mean number of candidates one search returns (the fused union of the retrievers' top
  ``k``), measured on the benchmark's first questions over a built index; for an index not built here its
  ceiling, every retriever's ``k`` with no overlap.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from itertools import filterfalse

import numpy as np

STAND_IN = "embedded:gemma-270m"
SAMPLE_PASSAGES = 1000
SAMPLE_QUERIES = 16


@dataclass(frozen=True)
class Tokens:
    """Token counting (and chat rendering) under one model's tokenizer, or under the stand-in."""
    model: str
    used: str  # the tokenizer that counts: the model's own, or the stand-in's

    @property
    def stand_in(self) -> bool:
        return self.used != self.model

    def describe(self) -> str:
        return self.model if not self.stand_in else f"{self.model} (counted with {self.used})"

    def count(self, texts: list[str]) -> list[int]:
        """Tokens of each text: the sum of its words' counts (each word with the whitespace before it), which is the
        whole text's count wherever no token spans a word's start (none does under Gemma's, SmolLM2's or MiniLM's
        tokenizers, nor Llama 3's or Qwen2's, whose pre-tokenizers split there; tests/test_cost.py holds it exact
        on the index's passages and an 80K-token evidence block, bare and in a chat turn)."""
        return _words(self.used).count(texts)

    def mean(self, texts: list[str]) -> float:
        return float(np.mean(self.count(texts))) if texts else 0.0

    def chat(self, user: str, system: str | None = None) -> str:
        """``user`` as one chat turn (after ``system``) under the tokenizer's template (plain text when it has
        none), as the backends' ``chat`` renders it."""
        return _chat(self.used, user, system)

    def truncate(self, text: str, max_tokens: int) -> str:
        """``text`` cut to its first ``max_tokens`` tokens, as the backends' ``truncate``."""
        return _truncate(self.used, text, max_tokens)

    @property
    def tokenizer(self):
        return _tokenizer(self.used)


class WordCounts:
    """Token counts under one tokenizer, remembered per line and per word (each bounded: forgotten all at once when
    full). A dry-run sends the same document in prompt after prompt, on its own line, and the same vocabulary over
    and over: a known line costs a lookup, a new one the sum of its words' counts (in C), and the tokenizer (0.5 ms
    for one passage under Gemma's 262K-piece vocabulary) runs on new words only."""

    LINE, WORD = re.compile(r"\s*[^\n]+|\s+"), re.compile(r"\s*\S+|\s+")
    LINES, WORDS = 100_000, 1_000_000

    def __init__(self, tokenizer):
        self.tokenizer, self.lines, self.words = tokenizer, {}, {}

    def count(self, texts: list[str]) -> list[int]:
        pieces = [self.LINE.findall(t) for t in texts]
        self.lines = self._learn(self.lines, pieces, self.LINES, self._sum_words)
        return [sum(map(self.lines.__getitem__, lines)) for lines in pieces]

    def _sum_words(self, lines: list[str]) -> list[int]:
        pieces = [self.WORD.findall(t) for t in lines]
        self.words = self._learn(self.words, pieces, self.WORDS, self._tokenize)
        return [sum(map(self.words.__getitem__, words)) for words in pieces]

    @staticmethod
    def _learn(known: dict, pieces: list[list[str]], limit: int, measure) -> dict:
        """``known`` with every piece in ``pieces`` measured (a new dict when it would grow past ``limit``)."""
        seen = set().union(*map(set, pieces))
        new = list(filterfalse(known.__contains__, seen))
        if len(known) + len(new) > limit:
            known, new = {}, list(seen)
        known.update(zip(new, measure(new)))
        return known

    def _tokenize(self, texts: list[str]) -> list[int]:
        """Token counts of ``texts`` from the fast tokenizer's Rust core directly (its Python wrapper costs more per
        call than a word does)."""
        out: list[int] = []
        for start in range(0, len(texts), 4096):
            batch = texts[start:start + 4096]
            if getattr(self.tokenizer, "is_fast", False):
                out += [len(e.ids) for e in self.tokenizer.backend_tokenizer.encode_batch(batch,
                                                                                            add_special_tokens=False)]
            else:
                out += [len(ids) for ids in self.tokenizer(batch, add_special_tokens=False)["input_ids"]]
        return out


@lru_cache(maxsize=16)
def _words(model: str) -> WordCounts:
    return WordCounts(_tokenizer(model))


@lru_cache(maxsize=16)
def tokens_for(model: str) -> Tokens:
    """:class:`Tokens` for ``model`` (a role's ``tokenizer`` or ``model``, a target's tokenizer)."""
    try:
        _tokenizer(model)
        return Tokens(model, model)
    except (OSError, ValueError):  # a hub id not downloaded here (no network): count with the stand-in
        return Tokens(model, STAND_IN)


@lru_cache(maxsize=65536)
def _chat(tokenizer: str, user: str, system: str | None = None) -> str:
    tok = _tokenizer(tokenizer)
    if not getattr(tok, "chat_template", None):
        return f"{system}\n\n{user}" if system else user
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]
    return tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


@lru_cache(maxsize=65536)
def _truncate(tokenizer: str, text: str, max_tokens: int) -> str:
    """(Remembered: each judge cuts the same document to the same length.)"""
    if _words(tokenizer).count([text])[0] <= max_tokens:
        return text
    tok = _tokenizer(tokenizer)
    return tok.decode(tok(text, add_special_tokens=False)["input_ids"][:max_tokens])


@lru_cache(maxsize=16)
def _tokenizer(model: str):
    import transformers
    from transformers import AutoTokenizer

    from ..llm.embedded import resolve

    transformers.logging.set_verbosity_error()
    tok = AutoTokenizer.from_pretrained(resolve(model), local_files_only=True)
    tok.model_max_length = 10**9
    return tok


def _built(index: str) -> bool:
    from ..retrieve.build import index_dir

    return (index_dir(index) / "manifest.json").is_file()


@lru_cache(maxsize=8)
def passage_sample(index: str) -> tuple[tuple[str, ...], int] | None:
    """Up to 1,000 passages spread evenly over a built index, and how many it has (None: not built here)."""
    from ..corpus.store import CorpusStore
    from ..retrieve.build import index_dir

    if not _built(index):
        return None
    store = CorpusStore(index_dir(index) / "corpus")
    try:
        n = len(store.passages)
        pids = np.unique(np.linspace(0, n - 1, min(n, SAMPLE_PASSAGES)).astype(int))
        return tuple(store.passage_texts(pids.tolist())), n
    finally:
        store.close()


@lru_cache(maxsize=32)
def unit_size(index: str, unit: str, tokenizer: str) -> tuple[float, str]:
    """Mean tokens of one evidence unit of ``index`` under ``tokenizer``, and where the figure comes from."""
    from .budget import unit_tokens

    sample = passage_sample(index) if unit == "passage" else None
    if sample is None:
        return unit_tokens(index, unit)
    texts, n = sample
    return tokens_for(tokenizer).mean(list(texts)), f"index {index}: {len(texts)} of {n} passages measured"


@lru_cache(maxsize=64)
def union_size(index: str, retrievers: tuple[str, ...] | None, k: int, unit: str, fusion: str,
               queries: tuple[str, ...]) -> tuple[float, str]:
    """Mean candidates per search over ``index`` and where the figure comes from."""
    from ..retrieve.searcher import RETRIEVERS, Searcher

    if not _built(index):
        from ..corpus.recipe import find_recipe, load_recipe

        recipe = load_recipe(str(find_recipe(index)))
        n = len([r for r in RETRIEVERS if getattr(recipe, r, None) is not None and r in (retrievers or RETRIEVERS)])
        ceiling = k if fusion != "union" else n * k
        return float(ceiling), f"ceiling: {n} retriever(s) x k = {k}, no overlap (index {index} not built here)"

    searcher = Searcher.open(index, retrievers=retrievers, bm25_backend="numpy")  # 16 queries: no JIT compile
    hits = searcher.search(list(queries), k=k, unit=unit, fusion=fusion)
    return float(np.mean([len(row) for row in hits])), f"measured: {len(queries)} questions searched in {index}"
