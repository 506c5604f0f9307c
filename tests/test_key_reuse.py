"""Key-reuse checking (`config.debug_key_reuse`, `funcgrad.experimental.key_reuse`): each rule
of the documented semantics, eagerly, under jit (checked on the traced program) and through
the transformations and control flow."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad import core, lax, random
from funcgrad.backends.cuda import emulator
from funcgrad.experimental import key_reuse
from funcgrad.experimental.key_reuse import (
    Forward,
    KeyReuseError,
    KeyReuseSignature,
    Sink,
    Source,
    View,
)
from funcgrad.ir import Jaxpr


@pytest.fixture
def checking():
    with fg.debug_key_reuse():
        yield


def _raises_reuse(*names):
    """pytest.raises for a KeyReuseError whose message names `names` (the use, then the use
    before it)."""
    pattern = r".*".join(f"random\\.{n}" for n in names) + r".*already used"
    return pytest.raises(KeyReuseError, match=pattern)


# ---------------------------------------------------------------------------------------------
# The switch


def test_off_by_default_and_nothing_is_wrapped():
    assert fg.config.debug_key_reuse is False
    key = random.PRNGKey(0)
    assert np.array_equal(random.normal(key), random.normal(key))  # values: no check
    assert "process_primitive" not in vars(core.eval_trace())
    from funcgrad.transforms.jit import _Entry

    assert _Entry.executable.fget is _Entry.program


def test_the_context_manager_and_config_update_switch_it_on_and_back_off():
    key = random.PRNGKey(0)
    with fg.debug_key_reuse():
        assert fg.config.debug_key_reuse
        random.normal(key)
        with _raises_reuse("uniform", "normal"):
            random.uniform(key)
    assert "process_primitive" not in vars(core.eval_trace())
    random.uniform(key)  # off again
    fg.config.update("jax_debug_key_reuse", True)
    try:
        with pytest.raises(KeyReuseError):
            random.normal(key)
    finally:
        fg.config.update("debug_key_reuse", False)
    with pytest.raises(TypeError, match="True or False"):
        fg.config.update("debug_key_reuse", 1)


def test_checking_leaves_the_numbers_as_they_are():
    key = random.PRNGKey(3)
    expected = [np.asarray(f(key)) for f in (random.normal, random.split)]
    with fg.debug_key_reuse():
        for f, want in zip((random.normal, random.split), expected):
            np.testing.assert_array_equal(f(random.PRNGKey(3)), want)
            np.testing.assert_array_equal(fg.jit(f)(random.PRNGKey(3)), want)


def test_the_compiler_drops_the_markers(checking):
    lowered = fg.jit(lambda k: random.normal(k, (3,))).lower(random.PRNGKey(0))
    assert "random_consume" in lowered.as_text()
    assert "random_consume" not in lowered.as_text(optimized=True)


# ---------------------------------------------------------------------------------------------
# What uses a key up


def test_drawing_twice_from_one_key_names_both_uses(checking):
    key = random.PRNGKey(0)
    random.normal(key)
    with _raises_reuse("uniform", "normal") as error:
        random.uniform(key)
    assert "test_key_reuse.py" in str(error.value)


@pytest.mark.parametrize(
    "first",
    [
        lambda k: random.split(k),
        lambda k: random.bits(k),
        lambda k: random.randint(k, (2,), 0, 5),
        lambda k: random.permutation(k, 4),
        lambda k: random.gamma(k, 2.0),
    ],
)
def test_splitting_and_every_draw_use_the_key_up(checking, first):
    key = random.PRNGKey(1)
    first(key)
    with _raises_reuse("normal"):
        random.normal(key)


def test_fold_in_does_not_use_the_key_up(checking):
    key = random.PRNGKey(2)
    random.normal(random.fold_in(key, 1))
    random.normal(random.fold_in(key, 2))
    random.normal(key)
    with _raises_reuse("normal", "normal"):
        random.normal(key)


def test_new_keys_are_unused(checking):
    random.normal(random.PRNGKey(0))
    random.normal(random.PRNGKey(0))  # two keys of the same seed: each made anew
    first, second = random.split(random.PRNGKey(0))
    random.normal(first)
    random.normal(second)


def test_a_clone_counts_apart_from_its_key(checking):
    key = random.PRNGKey(4)
    clone = random.clone(key)
    np.testing.assert_array_equal(clone, key)
    random.normal(clone)
    random.normal(key)
    with _raises_reuse("normal", "normal"):
        random.normal(clone)


def test_key_data_and_wrap_key_data_hand_out_new_keys(checking):
    key = random.PRNGKey(5)
    random.normal(key)
    rewrapped = random.wrap_key_data(random.key_data(key))
    np.testing.assert_array_equal(rewrapped, key)
    random.normal(rewrapped)
    data = random.key_data(key)
    random.key_data(key)  # reading the words uses nothing
    random.normal(data)
    with _raises_reuse("uniform", "normal"):
        random.uniform(data)


def test_an_index_of_keys_is_those_keys(checking):
    keys = random.split(random.PRNGKey(6), 3)
    keys[0], keys[0]  # taking an index uses nothing
    random.normal(keys[0])
    random.normal(keys[1])
    with _raises_reuse("normal", "normal"):
        random.normal(keys[0])
    with _raises_reuse("split", "normal"):
        random.split(keys[1])
    random.normal(keys[2])


def test_iterating_keys_gives_new_keys_as_in_jax(checking):
    keys = random.split(random.PRNGKey(7), 2)
    for key in keys:
        random.normal(key)
    for key in keys:
        random.normal(key)


def test_reshapes_and_concatenations_of_keys_hold_the_same_keys(checking):
    first, second = random.split(random.PRNGKey(8))
    stacked = fnp.stack([first, second])
    random.normal(stacked[1])
    with _raises_reuse("normal", "normal"):
        random.normal(second)
    random.normal(fnp.reshape(stacked, (4,))[:2].reshape(2))  # the first key
    with _raises_reuse("normal", "normal"):
        random.normal(first)


def test_comparing_keys_uses_nothing(checking):
    key = random.PRNGKey(9)
    assert bool(fnp.all(key == key))
    random.normal(key)


# ---------------------------------------------------------------------------------------------
# Transformations


def test_vmap_uses_every_key_of_the_batch(checking):
    keys = random.split(random.PRNGKey(10), 3)
    fg.vmap(random.normal)(keys)
    with _raises_reuse("normal", "normal"):
        random.normal(keys[2])
    with _raises_reuse("normal", "normal"):
        fg.vmap(random.normal)(keys)


def test_reuse_under_grad_and_jvp_is_found(checking):
    with _raises_reuse("normal", "normal"):
        fg.grad(lambda x, k: x * random.normal(k) + random.normal(k))(1.0, random.PRNGKey(0))
    key = random.PRNGKey(1)
    with _raises_reuse("normal", "normal"):
        fg.jvp(lambda x: x * random.normal(key) * random.normal(key), (1.0,), (1.0,))
    fg.grad(lambda x, k: x * random.normal(k))(1.0, random.PRNGKey(1))


@pytest.mark.parametrize("jitted", [False, True])
def test_checkpoint_recomputation_is_not_a_second_use(checking, jitted):
    """Reverse mode recomputes a checkpointed draw from its key; that repeats the draw's use,
    it does not use the key again (regression: it raised)."""

    def loss(x, key):
        return fnp.sin(x * random.normal(key))

    grad = fg.grad(fg.checkpoint(loss))
    if jitted:
        grad = fg.jit(grad)
    key = random.PRNGKey(11)
    want = np.cos(1.5 * np.asarray(random.normal(random.PRNGKey(11)))) * np.asarray(
        random.normal(random.PRNGKey(11))
    )
    np.testing.assert_allclose(grad(1.5, key), want, rtol=1e-6)
    with _raises_reuse("normal", "normal"):
        random.normal(key)


# ---------------------------------------------------------------------------------------------
# jit: the traced program is checked before it runs


def test_reuse_inside_a_jitted_function_is_found_when_traced(checking):
    ran = []

    def f(k):
        fg.debug.callback(lambda: ran.append(True))
        return random.normal(k) + random.uniform(k)

    with _raises_reuse("uniform", "normal"):
        fg.jit(f).lower(random.PRNGKey(0))
    with _raises_reuse("uniform", "normal"):
        fg.jit(f)(random.PRNGKey(0))
    with _raises_reuse("uniform", "normal"):
        fg.make_jaxpr(f)(random.PRNGKey(0))
    assert not ran


def test_eager_calls_of_a_jitted_function_use_their_arguments(checking):
    draw = fg.jit(lambda k: random.normal(k))
    key = random.PRNGKey(12)
    draw(key)
    with _raises_reuse("normal", "normal") as error:
        draw(key)
    assert "jit(" in str(error.value)
    with _raises_reuse("normal", "normal"):
        random.normal(key)
    used = random.PRNGKey(13)
    random.split(used)
    with _raises_reuse("normal", "split"):
        draw(used)


def test_a_jitted_function_closing_over_a_key_uses_it_at_each_call(checking):
    key = random.PRNGKey(14)
    draw = fg.jit(lambda: random.normal(key))
    draw()
    with _raises_reuse("normal", "normal"):
        draw()


def test_jitted_outputs_that_are_inputs_keep_their_state(checking):
    identity = fg.jit(lambda k: k)
    key = random.PRNGKey(15)
    random.normal(identity(key))
    with _raises_reuse("normal", "normal"):
        random.normal(key)
    first_row = fg.jit(lambda ks: ks[0])
    keys = random.split(random.PRNGKey(16), 2)
    random.normal(first_row(keys))
    random.normal(keys[1])
    with _raises_reuse("normal", "normal"):
        random.normal(keys[0])
    made = fg.jit(lambda k: random.split(k)[0])(random.PRNGKey(17))
    random.normal(made)  # a new key
    spent = fg.jit(lambda k: (random.normal(k), k)[1])(random.PRNGKey(18))
    with _raises_reuse("uniform", "normal"):
        random.uniform(spent)


def test_jit_traces_again_when_checking_is_turned_on():
    """A program traced without checking holds no key uses (regression: its cached trace was
    reused and the reuse went unnoticed)."""
    draw = fg.jit(lambda k: random.normal(k))
    key = random.PRNGKey(19)
    draw(key)
    with fg.debug_key_reuse():
        draw(key)
        with _raises_reuse("normal", "normal"):
            draw(key)


def test_vmap_of_a_jitted_draw_and_jit_of_vmap(checking):
    keys = random.split(random.PRNGKey(20), 2)
    fg.vmap(fg.jit(random.normal))(keys)
    with _raises_reuse("normal", "normal"):
        random.normal(keys[0])
    with _raises_reuse("normal", "normal"):
        fg.jit(lambda ks: (fg.vmap(random.normal)(ks), random.normal(ks[1])))(
            random.split(random.PRNGKey(21), 2)
        )


# ---------------------------------------------------------------------------------------------
# Control flow


@pytest.mark.parametrize("jitted", [False, True])
def test_cond_uses_what_any_branch_uses(checking, jitted):
    def f(k, p):
        drawn = lax.cond(p, lambda k: random.normal(k), lambda k: 0.0, k)
        return drawn + random.normal(k)

    run = fg.jit(f) if jitted else f
    for taken in (True, False):
        with _raises_reuse("normal", "normal"):
            run(random.PRNGKey(22), taken)
    both = lax.cond(
        True, lambda k: random.normal(k), lambda k: random.uniform(k), random.PRNGKey(23)
    )
    assert np.isfinite(both)


def test_cond_returning_its_key_from_every_branch_returns_that_key(checking):
    def f(k, p):
        out = lax.cond(p, lambda k: k, lambda k: k, k)
        return random.normal(out) + random.normal(k)

    with _raises_reuse("normal", "normal"):
        fg.jit(f)(random.PRNGKey(24), True)
    fg.jit(lambda k, p: random.normal(lax.cond(p, lambda k: random.split(k)[0], lambda k: k, k)))(
        random.PRNGKey(25), True
    )


@pytest.mark.parametrize("jitted", [False, True])
def test_scan_drawing_from_a_carry_it_carries_unchanged_is_a_reuse(checking, jitted):
    def f(k):
        return lax.scan(lambda c, _: (c, random.normal(c)), k, None, length=3)

    with pytest.raises(KeyReuseError, match="scan body draws from a carried key"):
        (fg.jit(f) if jitted else f)(random.PRNGKey(26))


@pytest.mark.parametrize("jitted", [False, True])
def test_scan_splitting_its_carry_draws_new_numbers_each_step(checking, jitted):
    def f(k):
        def body(carry, _):
            carry, drawn = random.split(carry)
            return carry, random.normal(drawn)

        return lax.scan(body, k, None, length=3)

    key = random.PRNGKey(27)
    _, draws = (fg.jit(f) if jitted else f)(key)
    assert len(set(np.asarray(draws).tolist())) == 3
    with _raises_reuse("normal", "split"):
        random.normal(key)


def test_scan_and_fori_loop_drawing_from_a_constant_key_are_reuses(checking):
    key = random.PRNGKey(28)
    with pytest.raises(KeyReuseError, match="closes over or gets as a constant"):
        fg.jit(lambda k: lax.scan(lambda c, _: (c + random.normal(k), None), 0.0, None, length=3))(
            key
        )
    with pytest.raises(KeyReuseError, match="closes over or gets as a constant"):
        lax.fori_loop(0, 3, lambda i, c: c + random.normal(key), 0.0)
    folded = lax.fori_loop(0, 3, lambda i, c: c + random.normal(random.fold_in(key, i)), 0.0)
    want = sum(float(random.normal(random.fold_in(random.PRNGKey(28), i))) for i in range(3))
    np.testing.assert_allclose(folded, want, rtol=1e-6)


def test_scan_over_keys_uses_each_once(checking):
    keys = random.split(random.PRNGKey(29), 3)
    total, _ = lax.scan(lambda c, k: (c + random.normal(k), None), 0.0, keys)
    want = sum(float(random.normal(k)) for k in random.split(random.PRNGKey(29), 3))
    np.testing.assert_allclose(total, want, rtol=1e-6)
    with _raises_reuse("normal", "normal"):
        random.normal(keys[1])


def test_while_loop_rules(checking):
    key = random.PRNGKey(30)
    with pytest.raises(KeyReuseError, match="while_loop body draws from a carried key"):
        lax.while_loop(lambda c: c[1] < 3, lambda c: (c[0], c[1] + random.normal(c[0])), (key, 0.0))
    with pytest.raises(KeyReuseError, match="while_loop body draws from a key it closes over"):
        lax.while_loop(lambda c: c < 3, lambda c: c + random.normal(key), 0.0)
    with pytest.raises(KeyReuseError, match="in its cond and its body"):
        lax.while_loop(
            lambda c: random.normal(c[0]) < 3,
            lambda c: (random.split(c[0])[0], c[1] + 1.0),
            (key, 0.0),
        )

    def body(c):
        carry, drawn = random.split(c[0])
        return carry, c[1] + fnp.abs(random.normal(drawn))

    fg.jit(lambda k: lax.while_loop(lambda c: c[1] < 3, body, (k, 0.0)))(random.PRNGKey(31))


# ---------------------------------------------------------------------------------------------
# The public checker


def test_signatures_say_what_a_program_does_with_keys():
    signature = key_reuse.function_type_signature
    key = random.PRNGKey(0)
    keys = random.split(key, 3)
    assert signature(random.normal, key) == KeyReuseSignature(Sink(0))
    assert signature(random.split, key) == KeyReuseSignature(Sink(0), Source(0))
    assert signature(lambda k: k, key) == KeyReuseSignature(Forward(0, 0))
    assert signature(lambda k: random.fold_in(k, 3), key) == KeyReuseSignature(Source(0))
    assert signature(lambda ks: ks[1], keys) == KeyReuseSignature(View(0, np.array([2, 3])))
    partly = signature(lambda ks: random.normal(ks[1]), keys)
    assert partly == KeyReuseSignature(Sink(0, np.array([[False] * 2, [True] * 2, [False] * 2])))
    used = signature(lambda k: (random.normal(k), k)[1], key)
    assert used == KeyReuseSignature(Sink(0), Forward(0, 0))
    assert not fg.config.debug_key_reuse  # (it traced with checking on, and turned it off)


def test_check_key_reuse_and_the_jaxpr_checker():
    key = random.PRNGKey(0)
    key_reuse.check_key_reuse(lambda k: random.normal(random.split(k)[0]), key)
    with _raises_reuse("normal", "split"):
        key_reuse.check_key_reuse(lambda k: (random.split(k), random.normal(k)), key)
    with fg.debug_key_reuse():
        closed = fg.make_jaxpr(lambda k: random.normal(k))(key)
    key_reuse.check_key_reuse_jaxpr(closed)
    (use,) = [e for e in closed.jaxpr.eqns if e.primitive.name == "random_consume"]
    jaxpr = closed.jaxpr
    twice = Jaxpr(jaxpr.constvars, jaxpr.invars, jaxpr.outvars, [use, *jaxpr.eqns])
    with _raises_reuse("normal", "normal"):
        key_reuse.check_key_reuse_jaxpr(twice)


def test_consume_marks_a_key_used(checking):
    key = random.PRNGKey(32)
    assert key_reuse.consume(key) is key
    with pytest.raises(KeyReuseError, match="key_reuse.consume"):
        random.normal(key)


@given(st.lists(st.integers(0, 3), min_size=2, max_size=4), st.booleans())
def test_drawing_from_rows_raises_exactly_at_the_first_repeated_row(rows, jitted):
    def draw_rows(keys):
        return [random.normal(keys[i]) for i in rows]

    repeated = len(set(rows)) < len(rows)
    keys = random.split(random.PRNGKey(33), 4)
    with fg.debug_key_reuse():
        run = fg.jit(draw_rows) if jitted else draw_rows
        if repeated:
            with _raises_reuse("normal", "normal"):
                run(keys)
        else:
            draws = run(keys)
            want = [random.normal(k) for k in random.split(random.PRNGKey(33), 4)]
            np.testing.assert_allclose(draws, [want[i] for i in rows], rtol=1e-6)


@pytest.mark.cuda
@pytest.mark.skipif(emulator.compiler() is None, reason="the emulator needs a C++ compiler")
def test_keys_on_a_gpu_are_checked_eagerly_and_in_jitted_calls(checking):
    gpu = fg.devices("cuda_emulator")[0]
    key = fg.device_put(random.PRNGKey(34), gpu)
    draw = fg.jit(lambda k: random.normal(k))
    drawn = draw(key)
    assert drawn.device is gpu
    with _raises_reuse("normal", "normal"):
        draw(key)
    keys = fg.device_put(random.split(random.PRNGKey(35), 2), gpu)
    random.normal(keys[1])
    with _raises_reuse("uniform", "normal"):
        random.uniform(keys[1])
