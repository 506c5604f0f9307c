"""Recurrent cells and the layers that scan them over a sequence.

A cell maps `(carry, x)` to `(carry, y)` for one time step, the shape `lax.scan` steps, so
`RNN` is one scan and a cell can also be stepped by hand. Cells take any leading (batch) axes
on `x` (..., input_size) and on the carry (..., hidden_size).

The gate equations and the parameter layout follow PyTorch's cells, so trained weights carry
over by transposing them: `input_weight` is (input_size, gates * hidden_size) and
`hidden_weight` (hidden_size, gates * hidden_size), the gates side by side in the order each
cell's docstring gives, with a bias for each (`input_bias`, `hidden_bias`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import funcgrad.numpy as fnp
from funcgrad import lax, random, tree_util
from funcgrad.nn import functions as F
from funcgrad.nn import initializers
from funcgrad.nn.layers import _FLOAT, _check_trailing
from funcgrad.nn.module import Module, field


def _gate_blocks(init, key, fan_in: int, hidden_size: int, gates: int, dtype):
    """One (fan_in, hidden_size) block per gate, side by side: an orthogonal initializer
    then makes each gate's recurrent matrix orthogonal, not only the whole."""
    keys = random.split(key, gates)
    return fnp.concatenate([init(k, (fan_in, hidden_size), dtype) for k in keys], axis=1)


class _Cell(Module):
    input_weight: Any
    hidden_weight: Any
    input_bias: Any
    hidden_bias: Any
    input_size: int = field(static=True)
    hidden_size: int = field(static=True)

    gates = 0  # set by the subclasses

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        *,
        use_bias: bool = True,
        key,
        weight_init=None,
        recurrent_init=None,
        bias_init=initializers.zeros,
        dtype=_FLOAT,
    ):
        input_key, hidden_key, input_bias_key, hidden_bias_key = random.split(key, 4)
        weight_init = weight_init or initializers.lecun_normal()
        recurrent_init = recurrent_init or initializers.orthogonal()
        n = self.gates
        self.input_weight = _gate_blocks(weight_init, input_key, input_size, hidden_size, n, dtype)
        self.hidden_weight = _gate_blocks(
            recurrent_init, hidden_key, hidden_size, hidden_size, n, dtype
        )
        if use_bias:
            self.input_bias = bias_init(input_bias_key, (n * hidden_size,), dtype)
            self.hidden_bias = bias_init(hidden_bias_key, (n * hidden_size,), dtype)
        else:
            self.input_bias = self.hidden_bias = None
        self.input_size, self.hidden_size = input_size, hidden_size

    def _name(self) -> str:
        sizes = f"input_size={self.input_size}, hidden_size={self.hidden_size}"
        return f"{type(self).__name__}({sizes})"

    def _projections(self, x, h) -> tuple:
        """x @ input_weight + input_bias and h @ hidden_weight + hidden_bias, after checking
        both inputs' feature axes."""
        x, h = fnp.asarray(x), fnp.asarray(h)
        _check_trailing(self._name(), x, self.input_size, "input features")
        _check_trailing(self._name(), h, self.hidden_size, "the carry's hidden features")
        from_input, from_hidden = x @ self.input_weight, h @ self.hidden_weight
        if self.input_bias is None:
            return from_input, from_hidden
        return from_input + self.input_bias, from_hidden + self.hidden_bias

    def _zeros(self, batch_shape, dtype):
        return fnp.zeros((*batch_shape, self.hidden_size), dtype or self.input_weight.dtype)


class SimpleRNNCell(_Cell):
    """h' = activation(x W_i + b_i + h W_h + b_h), tanh by default; carry and output are h."""

    activation: Callable = field(static=True)
    gates = 1

    def __init__(self, input_size: int, hidden_size: int, *, activation=F.tanh, **kw):
        super().__init__(input_size, hidden_size, **kw)
        self.activation = activation

    def initial_carry(self, batch_shape=(), dtype=None):
        """Zeros of (*batch_shape, hidden_size), in the parameters' dtype unless given."""
        return self._zeros(batch_shape, dtype)

    def __call__(self, carry, x, *, key=None):
        from_input, from_hidden = self._projections(x, carry)
        h = self.activation(from_input + from_hidden)
        return h, h


