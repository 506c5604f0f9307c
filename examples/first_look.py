"""A first look at funcgrad: NumPy-style arrays, gradients, and the program funcgrad stages."""

import funcgrad as fg
import funcgrad.numpy as fnp


def loss(w, x, y):
    prediction = fnp.tanh(x * w[0] + w[1])
    return fnp.mean((prediction - y) ** 2)


w = fnp.array([0.5, -0.25])
x = fnp.linspace(-1.0, 1.0, 5)
y = fnp.sin(x)
print("loss(w)      =", loss(w, x, y))
print("grad(loss)(w) =", fg.grad(loss)(w, x, y))
print("the staged program of the gradient:")
print(fg.make_jaxpr(fg.grad(loss))(w, x, y))
