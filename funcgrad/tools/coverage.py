"""Rule coverage: which rule tables each primitive fills, and the reason for each gap.

    python -m funcgrad.tools.coverage            # the matrix
    python -m funcgrad.tools.coverage --gaps     # only the missing entries

A cell is `+` when the rule exists and the generic rule checks exercise it (`tests/test_rules.py`,
driven by `funcgrad.tools.recipes`), `o` when it exists but no generic check reaches it (the
recipe table says why), `n/a` when the primitive declares why the rule does not apply
(`Primitive.not_applicable`), and `-` when it is missing. `REQUIRED` lists the columns
whose gaps are defects today; the tests fail on any of them. Later work adds columns to it as
it fills them (llvm and cuda are complete).
"""

from __future__ import annotations

import argparse
import sys

import funcgrad  # noqa: F401  (declares every primitive)
import funcgrad.backends.cuda.lowerings  # noqa: F401  (fills the llvm and cuda columns)
from funcgrad.core import Primitive, library_primitives

COLUMNS = ("abstract_eval", "impl", "jvp", "transpose", "batch", "llvm", "cuda")
REQUIRED = ("abstract_eval", "impl", "jvp", "transpose", "batch", "llvm", "cuda")


def generically_checked() -> dict[str, set[str]]:
    """Per primitive, the rules the generic checks exercise (they need hypothesis and SciPy,
    the test extras; without them every existing rule shows as `+`)."""
    try:
        from funcgrad.tools.rule_checks import checked_rules
    except ImportError:
        return {name: set(Primitive.RULES) for name in library_primitives()}
    return {name: set(checked_rules(name)) for name in library_primitives()}


def cell(primitive: Primitive, rule: str, checked: dict[str, set[str]] | None = None) -> str:
    if primitive.has_rule(rule):
        if checked is not None and rule in Primitive.RULES and rule not in checked[primitive.name]:
            return "o"
        return "+"
    if rule in primitive.not_applicable:
        return "n/a"
    return "-"


def missing(columns=REQUIRED) -> list[tuple[str, str]]:
    """(primitive, rule) pairs with neither a rule nor a written reason."""
    return [
        (name, rule)
        for name, primitive in sorted(library_primitives().items())
        for rule in columns
        if cell(primitive, rule) == "-"
    ]


def matrix_text() -> str:
    primitives = library_primitives()
    name_width = max(len(name) for name in primitives)
    header = "primitive".ljust(name_width) + "  " + "  ".join(COLUMNS)
    lines = [header, "-" * len(header)]
    checked = generically_checked()
    for name, primitive in sorted(primitives.items()):
        cells = "  ".join(cell(primitive, rule, checked).center(len(rule)) for rule in COLUMNS)
        lines.append(name.ljust(name_width) + "  " + cells)
    filled = {rule: sum(p.has_rule(rule) for p in primitives.values()) for rule in COLUMNS}
    lines.append("-" * len(header))
    totals = "  ".join(f"{filled[rule]}".center(len(rule)) for rule in COLUMNS)
    lines.append(f"{len(primitives)} primitives".ljust(name_width) + "  " + totals)
    tested = {rule: sum(rule in checked[name] for name in primitives) for rule in COLUMNS}
    totals = "  ".join(f"{tested[rule]}".center(len(rule)) for rule in COLUMNS)
    lines.append("generically checked".ljust(name_width) + "  " + totals)
    return "\n".join(lines)


def reasons_text() -> str:
    lines = []
    for name, primitive in sorted(library_primitives().items()):
        for rule, reason in sorted(primitive.not_applicable.items()):
            lines.append(f"{name}.{rule}: {reason}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gaps", action="store_true", help="list only missing entries")
    args = parser.parse_args(argv)
    if args.gaps:
        for name, rule in missing(COLUMNS):
            print(f"{name}: {rule}")
    else:
        print(matrix_text())
        reasons = reasons_text()
        if reasons:
            print("\nwritten reasons for n/a entries:\n" + reasons)
    required_gaps = missing()
    if required_gaps:
        print(f"\n{len(required_gaps)} required entries missing (columns {', '.join(REQUIRED)})")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
