"""Issue 42.5: the package's modules import one another without a circle (lazy, in-function imports included): an
arrow points from a stage or tool to what it uses, never back."""

from __future__ import annotations

import ast
from pathlib import Path

import medr2_hooks

PACKAGE = Path(medr2_hooks.__file__).parent


def import_graph() -> dict[str, set[str]]:
    mods = {}
    for path in PACKAGE.rglob("*.py"):
        parts = ("medr2_hooks",) + path.relative_to(PACKAGE).with_suffix("").parts
        mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {}
    for name, path in mods.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else [])) \
                    if node.level else node.module or ""
                deps |= {f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names}
            elif isinstance(node, ast.Import):
                deps |= {a.name for a in node.names}
        graph[name] = {d for d in deps if d in mods and d != name and d != "medr2_hooks"}
    return graph


def test_no_module_imports_a_module_that_imports_it_back():
    graph = import_graph()
    cycles = []

    def walk(start: str, node: str, path: list[str]) -> None:
        for nxt in sorted(graph[node]):
            if nxt == start:
                cycles.append(" -> ".join(path + [start]))
            elif nxt not in path and len(path) < 5:
                walk(start, nxt, path + [nxt])

    for module in sorted(graph):
        walk(module, module, [module])
    assert len(graph) > 100 and cycles == []


def test_evidence_scoring_imports_nothing_of_the_pipelines_it_scores():
    """Issue 53.3: evidence/ reads stage runs and gold; the pipelines write the runs through it, never the reverse."""
    graph = import_graph()
    up = {m: sorted(d for d in deps if d.startswith("medr2_hooks.pipeline"))
          for m, deps in graph.items() if m.startswith("medr2_hooks.evidence")}
    assert up and not any(up.values()), up
