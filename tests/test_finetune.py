"""Fine-tuning baseline: train/eval overlap refused, bad items, the exact global-batch schedule, and a
kill -9 in the middle of training whose resumed run reproduces the uninterrupted loss curve (tiny Gemma-3
built locally from a config with random weights: plumbing, not numbers)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml

from medr2_hooks.config import ConfigError
from medr2_hooks.errors import DataError
from medr2_hooks.finetune import examples
from medr2_hooks.finetune.recipe import FinetuneRecipe, ItemSlice, load_recipe


def _recipe(**kw) -> FinetuneRecipe:
    base = {"name": "t", "model": "embedded:gemma-270m",
            "train": [ItemSlice("medqa_usmle", split="dev", count=4)],
            "evaluate": [ItemSlice("medqa_usmle", split="test", count=10)]}
    return FinetuneRecipe(**{**base, **kw})


def test_training_items_that_are_also_evaluated_are_refused():
    recipe = _recipe(evaluate=[ItemSlice("medqa_usmle", split="dev", offset=2, count=10)])
    train = examples.item_ids(recipe.train[0])
    with pytest.raises(ConfigError, match="2 training items are also evaluated"):
        examples.check_no_overlap(train, recipe)
    examples.check_no_overlap(train, _recipe())  # dev slice vs test slice: disjoint


def test_direct_task_refuses_to_score_items_the_checkpoint_was_trained_on():
    from medr2_hooks.lmeval.direct import load_dataset

    trained = examples.item_ids(ItemSlice("medqa_usmle", split="dev", count=4))
    with pytest.raises(DataError, match="fine-tuned on 4 of the evaluated items"):
        load_dataset("medqa_usmle", trained_items=trained, limit=20)
    ds = load_dataset("medqa_usmle", trained_items=trained, split="test", limit=20)
    assert set(ds["test"]["id"][:20]).isdisjoint({t.split(":")[1] for t in trained})


def test_recipe_typos_and_bad_batches_are_errors(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump({"name": "x", "model": "m", "train": [{"benchmark": "medmcqa"}], "lerning_rate": 1}))
    with pytest.raises(ConfigError, match="unknown key 'lerning_rate'"):
        load_recipe(str(path))
    with pytest.raises(ValueError, match="multiple of micro_batch"):
        _recipe(global_batch=10, micro_batch=4)
    assert load_recipe("cpu_usmle_dev_slice").max_steps == 16


def test_items_without_a_valid_answer_are_errors_and_long_rows_are_counted(monkeypatch, gemma_path):
    from transformers import AutoTokenizer

    from medr2_hooks.data.record import Record

    tok = AutoTokenizer.from_pretrained(gemma_path)
    good = Record("q1", "Which vitamin deficiency causes scurvy?", {"A": "C", "B": "D"}, "A", "en", {"source": "f:1"})
    long = Record("q2", "word " * 600, {"A": "x", "B": "y"}, "B", "en", {"source": "f:2"})
    monkeypatch.setattr(examples, "load_items", lambda spec: [good, long])
    rows, skipped = examples.training_rows(_recipe(max_length=128), tok)
    assert [r.item for r in rows] == ["medqa_usmle:q1"] and skipped["too_long"] == ["medqa_usmle:q2"]
    assert tok.decode(rows[0].answer) == " A" and tok.decode(rows[0].prompt).endswith("Answer:")
    bad = Record("q3", "Q?", {"A": "x", "B": "y"}, "E", "en", {"source": "f:3"})
    monkeypatch.setattr(examples, "load_items", lambda spec: [bad])
    with pytest.raises(DataError, match="f:3: field 'answer': 'E' is not one of the options"):
        examples.training_rows(_recipe(), tok)


def test_each_step_trains_on_a_seeded_slice_of_its_epoch():
    from medr2_hooks.finetune.train import step_items

    recipe = _recipe(global_batch=4, micro_batch=2)
    epoch1 = [step_items(10, recipe, s, 3) for s in range(3)]
    assert sorted(i for step in epoch1 for i in step) == list(range(10)) and [len(s) for s in epoch1] == [4, 4, 2]
    assert step_items(10, recipe, 3, 3) != epoch1[0]  # a new permutation each epoch
    assert step_items(10, recipe, 4, 3) == step_items(10, recipe, 4, 3)


@pytest.fixture(scope="module")
def tiny_gemma(tmp_path_factory, gemma_path):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    config = AutoConfig.from_pretrained(gemma_path)
    for k, v in {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
                 "num_key_value_heads": 1, "head_dim": 16, "layer_types": ["full_attention"] * 2}.items():
        setattr(config, k, v)
    folder = tmp_path_factory.mktemp("tiny_gemma")
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    AutoTokenizer.from_pretrained(gemma_path).save_pretrained(folder)
    return str(folder)


def _write_recipe(tmp_path, model: str, out: str) -> str:
    recipe = {"name": "tiny", "model": model, "output_dir": out, "dtype": "float32", "global_batch": 4,
              "micro_batch": 2,
              "epochs": 2, "learning_rate": 1e-3, "checkpoint_every": 1, "max_length": 1024,
              "train": [{"benchmark": "medqa_usmle", "split": "dev", "count": 12}],
              "evaluate": [{"benchmark": "medqa_usmle", "split": "test", "count": 10}]}
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return str(path)


@pytest.mark.slow
def test_kill_during_training_and_resume_reproduces_the_uninterrupted_loss_curve(tmp_path, tiny_gemma):
    from medr2_hooks.finetune.train import MANIFEST, train

    whole = train(load_recipe(_write_recipe(tmp_path, tiny_gemma, str(tmp_path / "whole"))), log=lambda *_: None)
    assert whole["steps"] == 6
    assert whole["trained_items"] == examples.item_ids(ItemSlice("medqa_usmle", split="dev", count=12))
    assert whole["losses"][-1]["loss"] < whole["losses"][0]["loss"]

    out = tmp_path / "killed"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "WANDB_MODE": "disabled"}
    recipe = _write_recipe(tmp_path, tiny_gemma, str(out))
    proc = subprocess.Popen([sys.executable, "-m", "medr2_hooks.finetune", recipe,
                             "--no_wandb"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        done = (out / "loss.jsonl").read_text().count("\n") if (out / "loss.jsonl").exists() else 0
        if done >= 3:
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.05)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run should have been killed mid-training"
    assert not (out / "final").exists()

    # what a user keeps beside the run's checkpoints is not the run's to delete (issue 52.1)
    (out / "checkpoint-000500-mine").mkdir()
    (out / "notes.txt").write_text("mine")
    resumed = train(load_recipe(_write_recipe(tmp_path, tiny_gemma, str(out))), log=lambda *_: None)
    assert (out / "checkpoint-000500-mine").is_dir() and (out / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in out.glob("checkpoint-0000*")) == ["checkpoint-000006"]
    assert [r["step"] for r in resumed["losses"]] == list(range(1, 7))
    for a, b in zip(resumed["losses"], whole["losses"]):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5) and a["lr"] == pytest.approx(b["lr"])
    assert json.loads((out / "final" / MANIFEST).read_text())["steps"] == 6
    with pytest.raises(ConfigError, match="never overwritten"):
        train(load_recipe(_write_recipe(tmp_path, tiny_gemma, str(out))))


def test_the_within_dataset_recipes_name_the_training_file_they_need():
    """The MedQA train splits are not in the shared mirror: the recipe says which file, where."""
    for name, path in (("paper_medqa_usmle_within", "medqa_usmle/US/train.jsonl"),
                       ("paper_medqa_mcmle_within", "medqa_mcmle/Mainland/train.jsonl")):
        with pytest.raises(DataError, match=f"needs its file .*{path} \\(5 options, as evaluated\\), which the shared "
                                            "mirror lacks"):
            examples.load_items(load_recipe(name).train[0])


def _weights(folder):
    from safetensors.torch import load_file

    return load_file(str(next(folder.glob("*.safetensors"))))


@pytest.mark.slow
def test_two_processes_train_as_one_and_save_the_trained_weights(tmp_path, tiny_gemma):
    """Issue 30.1: DDP over 2 CPU processes (torchrun; accelerate launch starts one process on a CPU and runs FSDP on
    GPUs only). The final checkpoint, gathered through accelerator.get_state_dict on every rank, reloads and equals
    the weights the run ended with (its last accelerate checkpoint), and the run follows the one-process run."""
    import torch
    from transformers import AutoModelForCausalLM

    from medr2_hooks.finetune.train import train

    one = train(load_recipe(_write_recipe(tmp_path, tiny_gemma, str(tmp_path / "one"))), log=lambda *_: None)
    out = tmp_path / "two"
    env = {**os.environ, "ACCELERATE_USE_CPU": "true", "OMP_NUM_THREADS": "1", "WANDB_MODE": "disabled"}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                           "29517", "-m", "medr2_hooks.finetune", _write_recipe(tmp_path, tiny_gemma, str(out)),
                           "--no_wandb"], env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    manifest = json.loads((out / "final" / "medr2_training.json").read_text())
    assert manifest["processes"] == 2 and manifest["steps"] == one["steps"] == 6
    for a, b in zip(manifest["losses"], one["losses"]):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-4)  # the same global batches, summed across processes
    last = _weights(sorted(out.glob("checkpoint-*"))[-1])  # accelerate's own save of the trained model
    final = _weights(out / "final")
    assert set(final) <= set(last) and all(torch.equal(final[k], last[k]) for k in final)
    reloaded = AutoModelForCausalLM.from_pretrained(out / "final").state_dict()
    assert all(torch.equal(reloaded[k], last[k]) for k in final)
    single = _weights(tmp_path / "one" / "final")
    assert max((final[k] - single[k]).abs().max().item() for k in final) < 1e-4


@pytest.mark.slow
def test_bf16_recipes_update_fp32_master_weights(tmp_path, tiny_gemma):
    """Issue 30.1: a bfloat16 recipe computes in bf16 over fp32 master weights. With lr 2e-5 its steps move the
    weights, and its losses track a float32 run's; updating bf16 weights directly (what 85cbdde did) leaves most of
    them unchanged, since the step is below half of bf16's spacing."""
    import torch
    from transformers import AutoModelForCausalLM

    def recipe(name: str, dtype: str) -> str:
        path = _write_recipe(tmp_path, tiny_gemma, str(tmp_path / name))
        raw = yaml.safe_load(open(path))
        raw.update(dtype=dtype, learning_rate=2e-5, epochs=1, warmup_ratio=0.0)
        with open(path, "w") as fh:
            yaml.safe_dump(raw, fh)
        return path

    def run(name: str, dtype: str) -> dict:  # its own process: accelerate fixes one precision per process
        env = {**os.environ, "WANDB_MODE": "disabled"}
        done = subprocess.run([sys.executable, "-m", "medr2_hooks.finetune", recipe(name, dtype), "--no_wandb"],
                              env=env, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads((tmp_path / name / "final" / "medr2_training.json").read_text())

    mixed, full = run("mixed", "bfloat16"), run("full", "float32")
    for a, b in zip(mixed["losses"], full["losses"]):
        assert a["loss"] == pytest.approx(b["loss"], rel=0.02)  # bf16 autocast against float32: within 2%
    start = AutoModelForCausalLM.from_pretrained(tiny_gemma, dtype=torch.float32).state_dict()
    master = _weights(sorted((tmp_path / "mixed").glob("checkpoint-*"))[-1])
    big = [k for k, v in start.items() if v.is_floating_point() and v.abs().mean() > 0.01 and k in master]
    moved = sum((master[k] != start[k]).float().mean().item() for k in big) / len(big)
    assert moved > 0.95 and (tmp_path / "mixed" / "final" / "config.json").is_file()
    # saved in the recipe's dtype
    assert next(iter(_weights(tmp_path / "mixed" / "final").values())).dtype == torch.bfloat16

    # the old way: AdamW straight on bf16 weights, one step of the same size
    model = AutoModelForCausalLM.from_pretrained(tiny_gemma, dtype=torch.bfloat16)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5, weight_decay=0.0)
    ids = torch.randint(0, 1000, (2, 16))
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    after = model.state_dict()
    still = sum((after[k] == before[k]).float().mean().item() for k in big) / len(big)
    assert still > 0.6  # most bf16 weights did not move at all (70% here; the small ones move), against < 5% above


