"""The loop kernels of a Fourier transform's passes (`funcgrad.lax.fft_passes`).

A radix pass loads, at each position, its r points, multiplies all but the first by their
twiddle factors, combines them by a small DFT written out in scalar arithmetic, and stores the
r results. Its innermost loop runs over the classes and columns, which are contiguous in
memory on both sides, so the loop vectorizes with the twiddle factors fixed; where there are
too few of them for a vector, over the positions, with the classes and columns written out in
its body (the twiddle tables lie along the positions).

Multiplications by 1, -1 and ±i are left out or done as negations and swaps, and a point at
the transform's first position is never multiplied by its twiddle (which is exactly 1): so a
NaN or infinite part stays in its own part where the reference FFT keeps it there, instead of
reaching the other part through a product with 0.
"""

from __future__ import annotations

import math

from funcgrad.compiler import kernel_ir as K
from funcgrad.compiler.fusion import KernelBuilder, root_rules
from funcgrad.compiler.kernel_ir import INDEX, Expr
from funcgrad.ir import JaxprEqn
from funcgrad.lax.fft_passes import (
    fft_radix_pass_p,
    fft_real_inverse_pass_p,
    fft_real_pass_p,
)

Complex = tuple[Expr, Expr]

# Classes times columns enough for a pass's inner loop to run over them (a vector's lanes).
_LANES = 8


def _neg(x: Expr) -> Expr:
    return K.unary("neg", x)


def _add(a: Complex, b: Complex) -> Complex:
    return a[0] + b[0], a[1] + b[1]


def _sub(a: Complex, b: Complex) -> Complex:
    return a[0] - b[0], a[1] - b[1]


def _mul(a: Complex, b: Complex) -> Complex:
    return a[0] * b[0] - a[1] * b[1], a[0] * b[1] + a[1] * b[0]


def _times(a: Complex, turns: int, of: int) -> Complex:
    """`a` times exp(2 pi i turns / of), exactly where that is 1, -1 or ±i."""
    if (4 * turns) % of == 0:
        quadrant = (4 * turns) // of % 4
        return [a, (_neg(a[1]), a[0]), (_neg(a[0]), _neg(a[1])), (a[1], _neg(a[0]))][quadrant]
    angle = 2 * math.pi * turns / of
    dtype = a[0].dtype
    return _mul(a, (K.const(math.cos(angle), dtype), K.const(math.sin(angle), dtype)))


def _smallest_factor(n: int) -> int:
    return next(d for d in range(2, n + 1) if n % d == 0)


def small_dft(points: list[Complex], sign: int) -> list[Complex]:
    """The DFT of `points` (exp(sign 2 pi i j k / r)) in scalar arithmetic: split by the
    smallest prime factor p of r into p transforms of r / p points (decimation in time), and
    a prime length as the sums and differences of points paired with their mirror images."""
    r = len(points)
    if r == 1:
        return list(points)
    p = _smallest_factor(r)
    if p == r:
        return _prime_dft(points, sign)
    m = r // p
    parts = [small_dft(points[q::p], sign) for q in range(p)]
    out: list = [None] * r
    for k2 in range(m):
        column = [_times(parts[q][k2], sign * q * k2, r) for q in range(p)]
        for k1, value in enumerate(_prime_dft(column, sign)):
            out[k2 + m * k1] = value
    return out


def _prime_dft(points: list[Complex], sign: int) -> list[Complex]:
    r = len(points)
    if r == 2:
        return [_add(points[0], points[1]), _sub(points[0], points[1])]
    dtype = points[0][0].dtype
    half = (r - 1) // 2
    sums = [_add(points[j], points[r - j]) for j in range(1, half + 1)]
    differences = [_sub(points[j], points[r - j]) for j in range(1, half + 1)]
    total = points[0]
    for s in sums:
        total = _add(total, s)
    out = [total]
    for k in range(1, r):
        re, im = points[0]
        for j in range(1, half + 1):
            angle = 2 * math.pi * ((j * k) % r) / r
            cos = K.const(math.cos(angle), dtype)
            sin = K.const(sign * math.sin(angle), dtype)
            s, d = sums[j - 1], differences[j - 1]
            re = re + s[0] * cos - d[1] * sin
            im = im + s[1] * cos + d[0] * sin
        out.append((re, im))
    return out


