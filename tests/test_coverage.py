"""The rule-coverage matrix: every primitive fills every required rule table."""

import funcgrad as fg
from funcgrad.core import PRIMITIVES, library_primitives
from funcgrad.tools import coverage

# The primitive set that the core promises (docs/architecture.md lists the families).
CORE_PRIMITIVES = """
neg sign floor ceil round is_finite exp exp2 log log1p log10 log2 expm1 tanh logistic sin cos
tan asin acos atan sinh cosh asinh acosh atanh sqrt rsqrt cbrt abs erf erfc erf_inv lgamma digamma
not population_count add sub mul div rem pow integer_pow max min atan2 nextafter eq ne lt le gt ge
and or xor shift_left shift_right_logical shift_right_arithmetic select_n clamp
convert_element_type bitcast_convert_type stop_gradient
reduce_sum reduce_max reduce_min reduce_prod reduce_and reduce_or argmax argmin
cumsum cumprod cummax cummin cumlogsumexp
reduce_window_sum reduce_window_max reduce_window_min select_and_scatter_add
broadcast_in_dim reshape transpose squeeze rev slice pad concatenate iota
dynamic_slice dynamic_update_slice gather scatter scatter_add scatter_mul scatter_min scatter_max
dot_general conv_general_dilated sort top_k threefry2x32
""".split()


def test_every_core_primitive_is_declared():
    assert sorted(set(CORE_PRIMITIVES) - set(PRIMITIVES)) == []


def test_required_rules_have_no_gaps():
    assert coverage.missing() == []


def test_matrix_lists_every_primitive():
    text = coverage.matrix_text()
    for name in library_primitives():
        assert name in text
    assert f"{len(library_primitives())} primitives" in text


def test_command_exit_code_reports_required_gaps(capsys):
    assert coverage.main([]) == 0
    assert "abstract_eval" in capsys.readouterr().out
    probe = fg.core.Primitive("coverage_probe_without_rules")
    try:
        assert coverage.main(["--gaps"]) == 1
        assert "coverage_probe_without_rules: impl" in capsys.readouterr().out
    finally:
        del PRIMITIVES[probe.name]


def test_matrix_marks_rules_the_generic_checks_exercise():
    rows = {line.split()[0]: line.split()[1:] for line in coverage.matrix_text().splitlines()[2:]}
    jvp = coverage.COLUMNS.index("jvp")
    assert rows["sin"][jvp] == "+"  # checked against finite differences
    assert rows["eq"][jvp] == "o"  # a boolean output: the recipe says why it is not checked
    assert rows["psum"][coverage.COLUMNS.index("impl")] == "o"  # no recipe: a collective
