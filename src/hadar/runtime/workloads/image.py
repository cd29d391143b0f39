"""Image classification: a small ResNet on scikit-learn's bundled 8x8 digits."""

from __future__ import annotations

from typing import Any

from hadar.job import Context
from hadar.runtime.workloads.base import Workload, train_workload


def _block(torch: Any, cin: int, cout: int, stride: int) -> Any:
    nn = torch.nn

    class Basic(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.b1 = nn.BatchNorm2d(cout)
            self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.b2 = nn.BatchNorm2d(cout)
            self.skip = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                         if stride != 1 or cin != cout else nn.Identity())

        def forward(self, x: Any) -> Any:
            y = torch.relu(self.b1(self.c1(x)))
            return torch.relu(self.b2(self.c2(y)) + self.skip(x))

    return Basic()


class DigitsResNet(Workload):
    """ResNet-style CNN (stem + 3 residual blocks) on 1,797 8x8 digits; metric: test accuracy."""

    name = "ResNet (digits, batch size 32)"
    alias = "resnet"
    family = "image"
    mirrors = "ResNet-18 (batch size 32)"
    batch_size = 32
    metric = "accuracy"
    higher_is_better = True
    lr = 3e-3

    def network(self, nn: Any) -> Any:
        import torch

        return nn.Sequential(
            nn.Conv2d(1, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
            _block(torch, 16, 16, 1), _block(torch, 16, 32, 2), _block(torch, 32, 32, 1),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10),
        )

    def make_data(self, seed: int) -> tuple[Any, Any]:
        import torch
        from sklearn.datasets import load_digits

        d = load_digits()
        x = torch.tensor(d.images, dtype=torch.float32).unsqueeze(1) / 16.0
        y = torch.tensor(d.target, dtype=torch.long)
        perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(12345))  # fixed split for all jobs
        tr, te = perm[:1497], perm[1497:]
        return (x[tr], y[tr]), (x[te], y[te])

    def loss(self, model: Any, batch: Any) -> Any:
        import torch

        x, y = batch
        return torch.nn.functional.cross_entropy(model(x), y)

    def evaluate(self, model: Any, test: Any) -> float:
        import torch

        x, y = test
        model.eval()
        with torch.no_grad():
            return float((model(x).argmax(1) == y).float().mean())


def train(ctx: Context) -> None:
    """The ``resnet`` job: ``entrypoint: hadar.runtime.workloads.image:train``."""
    train_workload(DigitsResNet(), ctx)
