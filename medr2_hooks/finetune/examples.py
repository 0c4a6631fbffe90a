"""Training rows: an item's prompt as its evaluation sends it and the answer as its reader reads it; loss on the
answer tokens only. ``answer_format: letters``: the ``*_direct`` prompt, then `` B`` (scored by log-likelihood);
``generative``: the ``*_direct_gen`` prompt (through the tokenizer's chat template with ``chat: true``, as lm-eval's
``--apply_chat_template`` sends it), then ``Therefore, the answer is (B).`` and the end token (what the strict
reader takes, and where generation stops).

Bad input: an item without an answer, or whose answer is not one of its options, is an error naming its
source (file:line); a row longer than ``max_length`` tokens is skipped and counted (never cut: a cut
prompt would teach the model a different question). Training items that are also in an evaluation slice
are refused before any step runs.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import data, settings
from ..apply.prompts import answer_statement, generative_prompt, question_prompt
from ..config import ConfigError
from ..data.record import Record
from ..errors import DataError
from .recipe import FinetuneRecipe, ItemSlice


@dataclass(frozen=True)
class Row:
    item: str  # "<benchmark>:<record id>"
    prompt: list[int]
    answer: list[int]


def load_items(spec: ItemSlice) -> list[Record]:
    if spec.source == "pool":
        records = data.pools(spec.benchmark).eval
    elif spec.source == "hub":
        hub = data.benchmark(spec.benchmark).hub
        if hub is None:
            raise DataError(f"{spec.benchmark} has no hub copy; use source medqa_release or pool")
        records = data.call_loader(hub, spec.split or "train")
    else:
        from ..data import medqa

        loaders = {"medqa_usmle": medqa.load_usmle, "medqa_mcmle": medqa.load_mcmle}
        if spec.benchmark not in loaders:
            raise ConfigError(f"source medqa_release reads MedQA only, not {spec.benchmark!r}")
        split = spec.split or "train"
        try:
            records = loaders[spec.benchmark](settings.data_dir(), splits=(split,))
        except DataError:
            folder = {"medqa_usmle": "medqa_usmle/US", "medqa_mcmle": "medqa_mcmle/Mainland"}[spec.benchmark]
            raise DataError(f"{spec.benchmark}: training on the MedQA release's {split} split needs its file "
                            f"{settings.data_dir()}/{folder}/{split}.jsonl (5 options, as evaluated), which the shared "
                            "mirror lacks: download the MedQA release (github.com/jind11/MedQA) and put the file "
                            "there") from None
    if spec.split and spec.source == "pool":
        records = [r for r in records if r.meta.get("split") == spec.split]
    end = None if spec.count is None else spec.offset + spec.count
    return records[spec.offset:end]


def item_ids(spec: ItemSlice) -> list[str]:
    return [f"{spec.benchmark}:{r.id}" for r in load_items(spec)]


def check_no_overlap(train: list[str], recipe: FinetuneRecipe) -> None:
    # ids carry their benchmark, so only evaluation slices of a trained benchmark can overlap (and only they are read)
    trained = {spec.benchmark for spec in recipe.train}
    evaluated = {i for spec in recipe.evaluate if spec.benchmark in trained for i in item_ids(spec)}
    both = sorted(set(train) & evaluated)
    if both:
        raise ConfigError(f"recipe {recipe.name}: {len(both)} training items are also evaluated "
                          f"(e.g. {', '.join(both[:3])}); choose disjoint train and evaluate slices")


def training_rows(recipe: FinetuneRecipe, tokenizer) -> tuple[list[Row], dict]:
    """Tokenized rows of every training slice and a report of what was skipped and why."""
    rows, skipped = [], {"too_long": []}
    for spec in recipe.train:
        for r in load_items(spec):
            where = r.meta.get("source", r.id)
            if not r.answer:
                raise DataError(f"{spec.benchmark} {where}: field 'answer': training item has no answer")
            if r.answer not in r.options:
                raise DataError(f"{spec.benchmark} {where}: field 'answer': {r.answer!r} is not one of the options "
                                f"{list(r.options)}")
            prompt, answer = encode(recipe, tokenizer, spec.benchmark, r)
            item = f"{spec.benchmark}:{r.id}"
            if len(prompt) + len(answer) > recipe.max_length:
                skipped["too_long"].append(item)
                continue
            rows.append(Row(item, prompt, answer))
    if not rows:
        raise DataError(f"recipe {recipe.name}: no training rows (skipped as too long: {len(skipped['too_long'])})")
    return rows, skipped


def encode(recipe: FinetuneRecipe, tokenizer, benchmark: str, record: Record) -> tuple[list[int], list[int]]:
    """``(prompt ids, answer ids)`` of one training item in the recipe's answer format."""
    question = question_prompt(benchmark, record.public())
    if recipe.answer_format == "letters":
        return (tokenizer(question, add_special_tokens=True)["input_ids"],
                tokenizer(f" {record.answer}", add_special_tokens=False)["input_ids"])
    text = generative_prompt(question, labels=list(record.options))
    if recipe.chat:
        if not getattr(tokenizer, "chat_template", None):
            raise ConfigError(f"recipe {recipe.name}: chat: true, but {recipe.model}'s tokenizer has no chat template")
        from ..llm.local import chat_token_ids

        prompt = chat_token_ids(tokenizer, [{"role": "user", "content": text}])
        answer = tokenizer(answer_statement(record.answer), add_special_tokens=False)["input_ids"]
    else:
        prompt = tokenizer(text, add_special_tokens=True)["input_ids"]
        answer = tokenizer(f" {answer_statement(record.answer)}", add_special_tokens=False)["input_ids"]
    eos = tokenizer.eos_token_id
    return prompt, list(answer) + ([eos] if eos is not None else [])
