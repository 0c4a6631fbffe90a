"""One flag style across the sub-commands: lm-eval's underscores (``--batch_size``, ``--output_path``), and every
multi-word flag also answers to its hyphenated spelling (``--dry-run`` as ``--dry_run``), as many already did."""

from __future__ import annotations

import argparse


def spellings(names: tuple[str, ...]) -> tuple[str, ...]:
    """A flag's names: short flags as given, then each long flag's underscored spelling (the first long name:
    it names ``dest``) before its hyphenated alias."""
    out: list[str] = []
    for name in names:
        if name.startswith("--") and ("-" in name[2:] or "_" in name[2:]):
            under = "--" + name[2:].replace("-", "_")
            out += [under, "--" + name[2:].replace("_", "-")]
        else:
            out.append(name)
    unique = list(dict.fromkeys(out))
    long = sorted((n for n in unique if n.startswith("--")), key=lambda n: "-" in n[2:])  # stable: underscores first
    return tuple([n for n in unique if not n.startswith("--")] + long)


class Parser(argparse.ArgumentParser):
    """``ArgumentParser`` whose flags follow :func:`spellings` (its sub-command parsers too)."""

    def add_argument(self, *names, **kwargs):
        return super().add_argument(*(spellings(names) if names and names[0].startswith("-") else names), **kwargs)
