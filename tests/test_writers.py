"""Writers that cannot forget (issues 39, 42.4): every JSON or YAML file the package writes goes through
``fs.write_json`` / ``fs.write_yaml`` (redacted, atomic, the umask's mode). The test walks the package's code and fails
on a JSON/YAML serialisation that reaches a file any other way."""

from __future__ import annotations

import ast
from pathlib import Path

import medr2_hooks

PACKAGE = Path(medr2_hooks.__file__).parent
# not files of records: JSON Lines streams written line by line that hold no config (a corpus's documents, a synthetic
# corpus, a loss curve), a command's --json output on stdout, an HTTP answer
LINE_STREAMS = {("corpus/store.py", "write_corpus"), ("corpus/synthetic.py", "write_jsonl"),
                ("finetune/train.py", "train"), ("cli/output.py", "emit_json"), ("llm/serve.py", "make_server"),
                ("llm/serve.py", "_send")}
SERIALISERS = {("json", "dumps"), ("json", "dump"), ("yaml", "safe_dump"), ("yaml", "dump")}
WRITERS = {"atomic_write_text", "write_text", "write", "writelines", "_atomic_replace"}


def _name(node) -> str | None:
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else None


def _serialises(node) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
        isinstance(node.func.value, ast.Name) and (node.func.value.id, node.func.attr) in SERIALISERS


def violations(source: str, rel: str) -> list[str]:
    """``file:line function`` of each JSON/YAML write that bypasses fs.write_json / fs.write_yaml: a serialiser's
    result written (directly, or through a name or an f-string/concatenation in the same function), or
    ``json.dump``/``yaml.safe_dump`` given a file."""
    out = []
    for fn in [n for n in ast.walk(ast.parse(source)) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
        if (rel, fn.name) in LINE_STREAMS:
            continue
        tainted = set()
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign) and any(_serialises(n) for n in ast.walk(node.value)):
                tainted |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        for node in ast.walk(fn):
            if not isinstance(node, ast.Call):
                continue
            if _serialises(node) and len(node.args) >= 2:  # json.dump(obj, fh) / yaml.safe_dump(obj, fh)
                out.append(f"{rel}:{node.lineno} {fn.name}")
            elif _name(node.func) in WRITERS and any(
                    _serialises(n) or (isinstance(n, ast.Name) and n.id in tainted)
                    for arg in node.args for n in ast.walk(arg)):
                out.append(f"{rel}:{node.lineno} {fn.name}")
    return out


def test_every_json_or_yaml_file_is_written_through_the_redacting_writers():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel == "fs.py":
            continue
        found += violations(path.read_text(encoding="utf-8"), rel)
    assert found == [], "JSON/YAML written around fs.write_json/write_yaml: " + ", ".join(found)


def test_the_walk_finds_the_writes_it_forbids():
    bad = '''
import json, yaml
def a(path, record):
    atomic_write_text(path, json.dumps(record))
def b(path, record):
    text = json.dumps(record, indent=1)
    path.write_text(text)
def c(fh, record):
    yaml.safe_dump(record, fh)
def d(fh, record):
    fh.write(json.dumps(record) + "\\n")
'''
    assert [v.split()[1] for v in violations(bad, "x.py")] == ["a", "b", "c", "d"]
    assert violations("import json\ndef ok(record):\n    return json.dumps(record)\n", "x.py") == []


def test_a_written_record_holds_no_credential_in_a_key_or_a_value(tmp_path):
    from medr2_hooks.fs import write_json, write_yaml

    secret = "pw-PLANTED-42"
    record = {f"served@http://u:{secret}@h/v1": {"base_url": f"http://u:{secret}@h/v1", "api_key": secret}}
    write_json(tmp_path / "r.json", record)
    write_yaml(tmp_path / "r.yaml", record, "# a sweep\n")
    assert secret not in (tmp_path / "r.json").read_text() + (tmp_path / "r.yaml").read_text()
    assert (tmp_path / "r.yaml").read_text().startswith("# a sweep\n")
