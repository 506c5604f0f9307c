"""funcgrad.optim.losses: the losses where Optax's users look for them (`optim.losses.X`,
as `optax.losses.X`). They live in funcgrad.nn.losses; these are the same functions."""

from funcgrad.nn.losses import *  # noqa: F403
from funcgrad.nn.losses import __all__  # noqa: F401
