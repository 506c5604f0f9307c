"""The mutation self-check: break one rule of one primitive, and see the generic checks fail.

    python -m funcgrad.tools.mutate_rules                      # every rule of every primitive
    python -m funcgrad.tools.mutate_rules --rule jvp           # only jvp rules
    python -m funcgrad.tools.mutate_rules --primitive sin      # only sin's rules

Each mutant perturbs what one rule returns (floats scaled by 1.25, integers with their lowest
bit flipped, booleans negated; see `rule_checks.perturb`) and runs the generic check of that
rule on the primitive's recipe. A mutant the check does not notice survives: either the check
is too weak, or the rule's output cannot be wrong that way (a zero derivative scaled is still
zero), which the recipe then says in writing. Rules the generic checks skip, and primitives
without a recipe, are listed with their written reasons. Exits 1 when a mutant survives
without a reason.
"""

from __future__ import annotations

import argparse
import sys

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from funcgrad.core import PRIMITIVES, library_primitives
from funcgrad.tools.recipes import RECIPES, WITHOUT_RECIPE
from funcgrad.tools.rule_checks import mutated, run_check

MUTABLE_RULES = ("impl", "jvp", "transpose", "batch")


def mutation_caught(name: str, rule: str, examples: int = 10) -> bool:
    """Whether the generic check of `rule` fails on `name` once that rule is perturbed."""

    @settings(
        max_examples=examples,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(st.data())
    def check(data):
        run_check(name, rule, data)

    with mutated(PRIMITIVES[name], rule):
        try:
            check()
        except AssertionError:
            return True
    return False


def survivor_reason(name: str, rule: str) -> str | None:
    return RECIPES[name].reasons.get(f"mutate {rule}")


def _mutants(rules, names):
    """The (primitive, rule) pairs to mutate, and the (pair, reason) pairs left unchecked."""
    mutants, unchecked = [], []
    for name in names:
        primitive = PRIMITIVES[name]
        for rule in rules:
            if not primitive.has_rule(rule):
                continue
            if name in WITHOUT_RECIPE:
                unchecked.append((name, rule, WITHOUT_RECIPE[name]))
            elif rule in RECIPES[name].reasons:
                unchecked.append((name, rule, RECIPES[name].reasons[rule]))
            else:
                mutants.append((name, rule))
    return mutants, unchecked


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rule", choices=MUTABLE_RULES, action="append")
    parser.add_argument("--primitive", action="append", metavar="NAME")
    parser.add_argument("--examples", type=int, default=10, help="examples per mutant")
    args = parser.parse_args(argv)
    names = args.primitive or sorted(library_primitives())
    unknown = [n for n in names if n not in PRIMITIVES]
    if unknown:
        parser.error(f"unknown primitives: {', '.join(unknown)}")
    mutants, unchecked = _mutants(args.rule or MUTABLE_RULES, names)

    caught, survivors = 0, []
    for name, rule in mutants:
        if mutation_caught(name, rule, args.examples):
            caught += 1
        else:
            survivors.append((name, rule, survivor_reason(name, rule)))
            print(f"survived: {name}.{rule}", flush=True)

    if unchecked:
        print(f"\nnot mutated ({len(unchecked)} rules the generic checks skip, with reasons):")
        for name, rule, reason in unchecked:
            print(f"  {name}.{rule}: {reason}")
    if survivors:
        print("\nsurvivors:")
        for name, rule, reason in survivors:
            print(f"  {name}.{rule}: {reason or 'NO WRITTEN REASON'}")
    print(f"\n{caught} caught, {len(survivors)} survived")
    return 1 if any(reason is None for _, _, reason in survivors) else 0


if __name__ == "__main__":
    sys.exit(main())
