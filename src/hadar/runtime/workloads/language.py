"""Language modelling on a synthetic sparse Markov language: an LSTM and a Transformer.

The language: ``vocab`` tokens; each (previous two tokens) context has a few
likely successors drawn from a seeded Dirichlet, so a model that learns the
order-2 structure reaches a perplexity of a few units, far below the
untrained ``~vocab``. Metric: held-out perplexity (lower is better).
"""

from __future__ import annotations

import math
from typing import Any

from hadar.job import Context
from hadar.runtime.workloads.base import Workload, train_workload

VOCAB = 48
SEQ_LEN = 33  # 32 predictions per sequence
TRAIN_SEQS, TEST_SEQS = 2048, 256
SUCCESSORS = 4


def markov_corpus(seed: int) -> tuple[Any, Any]:
    import torch

    g = torch.Generator().manual_seed(seed)
    n = TRAIN_SEQS + TEST_SEQS
    nxt = torch.randint(0, VOCAB, (VOCAB, VOCAB, SUCCESSORS), generator=g)
    probs = torch.distributions.Dirichlet(torch.ones(SUCCESSORS)).sample((VOCAB, VOCAB))  # global RNG: seed it
    seqs = torch.empty(n, SEQ_LEN, dtype=torch.long)
    seqs[:, :2] = torch.randint(0, VOCAB, (n, 2), generator=g)
    for t in range(2, SEQ_LEN):
        a, b = seqs[:, t - 2], seqs[:, t - 1]
        choice = torch.multinomial(probs[a, b], 1, generator=g).squeeze(1)
        seqs[:, t] = nxt[a, b, choice]
    return seqs[:TRAIN_SEQS], seqs[TRAIN_SEQS:]


class _LM(Workload):
    metric = "perplexity"
    higher_is_better = False
    family = "language"

    def make_data(self, seed: int) -> tuple[Any, Any]:
        import torch

        torch.manual_seed(seed)  # the Dirichlet draw uses the global generator
        return markov_corpus(seed)

    def loss(self, model: Any, batch: Any) -> Any:
        import torch

        logits = model(batch[:, :-1])
        return torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), batch[:, 1:].reshape(-1))

    def evaluate(self, model: Any, test: Any) -> float:
        import torch

        model.eval()
        with torch.no_grad():
            return float(math.exp(float(self.loss(model, test))))


class LstmLM(_LM):
    """2-layer LSTM language model (Gavel's LM family)."""

    name = "LSTM-LM (batch size 20)"
    alias = "lstm"
    family = "lstm-lm"
    mirrors = "LM (batch size 20)"
    batch_size = 20
    lr = 1e-2

    def network(self, nn: Any) -> Any:

        class Net(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.emb = nn.Embedding(VOCAB, 32)
                self.rnn = nn.LSTM(32, 64, num_layers=2, batch_first=True)
                self.out = nn.Linear(64, VOCAB)

            def forward(self, x: Any) -> Any:
                return self.out(self.rnn(self.emb(x))[0])

        return Net()


class TinyTransformer(_LM):
    """2-layer causal Transformer language model (Gavel's Transformer family)."""

    name = "Transformer (batch size 16)"
    alias = "transformer"
    family = "transformer"
    mirrors = "Transformer (batch size 16)"
    batch_size = 16
    lr = 3e-3

    def network(self, nn: Any) -> Any:
        import torch


        class Net(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.emb = nn.Embedding(VOCAB, 64)
                self.pos = nn.Parameter(torch.randn(SEQ_LEN, 64) * 0.02)
                layer = nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
                self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
                self.out = nn.Linear(64, VOCAB)
                self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(SEQ_LEN - 1),
                                     persistent=False)

            def forward(self, x: Any) -> Any:
                n = x.shape[1]
                h = self.emb(x) + self.pos[:n]
                return self.out(self.enc(h, mask=self.mask[:n, :n], is_causal=True))

        return Net()


def train_lstm(ctx: Context) -> None:
    """The ``lstm`` job: ``entrypoint: hadar.runtime.workloads.language:train_lstm``."""
    train_workload(LstmLM(), ctx)


def train_transformer(ctx: Context) -> None:
    """The ``transformer`` job: ``entrypoint: hadar.runtime.workloads.language:train_transformer``."""
    train_workload(TinyTransformer(), ctx)
