"""A small supervised training loop for the evaluation classifiers (downstream CNN, domain classifier)."""

from __future__ import annotations

import copy
import hashlib
import logging
import math
import os
import time
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

from dpgen.files import atomic_write

log = logging.getLogger(__name__)


def resolve_device(device: str | torch.device | None) -> torch.device:
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


@torch.no_grad()
def predict_logits(model: nn.Module, x: torch.Tensor, *, batch_size: int = 1000, device=None) -> torch.Tensor:
    """Logits of `model` on `x` in eval mode, returned on the CPU; the model's train/eval mode is restored.
    `device`: where the model is; None: where its parameters are."""
    device = next(model.parameters()).device if device is None else torch.device(device)
    was_training = model.training
    model.eval()
    out = [model(x[i : i + batch_size].to(device)).float().cpu() for i in range(0, len(x), batch_size)]
    model.train(was_training)
    return torch.cat(out)


def correct(model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, batch_size: int = 1000, device=None) -> int:
    """How many records of (x, y) `model` classifies right."""
    predicted = predict_logits(model, x, batch_size=batch_size, device=device).argmax(dim=1)
    return int((predicted == y.cpu()).sum())


def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, batch_size: int = 1000, device=None) -> float:
    if len(x) == 0:
        return float("nan")
    return correct(model, x, y, batch_size=batch_size, device=device) / len(x)


