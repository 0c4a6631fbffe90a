"""The SFT loop under accelerate: exact global batches, answer-token loss, resumable checkpoints.

Data order is a seeded permutation per epoch, so step ``s`` always trains on the same items: a run killed at
any point and restarted loads the newest complete checkpoint (model, optimizer, scheduler and RNG states
through ``accelerator.save_state``; ``latest.json`` names it and is written last) and continues at the next
step, reproducing the uninterrupted loss curve. Each optimizer step sums the answer-token cross-entropy of
its ``global_batch`` items and divides by their answer-token count; processes share the micro-batches.
A finished checkpoint (``final/``) is never overwritten.

Precision: the weights the optimizer updates are float32 (master weights) whatever the recipe's ``dtype``; a
``bfloat16`` (or ``float16``) recipe computes its forward and backward passes in that type through accelerate's
mixed precision (autocast). Updating bf16 weights directly loses most lr-2e-5 steps: bf16 keeps 8 bits of mantissa,
so a weight of 0.02 moves only by steps above ~8e-5. The cost is 16 bytes a parameter before activations (fp32
weights 4, gradients 4, AdamW's two moments 8): 16 GB per billion parameters, divided among the processes by FSDP
or ZeRO-3. The final checkpoint is gathered from every process (``accelerator.get_state_dict``, called on every
rank, so FSDP and ZeRO-3 shards are assembled) and saved by the main process in the recipe's ``dtype``.
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import shutil
import time
from contextlib import nullcontext
from pathlib import Path

from ..config import ConfigError, short_repr
from ..fs import atomic_write_text, read_json, write_json
from .examples import Row, check_no_overlap, training_rows
from .recipe import FinetuneRecipe

MANIFEST = "medr2_training.json"
OWNER = "medr2_finetune.json"  # marks an output folder this command made (and may resume in)
_CHECKPOINT = re.compile(r"checkpoint-[0-9]{6}")
MIXED = {"bfloat16": "bf16", "float16": "fp16"}  # recipe dtype -> accelerate mixed precision (fp32 master weights)


def step_items(n: int, recipe: FinetuneRecipe, step: int, steps_per_epoch: int) -> list[int]:
    """Row indices of optimizer step ``step`` (0-based): a slice of its epoch's seeded permutation."""
    epoch, within = divmod(step, steps_per_epoch)
    order = random.Random(recipe.seed + epoch).sample(range(n), n)
    return order[within * recipe.global_batch:(within + 1) * recipe.global_batch]


def answer_loss_sum(model, rows: list[Row], pad_id: int, device):
    """Summed cross-entropy of the answer tokens (left-padded batch; logits kept for answer positions only)."""
    import torch

    from ..llm.hf import pad

    ids, mask, pos = pad([r.prompt + r.answer for r in rows], pad_id, left=True)
    longest = max(len(r.answer) for r in rows)
    out = model(input_ids=ids.to(device), attention_mask=mask.to(device), position_ids=pos.to(device),
                logits_to_keep=longest + 1)
    logits = out.logits[:, :-1].float()  # predictions of the last `longest` tokens
    targets = ids[:, -longest:].clone()
    for j, r in enumerate(rows):
        targets[j, : longest - len(r.answer)] = -100  # prompt tokens carry no loss
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1).to(device),
                                             ignore_index=-100, reduction="sum")


def _latest(out: Path) -> Path | None:
    """The checkpoint ``latest.json`` names: one of this folder's own ``checkpoint-NNNNNN`` (a hand-edited name that
    would lead elsewhere, ``../../etc``, or a damaged file is an error naming it), or None."""
    marker = out / "latest.json"
    if not marker.is_file():
        return None
    named = read_json(marker)
    name = named.get("checkpoint") if isinstance(named, dict) else None
    if not isinstance(name, str) or not _CHECKPOINT.fullmatch(name):
        raise ConfigError(f"{marker}: expected {{\"checkpoint\": \"checkpoint-NNNNNN\"}} naming a checkpoint in this "
                          f"folder, found {short_repr(named, 120)}; delete it to train from the start")
    path = out / name
    return path if (path / "trainer_state.json").is_file() else None


