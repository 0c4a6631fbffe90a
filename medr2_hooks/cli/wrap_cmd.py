"""``medr2 wrap TASK --method M``: Med-R² (or a baseline) around one of lm-eval's built-in multiple-choice tasks."""

from __future__ import annotations

import argparse
import json

from .output import emit_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ..methods import task_methods

    parser.description = (
        "Write task wrap_<TASK>_<METHOD>: the built-in task's prompt, choices and scoring, with the method's "
        "demonstrations and evidence before each prompt. Question, options and answer are read from the built-in's "
        "rows through a field mapping (known for medqa_4options, medmcqa and mmlu_*; else --fields). The rows come "
        "from the built-in's hub dataset, or from local files in the same layout (--data-files).")
    parser.add_argument("task", help="an lm-eval built-in multiple-choice task, e.g. medmcqa, mmlu_anatomy")
    parser.add_argument("--method", required=True, choices=task_methods(), help="what to add before the prompt")
    parser.add_argument("--fields", help='JSON field mapping, e.g. \'{"question": "q", "options": ["a", "b"], '
                        '"answer": "label"}\' (with --answer-format)')
    parser.add_argument("--answer-format", choices=["letter", "index0", "index1", "text"],
                        help="how the answer field names the option (with --fields)")
    parser.add_argument("--data-files", help="local rows in the hub layout: split=path[,split=path] (.jsonl, .json "
                        "or .csv), e.g. test=mmlu/anatomy_test.jsonl,dev=mmlu/anatomy_dev.jsonl")
    parser.add_argument("--n-demos", type=int, default=5, help="demonstrations drawn (seeded) from the few-shot split")
    parser.add_argument("--language", default="en")
    parser.add_argument("--json", action="store_true", help="print the outcome as JSON")


def _data_files(text: str | None) -> dict[str, str]:
    from ..config import ConfigError

    out = {}
    for part in filter(None, (text or "").split(",")):
        split, sep, path = part.partition("=")
        if not sep or not split or not path:
            raise ConfigError(f"--data-files: expected split=path, found {part!r}")
        out[split.strip()] = path.strip()
    return out


def run(args: argparse.Namespace) -> int:
    from .. import data, settings
    from ..config import ConfigError
    from ..data import declared, user
    from ..lmeval import usertasks, wrap

    cfg, yaml_path = wrap.builtin_config(args.task)
    mapping = {"fields": json.loads(args.fields), "answer_format": args.answer_format or "letter",
               "prompt": "medqa"} if args.fields else wrap.known_mapping(args.task, cfg)
    if mapping is None:
        raise ConfigError(f"no known field mapping for {args.task}: give --fields and --answer-format")
    files, test_split, demo_split = _data_files(args.data_files), cfg.get("test_split", "test"), wrap.demo_split(cfg)

    def source(split: str | None) -> dict | None:
        if split is None:
            return None
        if files:
            if split not in files:
                return None
            fmt = {".jsonl": "jsonl", ".json": "json", ".csv": "csv"}.get(files[split][files[split].rfind("."):])
            if fmt is None:
                raise ConfigError(f"--data-files {split}={files[split]}: expected a .jsonl, .json or .csv file")
            return {"format": fmt, "path": files[split]}
        return {"hub": cfg["dataset_path"], "config": cfg.get("dataset_name"), "split": split}

    if files and test_split not in files:
        raise ConfigError(f"--data-files has no {test_split!r} split, the split {args.task} evaluates")
    name = f"wrap_{args.task}".lower()
    demos = source(demo_split)
    raw = {"name": name, "title": f"{args.task} (lm-eval built-in) wrapped", "source": source(test_split),
           **mapping, "language": args.language, "n_demos": args.n_demos if demos else 0, "demos": demos,
           "wraps": args.task}
    decl = declared.parse({k: v for k, v in raw.items() if v is not None}, f"medr2 wrap {args.task}")
    existing = user.declarations().get(name)
    if existing is not None and existing.wraps is None:
        raise ConfigError(f"benchmark {name!r} is registered by `medr2 benchmark add`, not made by medr2 wrap: "
                          f"remove it first (medr2 benchmark remove {name}) or wrap under another name")
    usertasks.check_names(name, "medqa", f"medr2 wrap {args.task}")
    if args.method != "direct":
        declared.check(decl)  # the pre-pass reads every row; the direct wrap reads what lm-eval evaluates
    user.register(decl, list(data.BENCHMARKS), replace=True)
    task = f"{name}_{args.method}"
    description = cfg.get("description") or ""
    path = usertasks.write_task(name, {
        "include": [yaml_path, str(settings.tasks_dir() / "templates" / "_wrap_yaml")], "task": task,
        "task_alias": task, "tag": [],  # not a member of the built-in's tag groups (mmlu_stem_tasks, ...)
        "dataset_kwargs": {"benchmark": name, "wrap_method": args.method, "description": description,
                           "test_split": test_split, "all_splits": wrap.splits(cfg)},
    }, f"# made by `medr2 wrap {args.task} --method {args.method}`; remove with `medr2 benchmark remove {name}`\n")
    out = {"task": task, "wraps": args.task, "benchmark": name, "yaml": str(path)}
    if args.json:
        emit_json(args, out, indent=2)
    else:
        print(f"task {task}: {args.task} with {args.method} ({path})")
    return 0