def test_a_generative_recipe_trains_the_prompt_and_statement_the_reader_takes(gemma_path):
    """Issue 40.3: the rows of a generative recipe are what the evaluation sends and what its strict reader takes."""
    from transformers import AutoTokenizer

    from medr2_hooks.lmeval.answers import read_statement

    tok = AutoTokenizer.from_pretrained(gemma_path)
    record = examples.load_items(ItemSlice("medqa_usmle", split="dev", count=1))[0]
    prompt, answer = examples.encode(_recipe(answer_format="generative"), tok, "medqa_usmle", record)
    assert tok.decode(prompt).rstrip().endswith('finish with "the answer is (X)".')
    assert answer[-1] == tok.eos_token_id
    assert read_statement(tok.decode(answer[:-1]), list(record.options)) == record.answer
    prompt, answer = examples.encode(_recipe(), tok, "medqa_usmle", record)  # letters: " B" after "Answer:"
    assert tok.decode(prompt).endswith("Answer:") and tok.decode(answer) == f" {record.answer}"
    with pytest.raises(ValueError, match="chat: true trains on the chat-templated generative prompt"):
        _recipe(chat=True)


@pytest.mark.slow
def test_fine_tuning_on_the_evaluated_format_makes_the_answers_readable(tmp_path, monkeypatch):
    """Issue 40.3, the CPU proof: SmolLM2-135M-Instruct, evaluated on medqa_usmle_direct_gen through its chat
    template (as the paper setting evaluates a chat target), mostly writes answers the strict reader cannot take;
    fine-tuned briefly on a disjoint slice in the same format (the chat-templated generative prompt, then
    "Therefore, the answer is (X)." and the end token), its invalid rate falls."""
    from medr2_hooks.finetune.train import train
    from medr2_hooks.lmeval.runner import EvalConfig, run_eval

    monkeypatch.setenv("MEDR2_RESULTS_DIR", str(tmp_path / "results"))
    recipe = {"name": "smol_gen", "model": "embedded:smollm2-135m-instruct", "output_dir": str(tmp_path / "ft"),
              "dtype": "float32", "global_batch": 8, "micro_batch": 4, "epochs": 3, "max_steps": 8,
              "learning_rate": 1e-4, "checkpoint_every": 12, "max_length": 768, "answer_format": "generative",
              "chat": True, "train": [{"benchmark": "medqa_usmle", "split": "dev", "count": 32}],
              "evaluate": [{"benchmark": "medqa_usmle", "split": "test", "count": 8}]}
    path = tmp_path / "smol_gen.yaml"
    path.write_text(yaml.safe_dump(recipe))

    def invalid(pretrained: str) -> float:
        out = run_eval(EvalConfig(tasks=["medqa_usmle_direct_gen"], model="hf",
                                  model_args=f"pretrained={pretrained},dtype=float32", limit=8,
                                  metadata={"split": "test"}, gen_kwargs="max_gen_toks=40",
                                  apply_chat_template=True, wandb=False))
        return out["results"]["medqa_usmle_direct_gen"]["invalid,none"]

    from medr2_hooks.llm.embedded import resolve

    before = invalid(resolve("embedded:smollm2-135m-instruct"))
    manifest = train(load_recipe(str(path)), log=lambda *_: None)
    after = invalid(str(tmp_path / "ft" / "final"))
    print(f"invalid before {before:.3f}, after {after:.3f} ({manifest['steps']} steps)")
    assert after < before and after <= 0.5