def _nest(sizes: list[int], body) -> list:
    """Loops over `sizes`, outermost first, leaving out those of one iteration (their index is
    the constant 0): the first loop that remains is the one threads split. With a size of 0
    there is nothing to do (leaving its loop out ran the body once, and wrote the first
    butterfly's points past the end of an empty batch's buffer)."""
    if 0 in sizes:
        return []
    indices = [K.fresh_index() if size > 1 else K.const(0, INDEX) for size in sizes]
    statements = body(*indices)
    for index, size in reversed(list(zip(indices, sizes))):
        if size > 1:
            statements = [K.Loop(index, 0, size, statements)]
    return statements


def _index(value: int) -> Expr:
    return K.const(value, INDEX)


def _radix_pass(builder: KernelBuilder, eqn: JaxprEqn, outputs: list) -> list:
    """With fewer than _LANES classes and columns together, the loop over them would be too
    short to vectorize: they are written out in the body instead, and the loop over positions
    (whose points lie r S B apart, a pattern the vectorizer interleaves) is the inner one."""
    re, im, twiddle_re, twiddle_im = eqn.invars
    radix, stride = eqn.params["radix"], eqn.params["stride"]
    sign = 1 if eqn.params["inverse"] else -1
    groups, n, columns = re.aval.shape
    length = n // (radix * stride)
    scale, dtype = eqn.params["scale"], re.aval.dtype
    store = _parts_stored(outputs)

    def butterflies(g, k2, c, b, twiddles):
        points = []
        for j in range(radix):
            at = [g, k2 * _index(radix * stride) + _index(j * stride) + c, b]
            point = builder.element(re, at), builder.element(im, at)
            if j and twiddles:
                first, twiddle = twiddles[0], twiddles[j]
                turned = _mul(point, twiddle)
                point = K.select(first, point[0], turned[0]), K.select(first, point[1], turned[1])
            points.append(point)
        stores = []
        for k1, value in enumerate(small_dft(points, sign)):
            if scale != 1:
                value = value[0] * K.const(scale, dtype), value[1] * K.const(scale, dtype)
            position = k2 + _index(length * k1)
            offset = ((g * _index(n) + position * _index(stride) + c) * _index(columns)) + b
            stores += store(offset, value)
        return stores

    def twiddles_at(k2) -> list:
        if length == 1:
            return []
        where = [[_index(j - 1), k2] for j in range(1, radix)]
        return [K.binary("eq", k2, _index(0))] + [
            (builder.element(twiddle_re, w), builder.element(twiddle_im, w)) for w in where
        ]

    # Every iteration writes its own r points and reads only the operand.
    builder.independent_outer = True
    if stride * columns >= _LANES:
        return _nest(
            [groups, length, stride, columns],
            lambda g, k2, c, b: butterflies(g, k2, c, b, twiddles_at(k2)),
        )

    def unrolled(g, k2):
        twiddles = twiddles_at(k2)
        return [
            statement
            for c in range(stride)
            for b in range(columns)
            for statement in butterflies(g, k2, _index(c), _index(b), twiddles)
        ]

    return _nest([groups, length], unrolled)


def _parts_stored(outputs: list):
    """Stores of a complex value at an element offset: into two buffers of parts, or one
    buffer holding them interleaved."""
    if len(outputs) == 2:
        out_re, out_im = outputs
        return lambda offset, value: [
            K.Store(out_re, offset, value[0]),
            K.Store(out_im, offset, value[1]),
        ]
    (out,) = outputs

    def interleaved(offset, value):
        at = offset * _index(2)
        return [K.Store(out, at, value[0]), K.Store(out, at + _index(1), value[1])]

    return interleaved


