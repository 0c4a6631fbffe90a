"""``medr2 benchmark add|list|show|remove``: benchmarks declared in YAML (see medr2_hooks.data.declared)."""

from __future__ import annotations

import argparse

from .output import emit_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    add = sub.add_parser("add", help="validate a benchmark declaration (every row) and register it with its tasks",
                         description="Validate FILE and every row of its source, copy it to $MEDR2_CONFIG_DIR "
                         "(default ~/.config/medr2) and write its lm-eval tasks: one per method and scoring, "
                         "<name>_<method>[_gen] (medr2 tasks lists them).")
    add.add_argument("file", help="the declaration (YAML: name, title, source, fields, answer_format, ...)")
    add.add_argument("--lenient", action="store_true", help="skip malformed rows and count them (default: the "
                     "first one is an error naming file, line and field)")
    add.add_argument("--replace", action="store_true", help="overwrite a registered benchmark of the same name")
    add.add_argument("--json", action="store_true", help="print the outcome as JSON")
    listing = sub.add_parser("list", help="the registered benchmarks")
    listing.add_argument("--json", action="store_true", help="print them as JSON")
    show = sub.add_parser("show", help="a registered benchmark's declaration, item counts and tasks")
    show.add_argument("name")
    show.add_argument("--json", action="store_true", help="print it as JSON")
    remove = sub.add_parser("remove", help="unregister a benchmark and delete its tasks (its data stays)")
    remove.add_argument("name")


def run(args: argparse.Namespace) -> int:
    return {"add": _add, "list": _list, "show": _show, "remove": _remove}[args.action](args)


def _add(args) -> int:
    import dataclasses

    from .. import data
    from ..data import declared, user
    from ..lmeval.usertasks import check_names, write_tasks

    decl = declared.read(args.file)
    if args.lenient:
        decl = dataclasses.replace(decl, lenient=True)
    check_names(decl.name, decl.prompt, decl.origin)
    loaded = declared.check(decl)
    path = user.register(decl, list(data.BENCHMARKS), replace=args.replace)
    tasks = write_tasks(decl.name)
    out = {"name": decl.name, "declaration": str(path), "items": len(loaded.records), "skipped": len(loaded.skipped),
           "skipped_rows": loaded.skipped[:20], "tasks": tasks}
    if args.json:
        emit_json(args, out, indent=2)
        return 0
    print(f"registered {decl.name}: {len(loaded.records)} items from {decl.source.describe()} ({path})")
    if loaded.skipped:
        print(f"skipped {len(loaded.skipped)} malformed rows (--lenient), e.g.:")
        for line in loaded.skipped[:5]:
            print(f"  {line}")
    print("tasks: " + ", ".join(tasks))
    return 0


def _summary(name: str) -> dict:
    from .. import data
    from ..lmeval.usertasks import user_tasks_dir

    spec = data.benchmark(name)
    pools = data.pools(name)
    tasks = sorted(p.stem for p in (user_tasks_dir() / name).glob("*.yaml"))  # a wrap has only the tasks it made
    return {"name": name, "title": spec.title, "kind": spec.kind, "language": spec.language,
            "eval": len(pools.eval), "demos": len(pools.demos), "tasks": tasks,
            "declaration": spec.declaration.to_json()}


def _list(args) -> int:
    from ..data.user import declarations

    names = list(declarations())
    if args.json:
        emit_json(args, {"benchmarks": names}, indent=2)
        return 0
    from .. import settings

    print(f"registered benchmarks ({settings.config_dir() / 'benchmarks'}):" if names else
          "no registered benchmarks; add one with `medr2 benchmark add FILE`")
    for name, decl in declarations().items():
        print(f"  {name:<20} {decl.title}  [{decl.source.describe()}]")
    return 0


def _show(args) -> int:
    from ..data.user import declarations
    from ..errors import UnknownNameError

    if args.name not in declarations():
        raise UnknownNameError("registered benchmark", args.name, list(declarations()))
    out = _summary(args.name)
    if args.json:
        emit_json(args, out, indent=2)
        return 0
    import yaml

    print(f"{out['name']}: {out['title']} ({out['kind']}, {out['language']}): {out['eval']} items, {out['demos']} "
          "demonstrations")
    print("tasks: " + ", ".join(out["tasks"]))
    print(yaml.safe_dump(out["declaration"], sort_keys=False, allow_unicode=True), end="")
    return 0


def _remove(args) -> int:
    from ..data.user import unregister
    from ..lmeval.usertasks import remove_tasks

    path = unregister(args.name)
    remove_tasks(args.name)
    print(f"removed {args.name} ({path}) and its tasks")
    return 0
