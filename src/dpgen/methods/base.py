"""`PrivateGenerator`: the base class every method (private or not) shares."""
from __future__ import annotations

import lightning.pytorch as pl
import torch
from torch import nn

from dpgen.nn.generator import ConditionalImageGenerator, ConditionalTableGenerator


class PrivateGenerator(pl.LightningModule):
    """A conditional generator trained with manual optimization.

    Contract used by the callbacks and the CLI:
      - `generator`: the `nn.Module` that is released (snapshot / restored by `PrivacyBudget`);
      - `ledger`: the `PrivacyLedger` every private release is written to (None for a non-private method);
      - `step_cost_bound()`: worst-case RDP of the next step per bound, or None when unknown;
      - `sample(n, labels)`: `(x, y)` synthetic records on the CPU.
    """

    def __init__(self, shape: tuple[int, ...], num_classes: int, kind: str, z_dim: int = 100,
                 generator: dict | None = None, class_probs: list[float] | None = None):
        super().__init__()
        self.automatic_optimization = False
        self.shape, self.num_classes, self.kind, self.z_dim = tuple(shape), int(num_classes), kind, int(z_dim)
        self.class_probs = None if class_probs is None else torch.as_tensor(class_probs, dtype=torch.float)
        self.ledger = None
        self.net_g = self.build_generator(**(generator or {}))

    def build_generator(self, **arch) -> nn.Module:
        if self.kind == "image":
            return ConditionalImageGenerator(self.shape, self.num_classes, z_dim=self.z_dim, **arch)
        if self.kind == "table":
            return ConditionalTableGenerator(self.shape, self.num_classes, z_dim=self.z_dim, **arch)
        raise ValueError(f"unknown data kind {self.kind!r} (expected 'image' or 'table')")

    @property
    def generator(self) -> nn.Module:
        return self.net_g

    def latent(self, n: int) -> torch.Tensor:
        """z ~ U(-1, 1), the same distribution in training and generation (as the reference DCGAN code)."""
        return torch.rand(n, self.z_dim, device=self.device) * 2 - 1

    def sample_labels(self, n: int) -> torch.Tensor:
        """Balanced labels, or labels drawn from `class_probs` (e.g. G-PATE's privately released class ratio)."""
        if self.class_probs is None:
            return torch.arange(n, device=self.device) % self.num_classes
        return torch.multinomial(self.class_probs.to(self.device), n, replacement=True)

    def step_cost_bound(self):
        return None

    def on_train_batch_start(self, batch, batch_idx):
        # PrivacyBudget requests a stop before a step that could exceed the budget: -1 skips that step.
        if self.trainer.should_stop:
            return -1

    @torch.no_grad()
    def sample(self, n: int, labels: torch.Tensor | None = None, batch_size: int = 1000):
        labels = self.sample_labels(n) if labels is None else labels.to(self.device)
        was_training = self.net_g.training
        self.net_g.eval()
        xs = [self.net_g(self.latent(len(y)), y).cpu() for y in labels.split(batch_size)]
        self.net_g.train(was_training)
        return torch.cat(xs), labels.cpu()