class GRUCell(_Cell):
    """Gates in the order reset r, update z, candidate n:

        r = sigmoid(x W_ir + b_ir + h W_hr + b_hr)
        z = sigmoid(x W_iz + b_iz + h W_hz + b_hz)
        n = tanh(x W_in + b_in + r * (h W_hn + b_hn))
        h' = (1 - z) * n + z * h

    The reset gate scales the hidden projection after its bias, which is why the hidden side
    has a bias of its own. Carry and output are h."""

    gates = 3

    def initial_carry(self, batch_shape=(), dtype=None):
        """Zeros of (*batch_shape, hidden_size), in the parameters' dtype unless given."""
        return self._zeros(batch_shape, dtype)

    def __call__(self, carry, x, *, key=None):
        from_input, from_hidden = self._projections(x, carry)
        input_r, input_z, input_n = fnp.split(from_input, 3, axis=-1)
        hidden_r, hidden_z, hidden_n = fnp.split(from_hidden, 3, axis=-1)
        r = F.sigmoid(input_r + hidden_r)
        z = F.sigmoid(input_z + hidden_z)
        n = F.tanh(input_n + r * hidden_n)
        h = (1 - z) * n + z * carry
        return h, h


class LSTMCell(_Cell):
    """Gates in the order input i, forget f, cell candidate g, output o:

        i, f, o = sigmoid of (x W_i* + b_i* + h W_h* + b_h*) for each
        g = tanh(x W_ig + b_ig + h W_hg + b_hg)
        c' = f * c + i * g
        h' = o * tanh(c')

    The carry is the pair (h, c); the output is h."""

    gates = 4

    def initial_carry(self, batch_shape=(), dtype=None) -> tuple:
        """(h, c), both zeros of (*batch_shape, hidden_size), in the parameters' dtype unless
        given."""
        return self._zeros(batch_shape, dtype), self._zeros(batch_shape, dtype)

    def __call__(self, carry, x, *, key=None):
        h, c = carry
        from_input, from_hidden = self._projections(x, h)
        i, f, g, o = fnp.split(from_input + from_hidden, 4, axis=-1)
        c = F.sigmoid(f) * c + F.sigmoid(i) * F.tanh(g)
        h = F.sigmoid(o) * F.tanh(c)
        return (h, c), h


class RNN(Module):
    """A cell scanned over the time axis of (..., time, features), or of (time, ...,
    features) with `time_major=True`: `carry, outputs = rnn(x)` gives the final carry and the
    cell's output at every step, on the input's layout. With `reverse=True` the sequence is
    read from its end, and output t is still the step that read input t. The carry starts
    at the cell's zeros unless `initial_carry` is given: any cell with `initial_carry(batch_shape,
    dtype)` and the `(carry, x) -> (carry, y)` call may be scanned.

    Padded sequences: `seq_lengths`, integers of the batch shape (...), marks steps from each
    sequence's length on as padding. The carry returned is the one after the sequence's last
    valid step (the initial carry for length 0), and with `reverse=True` each sequence is
    read from its last valid step back to its first, so padding never reaches the valid
    steps. Outputs at padded steps are not zeroed: as in Flax, the cell runs on over the
    padding (the backward reading takes it from the end, after the valid steps), and output
    t is still the step that read input t. Lengths are clipped to [0, time]."""

    cell: Module
    time_major: bool = field(static=True)
    reverse: bool = field(static=True)

    def __init__(self, cell: Module, *, time_major: bool = False, reverse: bool = False):
        self.cell, self.time_major, self.reverse = cell, time_major, reverse

    def __call__(self, x, initial_carry=None, *, seq_lengths=None, key=None):
        x = fnp.asarray(x)
        if x.ndim < 2:
            layout = "(time, ..., features)" if self.time_major else "(..., time, features)"
            raise ValueError(
                f"RNN: expected a sequence of shape {layout}, got shape {tuple(x.shape)}"
            )
        steps = x if self.time_major else fnp.moveaxis(x, -2, 0)
        if initial_carry is None:
            dtype = fnp.result_type(x, *tree_util.tree_leaves(self.cell))
            initial_carry = self.cell.initial_carry(steps.shape[1:-1], dtype)
        if seq_lengths is None:
            carry, outputs = lax.scan(self.cell, initial_carry, steps, reverse=self.reverse)
        else:
            lengths = _lengths(seq_lengths, steps.shape)
            carry, outputs = self._scan_padded(initial_carry, steps, lengths)
        return carry, outputs if self.time_major else fnp.moveaxis(outputs, 0, -2)

    def _scan_padded(self, initial_carry, steps, lengths) -> tuple:
        """The scan over time-major `steps`, the cell running over every step while a second
        carry keeps each sequence's state at its last valid step."""
        if self.reverse:
            steps = _flip_valid(steps, lengths)

        def step(carries, inputs):
            running, kept = carries
            x, t = inputs
            running, y = self.cell(running, x)
            valid = t < lengths
            kept = tree_util.tree_map(
                lambda new, old: fnp.where(_expand(valid, new), new, old), running, kept
            )
            return (running, kept), y

        time = fnp.arange(steps.shape[0], dtype=lengths.dtype)
        (_, carry), outputs = lax.scan(step, (initial_carry, initial_carry), (steps, time))
        if self.reverse:
            outputs = tree_util.tree_map(lambda y: _flip_valid(y, lengths), outputs)
        return carry, outputs