def train_classifier(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    val_x: torch.Tensor | None = None,
    val_y: torch.Tensor | None = None,
    test_x: torch.Tensor | None = None,
    test_y: torch.Tensor | None = None,
    private_x: torch.Tensor | None = None,
    private_y: torch.Tensor | None = None,
    max_epochs: int = 10,
    patience: int | None = None,
    batch_size: int = 128,
    lr: float = 1e-3,
    optimizer: str = "adam",
    flip: bool = False,
    cosine: bool = False,
    seed: int = 0,
    device=None,
    progress: bool = False,
    state_file: str | os.PathLike | None = None,
) -> dict:
    """Adam (or plain SGD: `optimizer="sgd"`) + cross-entropy for up to `max_epochs` epochs; `flip`: mirror each
    training image left-right with probability 1/2 (only for data whose classes are mirror-symmetric: clothes,
    faces, not digits); `cosine`: decay the learning rate to 0 along a cosine over the `max_epochs` epochs.

    With a validation set, the weights of the epoch with the best validation accuracy are
    restored at the end and training stops after `patience` epochs without improvement. With a test set, its
    accuracy is recorded in every epoch's history (`test_accuracy`) and never used to choose anything here. With
    private records (`private_x`, `private_y`: a validation split of the private training data), each epoch's
    correct count on them is returned apart (`private_correct`), never in the history nor the log: they are private
    numbers, for a DP choice of epoch only.
    Runs under a forked RNG so that the caller's random state is untouched.

    `state_file`: after every epoch the model, the optimizer, the history and the random state are written there
    (atomically), and a call with the same data and settings continues from that file: a killed training loses at
    most one epoch and ends with the same weights and history as an uninterrupted one. The file is removed when
    training ends; one written for other data or settings is refused (ValueError).
    Returns {"best_epoch", "val_accuracy", "epochs_run", "history"} (epochs count from 1; each epoch's record has
    its loss, accuracies and wall seconds), and "private_correct" (one count per epoch) with private records.
    """
    device = resolve_device(device)
    model.to(device)
    has_val = val_x is not None and len(val_x) > 0
    history: list[dict] = []
    private_correct: list[int] = []
    best = {"epoch": 0, "accuracy": -1.0, "state": None}
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        optimizers = {"adam": torch.optim.Adam, "sgd": torch.optim.SGD}
        if optimizer not in optimizers:
            raise ValueError(f"optimizer must be one of {sorted(optimizers)}, got {optimizer!r}")
        settings = (f"{type(model).__name__} {optimizer} lr={lr} batch={batch_size} epochs={max_epochs} "
                    f"patience={patience} flip={flip} cosine={cosine} seed={seed}")
        optimizer = optimizers[optimizer](model.parameters(), lr=lr)
        batches = max_epochs * math.ceil(len(x) / batch_size)
        schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, batches) if cosine else None
        resumable = None
        if state_file is not None:
            resumable = Resumable(state_file, settings, (x, y, val_x, val_y, private_x, private_y), device)
            history, best, private_correct = resumable.load(model, optimizer, schedule, history, best, private_correct)
        # on a GPU the training set moves there once, and the epoch's loss is summed there (no sync per batch)
        train_x, train_y = (x.to(device), y.to(device)) if device.type == "cuda" else (x, y)
        for epoch in range(len(history) + 1, max_epochs + 1):
            started = time.perf_counter()
            model.train()
            order = torch.randperm(len(x))
            total = torch.zeros((), dtype=torch.float64, device=device)
            for start in range(0, len(x), batch_size):
                index = order[start : start + batch_size].to(train_x.device)
                batch = train_x[index]
                if flip:
                    mirrored = (torch.rand(len(index)) < 0.5).to(batch.device)
                    batch = torch.where(mirrored[:, None, None, None], batch.flip(-1), batch)
                loss = F.cross_entropy(model(batch.to(device)), train_y[index].to(device))
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                if schedule is not None:
                    schedule.step()
                total += loss.detach().double() * len(index)
            record = {"epoch": epoch, "loss": total.item() / len(x)}
            if has_val:
                record["val_accuracy"] = accuracy(model, val_x, val_y, device=device)
                if record["val_accuracy"] > best["accuracy"]:
                    best = {"epoch": epoch, "accuracy": record["val_accuracy"], "state": copy.deepcopy(model.state_dict())}
            if test_x is not None:
                record["test_accuracy"] = accuracy(model, test_x, test_y, device=device)
            # the epoch's training and its public evaluations: timed before the private count, whose duration
            # would say how many records the private split holds
            record["seconds"] = round(time.perf_counter() - started, 2)
            if private_x is not None:
                private_correct.append(correct(model, private_x, private_y, device=device))
            history.append(record)
            if progress:
                log.info("%s: %s", type(model).__name__,
                         " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in record.items()))
            if has_val and patience is not None and epoch - best["epoch"] >= patience:
                break
            if resumable is not None:
                resumable.save(model, optimizer, schedule, history, best, private_correct)
    if resumable is not None:
        resumable.path.unlink(missing_ok=True)
    model.eval()
    if best["state"] is not None:
        model.load_state_dict(best["state"])
        fit = {"best_epoch": best["epoch"], "val_accuracy": best["accuracy"], "epochs_run": len(history), "history": history}
    else:
        fit = {"best_epoch": len(history), "val_accuracy": float("nan"), "epochs_run": len(history), "history": history}
    if private_x is not None:
        fit["private_correct"] = private_correct
    return fit


class Resumable:
    """The state of `train_classifier` in one file, keyed by the data's digest and the training settings. It holds
    the private validation counts so far and a digest of the private records too: a private file that stays with
    the data holder (as a checkpoint does), removed when the training ends; error messages never show the digest."""

    def __init__(self, path: str | os.PathLike, settings: str, tensors: tuple, device: torch.device,
                 generators: tuple[torch.Generator, ...] = (), identity: str | None = None):
        """`identity` names the data in place of the tensors' digest: for data drawn again when the training moves
        to another machine (a generator's samples), whose floats there may differ in their last bits."""
        self.path, self.device, self.generators = Path(path), device, generators  # generators: saved states too
        if identity is not None:
            self.settings, self.key = settings, f"{settings} data={hashlib.sha256(identity.encode()).hexdigest()}"
            return
        digest = hashlib.sha256()
        for tensor in tensors:
            if tensor is not None:
                tensor = tensor.detach().cpu().contiguous()
                digest.update(str((tuple(tensor.shape), tensor.dtype)).encode())
                digest.update(tensor.view(torch.uint8).numpy())
        self.settings, self.key = settings, f"{settings} data={digest.hexdigest()}"

    def load(self, model, optimizer, schedule, history: list, best: dict, private_correct: list
             ) -> tuple[list, dict, list]:
        """Restore a saved state into the model, optimizer and random state; returns (history, best,
        private_correct)."""
        if not self.path.is_file():
            return history, best, private_correct
        saved = torch.load(self.path, map_location="cpu")
        if saved["key"] != self.key:  # the digests are of private records: named in no message
            settings = saved["key"].split(" data=")[0]
            what = "of other data" if settings == self.settings else f"with other settings ({settings!r})"
            raise ValueError(f"{self.path} holds a classifier training {what} than this one ({self.settings!r}); "
                             "remove it to start over")
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        if schedule is not None:
            schedule.load_state_dict(saved["schedule"])
        torch.set_rng_state(saved["rng"])
        if self.device.type == "cuda":
            torch.cuda.set_rng_state(saved["cuda_rng"], self.device)
        for generator, state in zip(self.generators, saved.get("generators", ()), strict=True):
            generator.set_state(state)
        log.info("classifier training resumed after epoch %d from %s", len(saved["history"]), self.path)
        return saved["history"], saved["best"], saved["private_correct"]

    def save(self, model, optimizer, schedule, history: list, best: dict, private_correct: list) -> None:
        state = {
            "key": self.key, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
            "schedule": schedule.state_dict() if schedule is not None else None,
            "history": history, "best": best, "private_correct": private_correct, "rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state(self.device) if self.device.type == "cuda" else None,
            "generators": [generator.get_state() for generator in self.generators],
        }
        atomic_write(self.path, lambda f: torch.save(state, f))