def claim_output(recipe: FinetuneRecipe) -> Path:
    """The recipe's output folder, made or resumed by this command only: a folder that holds anything but was not
    made by ``medr2 finetune`` (no ``medr2_finetune.json``), or was made for another recipe, is refused before
    anything loads, so nothing of the user's is deleted or overwritten; a finished checkpoint is never overwritten."""
    out = recipe.out_dir()
    if (out / "final" / MANIFEST).is_file():
        raise ConfigError(f"{out / 'final'} holds a finished checkpoint; it is never overwritten: "
                          "choose another output_dir or recipe name")
    if out.exists() and not out.is_dir():
        raise ConfigError(f"output_dir {out} is a file, not a folder")
    if int(os.environ.get("RANK", "0")) != 0:
        return out  # the launcher's main process claims the folder (another rank would see it half made)
    owner = out / OWNER
    if owner.is_file():
        made = read_json(owner)
        if not isinstance(made, dict) or made.get("recipe") != recipe.name:
            raise ConfigError(f"{out} was made by medr2 finetune for recipe "
                              f"{short_repr(made.get('recipe') if isinstance(made, dict) else made, 80)}, not "
                              f"{recipe.name}: choose another output_dir")
    elif out.is_dir() and any(out.iterdir()):
        raise ConfigError(f"output_dir {out} is not empty and was not made by medr2 finetune (no {OWNER}): nothing in "
                          "it is deleted or overwritten; choose an empty or new folder")
    out.mkdir(parents=True, exist_ok=True)
    write_json(owner, {"recipe": recipe.name}, indent=None, ascii=True)
    _latest(out)  # a damaged latest.json is refused now, before any model loads
    return out


def train(recipe: FinetuneRecipe, log=print, wandb_run=None) -> dict:
    """Train (or resume) ``recipe``; returns the manifest written into ``<out>/final``."""
    import torch
    from accelerate import Accelerator
    from transformers import AutoTokenizer, get_cosine_schedule_with_warmup

    from ..llm.embedded import resolve
    from ..llm.local import load_causal_lm, weights_revision

    out = claim_output(recipe)
    final = out / "final"
    acc = Accelerator(mixed_precision=MIXED.get(recipe.dtype, "no"))
    path = resolve(recipe.model)
    tokenizer = AutoTokenizer.from_pretrained(path)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    rows, skipped = training_rows(recipe, tokenizer)
    if not rows:
        raise ConfigError(f"recipe {recipe.name}: no training row is left (skipped: "
                          f"{ {k: len(v) for k, v in skipped.items()} }): nothing to train")
    check_no_overlap([r.item for r in rows], recipe)
    steps_per_epoch = math.ceil(len(rows) / recipe.global_batch)
    total = recipe.epochs * steps_per_epoch
    total = min(total, recipe.max_steps) if recipe.max_steps else total

    torch.manual_seed(recipe.seed)
    model = load_causal_lm(path, torch.float32)  # master weights (see the module doc)
    model.config.use_cache = False
    optimizer = torch.optim.AdamW(model.parameters(), lr=recipe.learning_rate, weight_decay=recipe.weight_decay)
    scheduler = get_cosine_schedule_with_warmup(optimizer, math.ceil(recipe.warmup_ratio * total), total)
    model, optimizer = acc.prepare(model, optimizer)
    acc.register_for_checkpointing(scheduler)

    losses_path = out / "loss.jsonl"
    state, resumed = _resume(acc, out, losses_path, f"{recipe.name} at step {{}}/{total}", log)
    own = [resumed] if resumed else []  # the checkpoints this run wrote or resumed from: the only ones it deletes

    from accelerate.utils import DistributedType
    from tqdm.auto import tqdm

    per_process = math.ceil(recipe.global_batch / recipe.micro_batch / acc.num_processes)
    if acc.distributed_type == DistributedType.DEEPSPEED and per_process > 1:
        raise ConfigError(f"DeepSpeed steps inside backward: set micro_batch to global_batch / processes "
                          f"({recipe.global_batch // acc.num_processes}) so each process runs one micro-batch a step")
    model.train()
    bar = tqdm(total=total, initial=state["step"], desc=f"finetune {recipe.name}", unit="step",
               disable=not acc.is_main_process)
    while state["step"] < total:
        started = time.perf_counter()
        items = [rows[i] for i in step_items(len(rows), recipe, state["step"], steps_per_epoch)]
        tokens = sum(len(r.answer) for r in items)
        lr = scheduler.get_last_lr()[0]
        step_loss = _step(acc, model, items, recipe, pad_id, tokens)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        state["step"] += 1
        state["tokens"] += sum(len(r.prompt) + len(r.answer) for r in items)
        state["train_seconds"] += time.perf_counter() - started
        row = {"step": state["step"], "epoch": (state["step"] - 1) // steps_per_epoch + 1, "loss": step_loss, "lr": lr,
               "answer_tokens": tokens}
        if acc.is_main_process:
            with open(losses_path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(row) + "\n")
            if wandb_run is not None:
                wandb_run.log({"train/loss": step_loss, "train/lr": lr}, step=state["step"])
        bar.update(1)
        bar.set_postfix(loss=f"{step_loss:.4f}")
        if state["step"] % recipe.checkpoint_every == 0 or state["step"] == total:
            own = [_checkpoint(acc, out, state, own)]
    bar.close()
    acc.wait_for_everyone()
    manifest = {
        "recipe": recipe.to_json(), "base_model": f"{recipe.model}@{weights_revision(path)}",
        "trained_items": [r.item for r in rows], "skipped": skipped, "examples": len(rows),
        "steps": total, "steps_per_epoch": steps_per_epoch, "tokens": state["tokens"],
        "train_seconds": round(state["train_seconds"], 2), "processes": acc.num_processes,
        "device": str(acc.device), "device_seconds": round(state["train_seconds"] * acc.num_processes, 2),
        "losses": [json.loads(line) for line in losses_path.read_text().splitlines()] if acc.is_main_process else [],
    }
    _save_final(acc, model, tokenizer, manifest, out, recipe.dtype)
    if acc.is_main_process:
        log(f"finetune {recipe.name}: {total} steps, {len(rows)} examples, {manifest['train_seconds']} s, "
            f"loss {manifest['losses'][0]['loss']:.4f} -> {manifest['losses'][-1]['loss']:.4f}; checkpoint {final}")
    return manifest


