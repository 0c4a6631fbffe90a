"""Issue 43: every command the READMEs show works on this clone, in its cheapest meaningful form.

Commands are taken from README.md and the sub-READMEs: fenced shell blocks (continuation lines joined) and inline
code that starts with ``medr2``, ``make``, ``python`` or ``lm_eval``. Each is checked as a user would meet it:

- run as written where it is quick (``medr2 data info``, ``medr2 tasks``, ``medr2 sweep <config> --dry-run`` for
  every config in experiments/ where the README writes ``<config>``, ``taskgen --check``);
- otherwise parsed: its sub-command and every flag exist (``medr2``, ``python -m medr2_hooks.finetune``), a bench
  script answers ``--help``, a make target exists (``make -n``), a named config, recipe, index or task exists;
- GPU-only commands (``--model vllm``, multi-GPU accelerate configs) only parsed: lm_eval's tasks exist in tasks/.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from medr2_hooks import settings

ROOT = settings.REPO_ROOT
READMES = ["README.md", "bench/README.md", "experiments/README.md", "finetune/README.md", "index/README.md",
           "medr2_hooks/pipeline/README.md", "medr2_hooks/prepass/README.md", "tasks/README.md"]
STARTS = ("medr2", "make", "python", "lm_eval", "accelerate")
CONFIGS = sorted(p.stem for p in (ROOT / "experiments").glob("*.yaml")
                 if p.stem not in ("models", "roles", "settings"))


def commands() -> list[tuple[str, str]]:
    """``(readme, command)`` for every shell command the READMEs show."""
    out = []
    for name in READMES:
        text = (ROOT / name).read_text(encoding="utf-8")
        for block in re.findall(r"```(?:bash|sh|console)?\n(.*?)```", text, re.S):
            for line in re.sub(r"\\\n\s*", " ", block).splitlines():
                line = re.sub(r"^\s*(?:\.venv/bin/)?", "", line.split("  #")[0]).strip()
                line = re.sub(r"^(?:[A-Z_]+=\S+\s+)+", "", line)  # VAR=value before the command
                out.extend((name, part.strip()) for part in line.split("&&") if part.split()[:1] and
                           part.split()[0] in STARTS)
        for span in re.findall(r"`((?:\.venv/bin/)?(?:medr2|make|python|lm_eval) [^`]+)`", text.replace("\n", " ")):
            out.append((name, re.sub(r"^\.venv/bin/", "", span).strip()))
    return sorted(set(out))


def _words(command: str) -> list[str]:
    try:
        return shlex.split(command)
    except ValueError:
        return command.split()


def _placeholders(words: list[str]) -> bool:
    return any(re.search(r"<[^>]+>|\.\.\.|^\$|^[A-Z_]{3,}$|\[|\]|^N$|^i/n$|^ADDRESS$", w) for w in words)


def _parse_medr2(words: list[str]) -> None:
    """The sub-command exists and every flag it is given is one of its options."""
    from medr2_hooks.cli.main import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert words[1] in sub.choices or words[1] in ("--help", "-h"), f"no sub-command {words[1]!r}"
    if words[1] in ("--help", "-h"):
        return
    command = sub.choices[words[1]]
    nested = [a for a in command._actions if getattr(a, "choices", None) and a.option_strings == []
              and isinstance(a.choices, dict)]
    if nested and len(words) > 2 and words[2] in nested[0].choices:  # medr2 index build|info|search
        command = nested[0].choices[words[2]]
    known = {o for a in command._actions for o in a.option_strings}
    flags = [w.split("=")[0] for w in words[2:] if w.startswith("--")]
    assert not [f for f in flags if f not in known], f"unknown flags {flags} of medr2 {words[1]}"


def _env(tmp_path: Path) -> dict:
    return {**os.environ, "WANDB_MODE": "offline", "MEDR2_RESULTS_DIR": str(tmp_path / "results")}


def _run(argv: list[str], tmp_path: Path, timeout: int = 900) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, cwd=ROOT, env=_env(tmp_path), capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(argv)}: exit {done.returncode}\n{done.stderr[-1500:]}"
    return done


MEDR2 = [sys.executable, "-m", "medr2_hooks.cli.main"]
QUICK = {("data", "info"), ("tasks",), ("--help",), ("models",)}


def check(command: str, tmp_path: Path, dry_runs: set) -> str:
    """Check one command; what was done ("ran", "parsed", "gpu-only: parsed")."""
    words = _words(command)
    tool = words[0]
    if tool == "medr2":
        _parse_medr2(words)
        if words[1] == "sweep" and "--dry-run" in words and len(words) > 2:
            named = words[2] if not words[2].startswith("--") else "<config>"  # "medr2 sweep --dry-run": any config
            names = CONFIGS if _placeholders([named]) else [Path(named).stem]
            for name in names:
                assert name in CONFIGS, f"no experiment config {name}"
                dry_runs.add(name)
            return "dry-run (all configs below)"
        if tuple(words[1:3]) in QUICK or tuple(words[1:2]) in QUICK:
            _run(MEDR2 + words[1:], tmp_path)
            return "ran"
        if words[1] == "index" and len(words) > 3 and words[2] in ("build", "info", "search") and \
                not words[3].startswith("-"):
            from medr2_hooks.corpus.recipe import find_recipe

            find_recipe(words[3])  # the recipe the README names exists
        if words[1] == "eval" and "--tasks" in words:
            from medr2_hooks.lmeval.registry import task_manager

            tasks = words[words.index("--tasks") + 1].split(",")
            known = task_manager().all_tasks
            assert all(t in known or _placeholders([t]) for t in tasks), f"unknown task in {tasks}"
        return "parsed"
    if tool == "python":
        if words[1:3] == ["-m", "medr2_hooks.lmeval.taskgen"]:
            _run([sys.executable, "-m", "medr2_hooks.lmeval.taskgen", "--check"], tmp_path)
            return "ran (--check)"
        script = ROOT / words[1]
        assert script.is_file(), f"no script {words[1]}"
        _run([sys.executable, str(script), "--help"], tmp_path, timeout=300)
        return "parsed (--help)"
    if tool == "make":
        target = words[1] if len(words) > 1 else "all"
        done = subprocess.run(["make", "-n", target], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, f"make -n {target}: {done.stderr}"
        return "parsed (make -n)"
    if tool == "lm_eval":
        from medr2_hooks.lmeval.registry import task_manager

        tasks = words[words.index("--tasks") + 1].split(",")
        assert all(t in task_manager().all_tasks for t in tasks), f"unknown task in {tasks}"
        assert (ROOT / words[words.index("--include_path") + 1]).is_dir()
        return "gpu-only: parsed" if "vllm" in words else "parsed"
    if tool == "accelerate":
        from medr2_hooks.finetune.recipe import load_recipe

        config = ROOT / words[words.index("--config_file") + 1]
        assert config.is_file(), f"no accelerate config {config}"
        load_recipe(words[words.index("medr2_hooks.finetune") + 1])
        return "parsed" if "cpu" in config.name else "gpu-only: parsed"
    raise AssertionError(f"no check for {command!r}")


@pytest.mark.slow
def test_every_command_the_readmes_show_works(tmp_path, monkeypatch, capsys):
    found = commands()
    assert len(found) > 60 and any("sweep" in c and "--dry-run" in c for _, c in found)
    dry_runs: set = set()
    done = {}
    for readme, command in found:
        try:
            done[command] = check(command, tmp_path, dry_runs)
        except AssertionError as exc:
            raise AssertionError(f"{readme}: `{command}`: {exc}") from None
    # `medr2 sweep <config> --dry-run --json`: every config plans, on the shipped data, with an estimate or a reason.
    # The first runs as a user runs it, in its own process; the others through the same entry point in this one (one
    # import, tokenizers and items loaded once: two minutes less on two cores)
    from medr2_hooks.cli.main import main

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("MEDR2_RESULTS_DIR", str(tmp_path / "results"))
    monkeypatch.chdir(ROOT)
    for i, name in enumerate(sorted(dry_runs)):
        if i == 0:
            text = _run(MEDR2 + ["sweep", name, "--dry-run", "--json"], tmp_path, timeout=1500).stdout
        else:
            capsys.readouterr()
            assert main(["sweep", name, "--dry-run", "--json"]) == 0, name
            text = capsys.readouterr().out
        out = json.loads(text)
        assert all(r["cost"] is not None or r.get("cost_unavailable") for r in out["runs"]), name
        assert "sizes" in out["total"]
    assert {"table2", "table8", "table9", "mirage"} <= dry_runs
    print("\n".join(f"{how}: {command}" for command, how in sorted(done.items())))
