"""A character-level transformer language model, trained on six of Shakespeare's sonnets.

    python examples/char_transformer.py [--steps 600] [--seed 0]

The text (public domain; notebooks/data/sonnets.txt) is modelled one character at a time by
a small decoder-only transformer built from funcgrad.nn modules: token and position
embeddings, pre-norm blocks of causal multi-head self-attention and an MLP, and a linear
read-out. Adam trains it on random windows; the loss, in nats per character, is printed beside
the unigram entropy of the text (what a model that ignores context could reach), and the
model writes a short sample at the end. About a minute here.
"""

from __future__ import annotations

import argparse
import math
import pathlib
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

import funcgrad as fg
from funcgrad import nn, optim

TEXT = pathlib.Path(__file__).resolve().parent.parent / "notebooks" / "data" / "sonnets.txt"


class Block(nn.Module):
    """x + attention(norm(x)), then x + mlp(norm(x))."""

    attention_norm: nn.LayerNorm
    attention: nn.MultiHeadAttention
    mlp_norm: nn.LayerNorm
    mlp: nn.MLP

    def __init__(self, width: int, heads: int, *, key):
        attention_key, mlp_key = fg.random.split(key)
        self.attention_norm, self.mlp_norm = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attention = nn.MultiHeadAttention(heads, width, key=attention_key)
        self.mlp = nn.MLP(width, width, 4 * width, 1, activation=nn.gelu, key=mlp_key)

    def __call__(self, x):
        x = x + self.attention(self.attention_norm(x), causal=True)
        return x + self.mlp(self.mlp_norm(x))


class Transformer(nn.Module):
    tokens: nn.Embedding
    positions: Any
    blocks: list
    norm: nn.LayerNorm
    readout: nn.Linear

    def __init__(self, vocabulary: int, context: int, width: int, depth: int, heads: int, *, key):
        keys = fg.random.split(key, depth + 3)
        self.tokens = nn.Embedding(
            vocabulary, width, key=keys[0], init=nn.initializers.normal(0.02)
        )
        self.positions = nn.initializers.normal(0.02)(keys[1], (context, width))
        self.blocks = [Block(width, heads, key=k) for k in keys[3:]]
        self.norm = nn.LayerNorm(width)
        self.readout = nn.Linear(width, vocabulary, key=keys[2])

    def __call__(self, ids):
        """(batch, length) character ids -> (batch, length, vocabulary) next-character logits."""
        x = self.tokens(ids) + self.positions[: ids.shape[-1]]
        for block in self.blocks:
            x = block(x)
        return self.readout(self.norm(x))


def unigram_entropy(text: str) -> float:
    counts = np.array(list(Counter(text).values()), np.float64)
    p = counts / counts.sum()
    return float(-(p * np.log(p)).sum())


def loss_fn(model, windows):
    """Mean cross-entropy (nats per character) of predicting each next character."""
    logits = model(windows[:, :-1])
    return nn.losses.softmax_cross_entropy_with_integer_labels(logits, windows[:, 1:]).mean()


def sample(model, prompt: np.ndarray, length: int, context: int, key) -> np.ndarray:
    """`length` characters drawn one at a time, each from the model's distribution given the
    last `context` characters (a fixed-size window, so the jitted call compiles once); the
    prompt holds at least `context` characters."""
    window = np.array(prompt[-context:], np.int32)

    @fg.jit
    def next_id(model, window, key):
        return fg.random.categorical(key, model(window[None])[0, -1] / 0.8)

    out = []
    for k in fg.random.split(key, length):
        token = int(next_id(model, window, k))
        out.append(token)
        window = np.roll(window, -1)
        window[-1] = token
    return np.array(out)


def main(argv: Sequence[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--context", type=int, default=64)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--depth", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sample-length", type=int, default=200)
    args = parser.parse_args(argv)

    text = TEXT.read_text()
    alphabet = sorted(set(text))
    ids = np.array([alphabet.index(c) for c in text], np.int32)
    model_key, batch_key, sample_key = fg.random.split(fg.random.PRNGKey(args.seed), 3)
    model = Transformer(len(alphabet), args.context, args.width, args.depth, heads=4, key=model_key)
    optimizer = optim.adamw(
        optim.warmup_cosine_decay_schedule(0.0, 3e-3, 50, args.steps), weight_decay=1e-2
    )
    state = optimizer.init(model)

    @fg.jit
    def step(model, state, windows):
        loss, grads = fg.value_and_grad(loss_fn)(model, windows)
        updates, state = optimizer.update(grads, state, model)
        return optim.apply_updates(model, updates), state, loss

    entropy = unigram_entropy(text)
    offsets = np.arange(args.context + 1)
    print(
        f"{len(text)} characters, {len(alphabet)} distinct; unigram entropy {entropy:.3f} nats/char"
    )
    losses = []
    for i in range(args.steps):
        starts = np.asarray(
            fg.random.randint(
                fg.random.fold_in(batch_key, i), (args.batch_size,), 0, len(ids) - args.context - 1
            )
        )
        model, state, loss = step(model, state, ids[starts[:, None] + offsets])
        losses.append(float(loss))
        if (i + 1) % max(args.steps // 6, 1) == 0:
            recent = float(np.mean(losses[-20:]))
            print(f"step {i + 1:5d}  loss {recent:.3f} nats/char  (unigram entropy {entropy:.3f})")
    final = float(np.mean(losses[-20:]))
    print(
        f"final loss {final:.3f} nats/char vs unigram entropy {entropy:.3f} "
        f"(perplexity {math.exp(final):.2f} vs {math.exp(entropy):.2f})"
    )
    if args.sample_length:
        drawn = sample(model, ids[: args.context], args.sample_length, args.context, sample_key)
        print("sample:")
        print(text[: args.context] + "".join(alphabet[t] for t in drawn))
    return {"loss": final, "unigram_entropy": entropy}


if __name__ == "__main__":
    main()
