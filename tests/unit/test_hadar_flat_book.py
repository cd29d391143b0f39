"""``pricing._cheapest`` on a flat book (one price for every GPU, as the whole-gang rounding and the
fill pass use) answers directly; the answer must be the general merge's, key order and cost included.
Passing ``free`` (the same counts) takes the general merge, which is the reference."""

from __future__ import annotations

import random

import numpy as np
import pytest

from hadar.policies.hadar.pricing import PriceBook, _cheapest


@pytest.mark.parametrize("seed", range(4))
def test_flat_book_answers_as_the_merge(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(500):
        k = rng.randint(1, 4)
        cap = np.array([rng.randint(0, 12) for _ in range(k)])
        book = PriceBook(cap, *(2 * [rng.choice([1.0, 0.3, 2.5, 1e-300])]), rng.choice([0.0, 1.0]))
        book.free = np.array([rng.randint(0, int(c)) for c in cap])
        allowed = [r for r in range(k) if rng.random() < 0.8]
        prefer = np.array([rng.choice([1.0, 2.0, 3.0]) for _ in range(k)]) if rng.random() < 0.5 else None
        w = rng.randint(1, 9)
        flat = _cheapest(book, allowed, w, None, prefer)
        merged = _cheapest(book, allowed, w, book.free.copy(), prefer)
        assert flat == merged
        assert flat is None or list(flat[0]) == list(merged[0])  # the same key order
