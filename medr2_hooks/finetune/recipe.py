"""Fine-tuning recipes (YAML in ``finetune/recipes/``): typed, unknown keys rejected.

Defaults are the paper's recipe: linear warm-up over 3% of the steps then cosine decay, peak lr 2e-5, weight
decay 0, global batch 128 (gradient accumulation fills it), 3 epochs, loss on the answer tokens only.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from .. import settings
from ..config import ConfigError, from_dict, in_range, load_yaml
from ..fs import safe_component

TRAIN_SOURCES = ("pool", "hub", "medqa_release")
ANSWER_FORMATS = ("letters", "generative")


@dataclass(frozen=True)
class ItemSlice:
    """Items of a benchmark. ``source``: ``pool`` (the local evaluation pool, demos excluded), ``hub`` (the
    benchmark's hub loader, e.g. its train split) or ``medqa_release`` (``<split>.jsonl`` of the MedQA release
    under MEDR2_DATA_DIR). ``split`` filters on the record's split; ``offset``/``count`` take a contiguous slice."""

    benchmark: str
    source: str = "pool"
    split: str | None = None
    offset: int = 0
    count: int | None = None

    def __post_init__(self):
        if self.source not in TRAIN_SOURCES:
            raise ValueError(f"source must be one of {', '.join(TRAIN_SOURCES)}, found {self.source!r}")
        if self.offset < 0 or (self.count is not None and self.count < 1):
            raise ValueError("offset must be >= 0 and count >= 1")


@dataclass(frozen=True)
class FinetuneRecipe:
    name: str
    model: str
    train: list[ItemSlice]
    evaluate: list[ItemSlice] = field(default_factory=list)  # slices the checkpoint will be scored on
    learning_rate: float = 2e-5
    warmup_ratio: float = 0.03
    weight_decay: float = 0.0
    global_batch: int = 128
    micro_batch: int = 4
    epochs: int = 3
    max_steps: int | None = None  # bound on optimizer steps (the CPU recipe); None: all epochs
    max_length: int = 1024  # longer training rows are skipped and counted
    # what the checkpoint learns to answer, matching how it is evaluated: ``letters`` (the letter prompt, then
    # " B": scored by the direct task's log-likelihoods) or ``generative`` (the generative prompt, then "Therefore,
    # the answer is (B)." and the end token: scored by the direct_gen task's reader); ``chat``: the prompt through
    # the tokenizer's chat template, as lm-eval's --apply_chat_template sends it
    answer_format: str = "letters"
    chat: bool = False
    max_grad_norm: float | None = 1.0
    # the compute dtype (bfloat16 / float16: mixed precision over float32 master weights, 16 GB of weights, gradients
    # and AdamW state per billion parameters; float32: everything in float32) and the saved checkpoint's dtype
    dtype: str = "bfloat16"
    seed: int = 1234
    checkpoint_every: int = 1  # optimizer steps between resumable checkpoints
    output_dir: str | None = None  # default: $MEDR2_CACHE_DIR/finetune/<name>

    def __post_init__(self):
        safe_component(self.name, "recipe name")  # the default output folder's name
        if not self.train:
            raise ValueError("a recipe needs at least one training slice")
        for name in ("global_batch", "micro_batch", "epochs", "max_steps", "max_length", "checkpoint_every"):
            in_range(self, name, 1)  # a checkpoint is final only when it has trained at least one step
        in_range(self, "learning_rate", 0, low_open=True)
        in_range(self, "weight_decay", 0)
        in_range(self, "max_grad_norm", 0, low_open=True)
        if self.global_batch % self.micro_batch:
            raise ValueError(f"global_batch {self.global_batch} must be a multiple of micro_batch {self.micro_batch}")
        if not 0 <= self.warmup_ratio < 1:
            raise ValueError("warmup_ratio must be in [0, 1)")
        if self.answer_format not in ANSWER_FORMATS:
            raise ValueError(f"answer_format must be one of {', '.join(ANSWER_FORMATS)}, found {self.answer_format!r}")
        if self.chat and self.answer_format != "generative":
            raise ValueError("chat: true trains on the chat-templated generative prompt: set answer_format generative")
        if self.dtype not in ("bfloat16", "float16", "float32"):
            raise ValueError(f"dtype must be bfloat16, float16 or float32, found {self.dtype!r}")

    def out_dir(self):
        from pathlib import Path

        return Path(self.output_dir) if self.output_dir else settings.cache_dir() / "finetune" / self.name

    def to_json(self) -> dict:
        return asdict(self)


def check_read_as(answer_format: str, chat: bool, generative: bool, chat_template: bool, where: str) -> None:
    """The one rule of a checkpoint and its cells: it learns to answer as its cell reads it. A generatively scored
    cell's checkpoint was trained on the generative prompt and answer statement (through the chat template exactly
    when the cell applies it), a letter-scored cell's on the letter prompt and label; anything else is an error."""
    wanted = ("generative" if generative else "letters", bool(generative and chat_template))
    if (answer_format, bool(chat)) != wanted:
        raise ConfigError(f"{where} trains answer_format {answer_format}, chat {str(bool(chat)).lower()}, but its "
                          f"cells are read as answer_format {wanted[0]}, chat {str(wanted[1]).lower()}: a checkpoint "
                          "must learn the answer its reader takes")


def check_evaluated_as_trained(recipe: dict, checkpoint: str, tasks: dict[str, dict], chat_template: bool) -> None:
    """:func:`check_read_as` for every task (name -> lm-eval config) an evaluation of ``checkpoint`` runs, from the
    recipe its training manifest records."""
    for task, config in tasks.items():
        check_read_as(recipe.get("answer_format", "letters"), bool(recipe.get("chat")),
                      config.get("output_type") == "generate_until", chat_template,
                      f"checkpoint {checkpoint} (evaluated on {task})")


def trained_format(checkpoint) -> tuple[str, bool, str] | None:
    """``(answer_format, chat, what)`` of a checkpoint folder: from its training manifest once trained, else from the
    recipe whose default output folder it is (``$MEDR2_CACHE_DIR/finetune/<recipe>/final``); None when neither
    says."""
    from pathlib import Path

    from ..fs import read_json

    folder = Path(checkpoint).expanduser()
    manifest = folder / "medr2_training.json"  # medr2_hooks.finetune.train.MANIFEST
    if manifest.is_file():
        recipe = read_json(manifest).get("recipe") or {}
        return recipe.get("answer_format", "letters"), bool(recipe.get("chat")), f"checkpoint {folder}"
    recipes = settings.REPO_ROOT / "finetune" / "recipes"
    if folder.name == "final" and (recipes / f"{folder.parent.name}.yaml").is_file():
        recipe = load_recipe(folder.parent.name)
        if recipe.out_dir().expanduser().resolve() == folder.parent.resolve():
            return recipe.answer_format, recipe.chat, f"checkpoint {folder} (recipe {recipe.name})"
    return None


def load_recipe(name_or_path: str, overrides: dict | None = None) -> FinetuneRecipe:
    from pathlib import Path

    path = Path(name_or_path)
    if not path.is_file():
        path = settings.REPO_ROOT / "finetune" / "recipes" / f"{name_or_path}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in (settings.REPO_ROOT / "finetune" / "recipes").glob("*.yaml"))
        raise ConfigError(f"no fine-tuning recipe {name_or_path!r}: give a YAML path or one of: {', '.join(known)}")
    return from_dict(FinetuneRecipe, {**load_yaml(path), **(overrides or {})}, str(path))
