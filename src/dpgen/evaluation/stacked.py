"""Several classifiers of one architecture trained together (torch.func's model ensembling): the G-PATE authors'
evaluation (`eval=reference`: plain SGD, no synthetic hold-out, the real test set's accuracy
after every epoch) of many cells in one pass. Model k sees only its own data, in the order its own seed gives, with
its own learning rate: it is trained as `train_classifier(optimizer="sgd")` would train it alone (for a model
without dropout, the same weights up to float rounding; with dropout, equal in distribution: the masks come from
one shared stream, and `train_classifier` draws its order from that stream too).
On a GPU the K models run as one vectorized model (vmap), in about the time of one; on a CPU, where vmap's batched
convolutions ran at half the rate of one model's own (docs/LOG.md), each model runs its own kernels in turn, its
convolutions' weights channels-last."""

from __future__ import annotations

import copy
import logging
import os
import time

import torch
from torch import nn
from torch.func import functional_call, stack_module_state, vmap
from torch.nn import functional as F

from dpgen.evaluation.training import Resumable, resolve_device

log = logging.getLogger(__name__)


def channels_last(p: torch.Tensor) -> torch.Tensor:
    """A convolution's weight restrided channels-last (`.to`: `.contiguous` leaves a one-channel weight as it is,
    and the weights decide the layout of a one-channel input's convolution); other parameters as they are."""
    return p.to(memory_format=torch.channels_last) if p.dim() == 4 else p


class Stacked(nn.Module):
    """The K models' parameters, each stacked along a first dimension of size K (a module, so that `Resumable`
    saves and restores it like one model)."""

    def __init__(self, models: list[nn.Module], vectorize: bool = True):
        super().__init__()
        self.vectorize = vectorize
        shapes = {tuple((name, tuple(p.shape)) for name, p in model.named_parameters()) for model in models}
        if len(shapes) != 1:
            raise ValueError("stacked classifiers must share one architecture")
        if any(len(list(model.buffers())) for model in models):
            raise ValueError("stacked classifiers cannot have buffers (BatchNorm's running statistics)")
        params, _ = stack_module_state(models)
        self.names = list(params)
        self.params = nn.ParameterList(nn.Parameter(params[name].detach().clone()) for name in self.names)
        # the architecture, its weights on no device (the stacked ones stand in): kept out of the module's state
        self.base = (copy.deepcopy(models[0]).to("meta"),)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (K, b, ...) -> logits (K, b, classes): model k on x[k]."""
        def one(params, xk):
            return functional_call(self.base[0], dict(zip(self.names, params)), (xk,))
        self.base[0].train(self.training)
        if not self.vectorize:  # convolutions' weights channels-last: on a CPU, max-pool several times faster
            return torch.stack([one([channels_last(p[k]) for p in self.params], x[k]) for k in range(len(x))])
        randomness = "different" if self.training else "error"
        return vmap(one, randomness=randomness)(tuple(self.params), x)


@torch.no_grad()
def stacked_accuracy(model: Stacked, x: torch.Tensor, y: torch.Tensor, batch_size: int = 1000) -> list[float]:
    """Each model's accuracy on its own test set: x (K, T, ...), y (K, T)."""
    model.eval()
    right = torch.zeros(len(x), dtype=torch.long)
    for start in range(0, x.shape[1], batch_size):
        logits = model(x[:, start:start + batch_size])
        right += (logits.argmax(-1) == y[:, start:start + batch_size]).sum(1).cpu()
    return (right.double() / x.shape[1]).tolist()


def stalled(history: list[dict], patience: int) -> bool:
    """Whether every model of `history` (records of train_stacked, one test accuracy per model) has gone `patience`
    epochs or more since its best one (its first best, as the authors' maximum counts it)."""
    if patience < 1:
        raise ValueError(f"patience must be at least 1 epoch, got {patience}")
    if not history:
        return False
    tested = list(zip(*(record["test_accuracy"] for record in history)))  # per model
    return all(len(acc) - (1 + acc.index(max(acc))) >= patience for acc in tested)