def _lengths(seq_lengths, steps_shape) -> Any:
    """`seq_lengths` as int32 of the batch shape, clipped to [0, time]."""
    lengths = fnp.asarray(seq_lengths)
    batch_shape = tuple(steps_shape[1:-1])
    if not fnp.issubdtype(lengths.dtype, fnp.integer):
        raise TypeError(f"RNN: seq_lengths must be integers, got {lengths.dtype}")
    if not _broadcasts(tuple(lengths.shape), batch_shape):
        raise ValueError(
            f"RNN: seq_lengths of shape {tuple(lengths.shape)} does not match the batch shape "
            f"{batch_shape} of a sequence with time steps {steps_shape[0]}"
        )
    lengths = fnp.broadcast_to(lengths.astype(fnp.int32), batch_shape)
    return fnp.clip(lengths, 0, steps_shape[0])


def _broadcasts(shape: tuple, target: tuple) -> bool:
    if len(shape) > len(target):
        return False
    return all(a in (1, b) for a, b in zip(shape[::-1], target[::-1]))


def _expand(per_sequence, leaf):
    """`per_sequence` (batch shape) with trailing axes of size 1 up to `leaf`'s rank."""
    return per_sequence.reshape(per_sequence.shape + (1,) * (leaf.ndim - per_sequence.ndim))


def _flip_valid(steps, lengths):
    """Time-major `steps` with each sequence's first `length` steps reversed, and its padding
    reversed after them: step t reads step (length - 1 - t) mod time. The map is its own
    inverse, so it also puts outputs of the reversed reading back in place."""
    time = steps.shape[0]
    if time == 0:
        return steps
    t = fnp.arange(time, dtype=lengths.dtype).reshape((time,) + (1,) * lengths.ndim)
    source = (lengths - 1 - t) % time
    source = source.reshape(source.shape + (1,) * (steps.ndim - source.ndim))
    source = fnp.broadcast_to(source, steps.shape)
    return fnp.take_along_axis(steps, source, axis=0)


class Bidirectional(Module):
    """Two cells over one sequence, one forwards and one backwards; their outputs at each
    step are concatenated on the feature axis. Returns ((forward carry, backward carry),
    outputs); `initial_carry`, when given, is such a pair too. `seq_lengths` marks padding
    as RNN's does, so the backward cell starts at each sequence's last valid step."""

    forward: RNN
    backward: RNN

    def __init__(self, forward_cell: Module, backward_cell: Module, *, time_major: bool = False):
        self.forward = RNN(forward_cell, time_major=time_major)
        self.backward = RNN(backward_cell, time_major=time_major, reverse=True)

    def __call__(self, x, initial_carry=None, *, seq_lengths=None, key=None):
        forward_carry, backward_carry = initial_carry or (None, None)
        forward_carry, forward_outputs = self.forward(x, forward_carry, seq_lengths=seq_lengths)
        backward_carry, backward_outputs = self.backward(x, backward_carry, seq_lengths=seq_lengths)
        outputs = fnp.concatenate([forward_outputs, backward_outputs], axis=-1)
        return (forward_carry, backward_carry), outputs