def _real_pass(builder: KernelBuilder, eqn: JaxprEqn, outputs: list) -> list:
    re, im, twiddle_re, twiddle_im = eqn.invars
    groups, half = re.aval.shape
    store = _parts_stored(outputs)

    def point(g, k):
        return builder.element(re, [g, k]), builder.element(im, [g, k])

    def row(g):
        base = g * _index(half + 1)
        first = point(g, _index(0))
        ends = store(base, (first[0] + first[1], K.const(0, first[0].dtype)))
        ends += store(base + _index(half), (first[0] - first[1], K.const(0, first[0].dtype)))
        k = K.fresh_index()
        ahead, mirror = point(g, k), point(g, _index(half) - k)
        conjugate = mirror[0], _neg(mirror[1])
        total, difference = _add(ahead, conjugate), _sub(ahead, conjugate)
        factor = builder.element(twiddle_re, [k]), builder.element(twiddle_im, [k])
        two = K.const(0.5, total[0].dtype)
        value = _add((total[0] * two, total[1] * two), _mul(factor, difference))
        return ends + [K.Loop(k, 1, half, store(base + k, value))]

    if groups == 1:
        return row(_index(0))
    g = K.fresh_index()
    builder.independent_outer = True
    return [K.Loop(g, 0, groups, row(g))]


def _real_inverse_pass(builder: KernelBuilder, eqn: JaxprEqn, outputs: list) -> list:
    """Z[k] = (s + f[k]) X[k] + (s - f[k]) conj X[h-k], in two loops: the first stores the
    terms of X[k], the second adds those of X[j] at h - j. (One loop reading X[h-k] read the
    caller's interleaved parts backwards, and tripped an assertion in LLVM's loop vectorizer,
    its two cost models disagreeing, for 31 and 33 stored frequencies in float64.)"""
    re, im, twiddle_re, twiddle_im = eqn.invars
    groups, stored = re.aval.shape
    half = stored - 1
    dtype = re.aval.dtype
    scale = K.const(eqn.params["scale"], dtype)
    out_re, out_im = outputs

    def point(g, k, real_at):
        """X[k], its imaginary part 0 where `real_at` holds (the real frequencies 0 and h)."""
        imaginary = builder.element(im, [g, k])
        return builder.element(re, [g, k]), K.select(real_at, K.const(0, dtype), imaginary)

    def factor(k):
        return builder.element(twiddle_re, [k]), builder.element(twiddle_im, [k])

    def row(g):
        base = g * _index(half)
        k, j = K.fresh_index(), K.fresh_index()
        f = factor(k)
        ahead = _mul((scale + f[0], f[1]), point(g, k, K.binary("eq", k, _index(0))))
        mirror_at = _index(half) - j
        x = point(g, j, K.binary("eq", j, _index(half)))
        f = factor(mirror_at)
        behind = _mul((scale - f[0], _neg(f[1])), (x[0], _neg(x[1])))
        offset = base + mirror_at
        earlier = K.Load(out_re, offset), K.Load(out_im, offset)
        total = _add(earlier, behind)
        return [
            K.Loop(
                k,
                0,
                half,
                [K.Store(out_re, base + k, ahead[0]), K.Store(out_im, base + k, ahead[1])],
            ),
            K.Loop(
                j, 1, stored, [K.Store(out_re, offset, total[0]), K.Store(out_im, offset, total[1])]
            ),
        ]

    if groups == 1:
        return row(_index(0))
    g = K.fresh_index()
    builder.independent_outer = True  # each row writes, and reads back, its own outputs only
    return [K.Loop(g, 0, groups, row(g))]


root_rules[fft_radix_pass_p] = _radix_pass
root_rules[fft_real_pass_p] = _real_pass
root_rules[fft_real_inverse_pass_p] = _real_inverse_pass
