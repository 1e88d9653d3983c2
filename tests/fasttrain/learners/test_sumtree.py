"""SumTree: proportional draws, zero leaves never drawn, totals and minima after repeated writes."""

import math

import pytest
import torch

from fasttrain.learners.sumtree import SumTree


def filled(values) -> SumTree:
    values = torch.as_tensor(values, dtype=torch.float64)
    tree = SumTree(len(values))
    tree.update(torch.arange(len(values)), values)
    return tree


def test_draws_leaves_in_proportion_to_their_values():
    # 13 leaves (16 with padding), values over four orders of magnitude, zeros between them
    values = torch.tensor(
        [0.0, 5.0, 0.01, 100.0, 0.0, 1.0, 3.0, 0.5, 20.0, 0.0, 7.0, 0.2, 2.0], dtype=torch.float64
    )
    tree = filled(values)
    draws = 200_000
    u = torch.rand(draws, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    counts = torch.bincount(tree.sample(u * tree.total()), minlength=16).double()
    assert counts[13:].sum() == 0  # padding leaves
    assert counts[:13][values == 0].sum() == 0
    p = values / values.sum()
    sigma = (draws * p * (1 - p)).sqrt()
    assert torch.all((counts[:13] - draws * p).abs() <= 5 * sigma), (counts[:13], draws * p)


def test_zero_leaves_are_never_drawn_at_the_edges():
    tree = filled([0.0, 0.0, 3.0, 0.0, 1.0, 0.0, 0.0])  # 7 leaves, 8 with padding
    total = tree.total()
    assert total == 4.0
    u = [0.0, 2.5, 3.0 - 1e-12, 3.0, 3.5, 4.0, math.nextafter(4.0, 5.0), 1e9]
    # u = 0 skips the leading zeros; u >= total (rounding can get there) stays on the last
    # positive leaf instead of running on into the zeros and the padding on the right
    assert tree.sample(torch.tensor(u, dtype=torch.float64)).tolist() == [2, 2, 2, 4, 4, 4, 4, 4]


@pytest.mark.parametrize("capacity", [1, 2, 3, 16, 17, 1000])
def test_totals_minima_and_inner_nodes_after_updates_with_repeated_indices(capacity):
    generator = torch.Generator().manual_seed(capacity)
    tree = SumTree(capacity)
    reference = torch.zeros(capacity, dtype=torch.float64)
    repeats = 0
    for _ in range(200):
        indices = torch.randint(0, capacity, (32,), generator=generator)
        values = torch.rand(32, generator=generator, dtype=torch.float64) * 10 ** torch.randint(
            -3, 4, (32,), generator=generator
        )
        values[torch.rand(32, generator=generator) < 0.2] = 0.0
        repeats += len(indices) - len(indices.unique())
        tree.update(indices, values)
        reference[indices] = values  # the same rule for a repeated index
        assert torch.equal(tree.values(), reference)
        assert torch.allclose(tree.total(), reference.sum(), rtol=1e-12, atol=0)
        positive = reference[reference > 0]
        assert tree.min() == (positive.min() if len(positive) else math.inf)
    assert repeats > 0 or capacity == 1000  # the small trees saw repeated indices
    # every inner node is exactly left + right (min-tree: min), so a rebuild gives the same bits
    P = tree.num_leaves
    assert torch.equal(tree.sums[1:P], tree.sums[2 : 2 * P : 2] + tree.sums[3 : 2 * P : 2])
    rebuilt = SumTree(capacity)
    rebuilt.rebuild(reference)
    assert torch.equal(rebuilt.sums, tree.sums) and torch.equal(rebuilt.mins, tree.mins)


def test_update_range_equals_update_with_indices():
    generator = torch.Generator().manual_seed(1)
    a, b = SumTree(100), SumTree(100)
    for start, length in [(0, 100), (37, 20), (99, 1), (5, 64)]:
        values = torch.rand(length, generator=generator, dtype=torch.float64)
        values[::3] = 0.0
        a.update_range(start, values)
        b.update(torch.arange(start, start + length), values)
        assert torch.equal(a.sums, b.sums) and torch.equal(a.mins, b.mins)
