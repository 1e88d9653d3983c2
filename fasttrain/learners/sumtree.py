"""A sum tree with a min tree beside it: proportional sampling and updates in O(batch * log n).

Both trees are flat tensors of ``2 * P`` nodes, ``P`` the capacity rounded up to a power of two:
node 1 is the root, node ``i`` has children ``2i`` and ``2i + 1``, and leaf ``j`` is node
``P + j`` (node 0 and the leaves past the capacity are padding: 0 in the sum tree, inf in the
min tree). An update writes the leaves, then recomputes their ancestors level by level from the
children as they are now, never by adding a delta, so every inner node is exactly
``left + right``: the tree is a pure function of its leaves (rebuilding it from the leaves gives
the same bits, which is what resume needs) and a leaf written twice in one batch counts once.
Sums are float64 so millions of updates cannot drift. Every step is a whole-batch tensor op on
the trees' device; nothing reads a value back to the host.
"""

from __future__ import annotations

import math

import torch


def _padded(capacity: int) -> int:
    """``capacity`` rounded up to a power of two (at least 1)."""
    return 1 << max(capacity - 1, 0).bit_length()


class SumTree:
    """Non-negative leaf values ``(capacity,)``: their total, smallest positive one, and draws."""

    def __init__(self, capacity: int, device=None):
        self.capacity = capacity
        self.num_leaves = P = _padded(capacity)
        self.depth = P.bit_length() - 1  # levels between the root and the leaves
        self.sums = torch.zeros(2 * P, dtype=torch.float64, device=device)  # (2P,)
        # (2P,) smallest positive leaf below each node, inf where there is none
        self.mins = torch.full((2 * P,), math.inf, dtype=torch.float64, device=device)
        # children of node i: left_sums[i] is node 2i, right_sums[i] node 2i + 1 (views)
        self.left_sums, self.right_sums = self.sums[0::2], self.sums[1::2]
        self.left_mins, self.right_mins = self.mins[0::2], self.mins[1::2]
        self.shifts = torch.arange(1, self.depth + 1, device=device)[:, None]  # (depth, 1)

    @staticmethod
    def nbytes(capacity: int) -> int:
        """Memory the two trees over ``capacity`` leaves take."""
        return 2 * 2 * _padded(capacity) * 8

    def values(self) -> torch.Tensor:
        """The leaves ``(capacity,)``, a view."""
        return self.sums[self.num_leaves : self.num_leaves + self.capacity]

    def total(self) -> torch.Tensor:
        """Sum of the leaves, a 0-d tensor."""
        return self.sums[1].clone()

    def min(self) -> torch.Tensor:
        """Smallest positive leaf (inf if none is positive), a 0-d tensor."""
        return self.mins[1].clone()

    def update(self, indices: torch.Tensor, values: torch.Tensor) -> None:
        """Set leaves ``indices`` to ``values``; a repeated index keeps one value, like indexing."""
        node = indices + self.num_leaves
        self.sums[node] = values.to(torch.float64)
        written = self.sums[node]  # the value each repeated leaf kept, for the min tree too
        self.mins[node] = torch.where(written > 0, written, math.inf)
        for parent in node >> self.shifts:  # (depth, B): the ancestors, one level per row
            left = self.left_sums.index_select(0, parent)
            right = self.right_sums.index_select(0, parent)
            self.sums.index_copy_(0, parent, left + right)
            left = self.left_mins.index_select(0, parent)
            right = self.right_mins.index_select(0, parent)
            self.mins.index_copy_(0, parent, torch.minimum(left, right))

    def update_range(self, start: int, values: torch.Tensor) -> None:
        """Set the leaves from ``start`` on to ``values``: ``update`` over slices."""
        lo, hi = self.num_leaves + start, self.num_leaves + start + len(values)
        values = values.to(torch.float64)
        self.sums[lo:hi] = values
        self.mins[lo:hi] = torch.where(values > 0, values, math.inf)
        for _ in range(self.depth):
            lo, hi = lo >> 1, (hi + 1) >> 1  # the parents of nodes lo .. hi - 1
            # the same left + right as update's, so both give the same bits
            torch.add(self.left_sums[lo:hi], self.right_sums[lo:hi], out=self.sums[lo:hi])
            torch.minimum(self.left_mins[lo:hi], self.right_mins[lo:hi], out=self.mins[lo:hi])

    def rebuild(self, values: torch.Tensor) -> None:
        """Set every leaf from ``values`` ``(capacity,)`` and recompute all inner nodes."""
        self.update_range(0, values)

    def sample(self, u: torch.Tensor) -> torch.Tensor:
        """Leaf indices ``(B,)`` for float64 uniforms ``u`` ``(B,)`` in ``[0, total())``.

        Leaf ``j`` is drawn for ``u`` in ``[sum of the leaves before j, that + leaf j)``, so a
        uniform ``u`` draws it with probability ``leaf j / total``; zero leaves are never drawn.
        """
        node = torch.ones(u.shape, dtype=torch.int64, device=u.device)
        for _ in range(self.depth):
            left = self.left_sums.index_select(0, node)
            # rounding can leave u at or just past a subtree's sum: never step into an empty one
            go_right = (u >= left) & (self.right_sums.index_select(0, node) > 0)
            u = u - left * go_right
            node = torch.add(go_right, node, alpha=2)  # 2 * node + go_right in one op
        return node - self.num_leaves
