"""The mutation self-check runs in CI: every mutant of every rule the generic checks cover
must be caught, except those whose recipe says in writing why it cannot be."""

from __future__ import annotations

import pytest

from funcgrad.core import library_primitives
from funcgrad.tools import mutate_rules
from funcgrad.tools.mutate_rules import MUTABLE_RULES, mutation_caught, survivor_reason

MUTANTS, UNCHECKED = mutate_rules._mutants(MUTABLE_RULES, sorted(library_primitives()))


@pytest.mark.parametrize("name, rule", MUTANTS, ids=[f"{n}.{r}" for n, r in MUTANTS])
def test_mutant_is_caught(name, rule):
    reason = survivor_reason(name, rule)
    caught = mutation_caught(name, rule, examples=5)
    if reason is None:
        assert caught, f"perturbing {name}'s {rule} rule goes unnoticed by the generic checks"
    else:
        assert not caught, f"{name}.{rule} is now caught: drop its written reason ({reason})"


def test_unchecked_rules_have_reasons():
    assert all(reason for _, _, reason in UNCHECKED)


def test_command_line_reports_caught_and_survived(capsys):
    assert mutate_rules.main(["--primitive", "sin", "--primitive", "floor", "--examples", "3"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert "floor.jvp: the derivative is zero" in "\n".join(lines)
    assert lines[-1] == "5 caught, 1 survived"
