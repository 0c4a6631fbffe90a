"""One flag style across the sub-commands (issue 27.6): lm-eval's underscores, hyphenated spellings accepted."""

from __future__ import annotations

import argparse

from medr2_hooks.cli.main import build_parser
from medr2_hooks.flags import spellings


def _parsers(parser: argparse.ArgumentParser, path: str = "medr2"):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, f"{path} {name}")


def test_every_multi_word_flag_takes_both_spellings_underscores_first():
    seen = 0
    for path, parser in _parsers(build_parser()):
        for action in parser._actions:
            long = [o for o in action.option_strings if o.startswith("--")
                    and not (isinstance(action, argparse.BooleanOptionalAction) and o.startswith("--no-"))]
            words = [o for o in long if "_" in o or "-" in o[2:]]
            if words:
                seen += 1
                under = {"--" + o[2:].replace("-", "_") for o in words}
                assert under | {"--" + u[2:].replace("_", "-") for u in under} == set(words), (path, words)
                assert "-" not in long[0][2:], (path, long)  # the underscored spelling names dest, leads in --help
    assert seen > 30


def test_both_spellings_parse_to_the_same_value():
    parser = build_parser()
    a = parser.parse_args(["sweep", "table10_embedded", "--dry-run", "--window-cap", "2048"])
    b = parser.parse_args(["sweep", "table10_embedded", "--dry_run", "--window_cap", "2048"])
    assert (a.dry_run, a.window_cap) == (b.dry_run, b.window_cap) == (True, 2048)
    assert spellings(("-h", "--help")) == ("-h", "--help")
    assert spellings(("--allow-subset", "--allow_subset")) == ("--allow_subset", "--allow-subset")
