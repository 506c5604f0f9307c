"""Pytrees drawn at random for the tree tests, and a recursive map over them to check against."""

import collections

from hypothesis import strategies as st

Point = collections.namedtuple("Point", ["x", "y"])


def tree_strategy(scalars):
    """Nested lists, tuples, dicts and namedtuples of `scalars` and None."""
    return st.recursive(
        st.none() | scalars,
        lambda children: st.one_of(
            st.lists(children, max_size=3),
            st.lists(children, max_size=3).map(tuple),
            st.dictionaries(st.text("abc", max_size=2), children, max_size=3),
            st.builds(Point, children, children),
        ),
        max_leaves=10,
    )


def ref_map(f, tree, *rest):
    """Recursive map over `tree`'s nodes (those `trees` draws); where `tree` has a leaf the
    others may have whole subtrees, which `f` receives."""
    if tree is None:
        return None
    if isinstance(tree, dict):
        return {k: ref_map(f, tree[k], *(r[k] for r in rest)) for k in sorted(tree)}
    if isinstance(tree, Point):
        return Point(*(ref_map(f, *xs) for xs in zip(tree, *rest)))
    if isinstance(tree, (list, tuple)):
        return type(tree)(ref_map(f, *xs) for xs in zip(tree, *rest))
    return f(tree, *rest)
