"""Recommendation: an autoencoder (Gavel's Recoder family) on synthetic implicit feedback.

Users and items have seeded low-rank taste vectors; each user interacts with
``PER_USER`` items drawn from a softmax of their affinities. Held-out users
hide a fifth of their items from the input; metric: recall@10 of the
hidden items among the unseen ones (higher is better; random ~ 10/190).
"""

from __future__ import annotations

from typing import Any

from hadar.job import Context
from hadar.runtime.workloads.base import Workload, train_workload

USERS, TEST_USERS, ITEMS, RANK, PER_USER = 2048, 256, 200, 6, 24


class Recoder(Workload):
    name = "Recoder (batch size 64)"
    alias = "recoder"
    family = "recommendation"
    mirrors = "Recommendation (batch size 512)"
    batch_size = 64
    metric = "recall@10"
    higher_is_better = True
    lr = 3e-3

    def network(self, nn: Any) -> Any:
        return nn.Sequential(nn.Dropout(0.2), nn.Linear(ITEMS, 64), nn.Tanh(), nn.Linear(64, ITEMS))

    def make_data(self, seed: int) -> tuple[Any, Any]:
        import torch

        g = torch.Generator().manual_seed(seed)
        n = USERS + TEST_USERS
        users = torch.randn(n, RANK, generator=g)
        items = torch.randn(ITEMS, RANK, generator=g)
        logits = 2.0 * users @ items.T / RANK ** 0.5
        picked = torch.multinomial(torch.softmax(logits, 1), PER_USER, generator=g)
        m = torch.zeros(n, ITEMS)
        m.scatter_(1, picked, 1.0)
        train, test = m[:USERS], m[USERS:]
        hide = torch.zeros_like(test)
        for u in range(TEST_USERS):
            pos = test[u].nonzero().squeeze(1)
            cut = pos[torch.randperm(len(pos), generator=g)[: len(pos) // 5]]
            hide[u, cut] = 1.0
        return train, (test - hide, hide)

    def loss(self, model: Any, batch: Any) -> Any:
        import torch

        return torch.nn.functional.binary_cross_entropy_with_logits(model(batch), batch)

    def evaluate(self, model: Any, test: Any) -> float:
        import torch

        visible, hidden = test
        model.eval()
        with torch.no_grad():
            scores = model(visible).masked_fill(visible > 0, float("-inf"))
            top = scores.topk(10, dim=1).indices
            hits = hidden.gather(1, top).sum(1)
            return float((hits / hidden.sum(1).clamp(min=1)).mean())


def train(ctx: Context) -> None:
    """The ``recoder`` job: ``entrypoint: hadar.runtime.workloads.recommendation:train``."""
    train_workload(Recoder(), ctx)
