"""A first look at funcgrad: NumPy-style arrays, and the program funcgrad stages from Python."""

import funcgrad as fg
import funcgrad.numpy as fnp


def predict(w, x):
    return fnp.tanh(x * w[0] + w[1])


w = fnp.array([0.5, -0.25])
x = fnp.linspace(-1.0, 1.0, 5) if hasattr(fnp, "linspace") else fnp.array([-1.0, 0.0, 1.0])
print("predict(w, x) =", predict(w, x))
print("the staged program:")
print(fg.make_jaxpr(predict)(w, x))