def _resume(acc, out: Path, losses_path: Path, where: str, log) -> tuple[dict, str | None]:
    """The training state of the latest checkpoint under ``out`` (its optimizer, scheduler and RNG loaded into
    ``acc``) and its name, or a fresh one; the loss log is cut back to the checkpoint's step (later steps are
    recomputed)."""
    out.mkdir(parents=True, exist_ok=True)
    state = {"step": 0, "tokens": 0, "train_seconds": 0.0}
    resume_from = _latest(out)
    if resume_from is not None:
        acc.load_state(str(resume_from))
        state = read_json(resume_from / "trainer_state.json")
        log(f"resuming {where.format(state['step'])} from {resume_from.name}")
    if acc.is_main_process:
        kept = [line for line in (losses_path.read_text().splitlines() if losses_path.exists() else [])
                if json.loads(line)["step"] <= state["step"]]
        atomic_write_text(losses_path, "".join(f"{line}\n" for line in kept))
    return state, resume_from.name if resume_from is not None else None


def _step(acc, model, items: list, recipe: FinetuneRecipe, pad_id: int, tokens: int) -> float:
    """One optimizer step's gradients over ``items`` (this process's micro-batches, accumulated without syncing
    until the last; clipped), and the step's mean answer-token loss over every process."""
    import torch

    micro = [items[i:i + recipe.micro_batch] for i in range(0, len(items), recipe.micro_batch)]
    mine = micro[acc.process_index::acc.num_processes]
    step_loss = torch.zeros((), device=acc.device)
    for j, batch in enumerate(mine):
        with acc.no_sync(model) if j < len(mine) - 1 else nullcontext():
            loss_sum = answer_loss_sum(model, batch, pad_id, acc.device)
            acc.backward(loss_sum * acc.num_processes / tokens)  # DDP averages over processes
        step_loss += loss_sum.detach()
    if recipe.max_grad_norm:
        acc.clip_grad_norm_(model.parameters(), recipe.max_grad_norm)
    return acc.reduce(step_loss, reduction="sum").item() / tokens


def _save_final(acc, model, tokenizer, manifest: dict, out: Path, dtype: str) -> None:
    """``<out>/final``: the weights in ``dtype``, the tokenizer and the manifest, staged and renamed into place.
    Every rank takes part: under FSDP / ZeRO-3 the full state dict is gathered from the shards."""
    import torch

    weights = acc.get_state_dict(model)
    if acc.is_main_process:
        tmp = out / "final.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        keep = getattr(torch, dtype)
        acc.unwrap_model(model).save_pretrained(tmp, state_dict={k: v.to(keep) if v.is_floating_point() else v
                                                                 for k, v in weights.items()})
        tokenizer.save_pretrained(tmp)
        write_json(tmp / MANIFEST, manifest, ascii=True)
        os.replace(tmp, out / "final")


def _checkpoint(acc, out: Path, state: dict, own: list[str]) -> str:
    """Save ``checkpoint-<step>``, then point ``latest.json`` at it, then drop the older checkpoints in ``own``
    (this run's); returns the new one's name."""
    name = f"checkpoint-{state['step']:06d}"
    acc.save_state(str(out / name))
    if acc.is_main_process:
        write_json(out / name / "trainer_state.json", state, indent=None, ascii=True)
        write_json(out / "latest.json", {"checkpoint": name}, indent=None, ascii=True)
        for old in own:
            if old != name:
                shutil.rmtree(out / old, ignore_errors=True)
    acc.wait_for_everyone()
    return name