def train_stacked(
    models: list[nn.Module],
    xs: list[torch.Tensor],
    ys: list[torch.Tensor],
    test_xs: list[torch.Tensor],
    test_ys: list[torch.Tensor],
    *,
    lrs: list[float],
    seeds: list[int],
    max_epochs: int,
    batch_size: int,
    device=None,
    progress: bool = False,
    state_file: str | os.PathLike | None = None,
    identity: str | None = None,
    vectorize: bool | None = None,
    machine: str | None = None,
    patience: int | None = None,
) -> tuple[list[nn.Module], list[list[dict]]]:
    """Train model k on (xs[k], ys[k]) with plain SGD at lrs[k] and batch `batch_size` for `max_epochs` epochs,
    recording its accuracy on (test_xs[k], test_ys[k]) after every epoch; every training set has the same size.
    `state_file`: saved after every epoch, continued from by a call with the same data and settings (Resumable;
    `identity` names the data in place of their digest, for samples drawn again on another machine).
    `machine`: recorded in each epoch's record (an evaluation resumed elsewhere says where each epoch ran).
    `vectorize`: the models as one vmapped model (default: on a GPU) or each in turn (default on a CPU).
    `patience`: stop before `max_epochs` once every model has gone that many epochs without a higher test accuracy
    (`stalled`); the state file is then kept, so that a call without it continues to `max_epochs`.
    Returns the trained models (in eval mode) and each model's history: one record per epoch with its loss, its
    test accuracy, the epoch's wall seconds (of all K models together) and `machine` where given."""
    k = len(models)
    if not (k == len(xs) == len(ys) == len(test_xs) == len(test_ys) == len(lrs) == len(seeds)) or k == 0:
        raise ValueError("give one training set, test set, learning rate and seed per model")
    n = len(xs[0])
    if any(len(x) != n for x in xs) or any(len(x) != len(y) for x, y in zip(xs, ys)):
        raise ValueError(f"every training set must hold the same number of records, got {[len(x) for x in xs]}")
    if len({len(x) for x in test_xs}) != 1:
        raise ValueError("every test set must hold the same number of records")
    device = resolve_device(device)
    vectorize = device.type == "cuda" if vectorize is None else vectorize
    stacked = Stacked(models, vectorize).to(device)
    x, y = torch.stack(xs).to(device), torch.stack(ys).long().to(device)
    test_x, test_y = torch.stack(test_xs).to(device), torch.stack(test_ys).long().to(device)
    rows = torch.arange(k, device=device)[:, None]
    # each model's step is lr_k * its gradient: SGD at lr 1 on gradients scaled by lr_k
    scale = torch.tensor(lrs, dtype=torch.float32, device=device)
    optimizer = torch.optim.SGD(stacked.parameters(), lr=1.0)
    orders = [torch.Generator().manual_seed(seed) for seed in seeds]  # train_classifier's order for each seed
    history: list[dict] = []
    settings = (f"Stacked {type(models[0]).__name__} x{k} sgd lrs={lrs} batch={batch_size} epochs={max_epochs} "
                f"seeds={seeds} vectorize={vectorize}")  # the two draw their dropout masks in other orders
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seeds[0])  # the dropout masks' stream
        resumable = None
        if state_file is not None:
            resumable = Resumable(state_file, settings, (x, y, test_x, test_y), device, generators=tuple(orders),
                                  identity=identity)
            history, _, _ = resumable.load(stacked, optimizer, None, history, {}, [])
        for epoch in range(len(history) + 1, max_epochs + 1):
            if patience is not None and stalled(history, patience):
                break
            started = time.perf_counter()
            stacked.train()
            order = torch.stack([torch.randperm(n, generator=g) for g in orders]).to(device)
            total = torch.zeros(k, dtype=torch.float64, device=device)
            for start in range(0, n, batch_size):
                index = order[:, start:start + batch_size]
                logits = stacked(x[rows, index])
                losses = F.cross_entropy(logits.flatten(0, 1), y[rows, index].flatten(), reduction="none")
                losses = losses.view(k, -1).mean(1)  # each model's mean over its batch
                optimizer.zero_grad(set_to_none=True)
                losses.sum().backward()  # the models share nothing: each gets its own loss's gradient
                for p in stacked.params:
                    p.grad *= scale.view(-1, *[1] * (p.dim() - 1))
                optimizer.step()
                total += losses.detach().double() * index.shape[1]
            tested = stacked_accuracy(stacked, test_x, test_y)
            record = {"epoch": epoch, "loss": (total / n).tolist(), "test_accuracy": tested,
                      "seconds": round(time.perf_counter() - started, 2)}
            if machine:
                record["machine"] = machine
            history.append(record)
            if progress:
                log.info("stacked classifiers: epoch %d/%d, test accuracy %s, %.1f s, about %.1f h left", epoch,
                         max_epochs, " ".join(f"{a:.4f}" for a in tested), record["seconds"],
                         record["seconds"] * (max_epochs - epoch) / 3600)
            if resumable is not None:
                resumable.save(stacked, optimizer, None, history, {}, [])
    if resumable is not None and len(history) == max_epochs:
        resumable.path.unlink(missing_ok=True)
    trained = []
    for i, model in enumerate(models):
        model.load_state_dict({name: p[i].detach().cpu() for name, p in zip(stacked.names, stacked.params)})
        trained.append(model.eval())
    histories = [[{**r, "loss": r["loss"][i], "test_accuracy": r["test_accuracy"][i]} for r in history]
                 for i in range(k)]
    return trained, histories
