"""DP-MERF (Harder, Adamczewski & Park, AISTATS 2021): the private data is read once, by one Gaussian release of its
class-conditional random Fourier feature mean embedding (aggregation/mean_embedding.py); a generator is then
trained to match that release, which is post-processing and costs no privacy, for as many steps as configured."""
from __future__ import annotations

import logging
import math
from collections.abc import Iterator

import torch
from torch import nn

from dpgen.aggregation import feature_maps, mean_embedding
from dpgen.callbacks.checkpoint_io import CheckpointError
from dpgen.data.base import TensorData
from dpgen.methods import labeller
from dpgen.methods.base import PrivateGenerator
from dpgen.methods.guide import MODES, RULES, GuidedGenerator, guide_net, relabel, train_dpsgd
from dpgen.nn.fc import FCGenerator
from dpgen.nn.mixture import GeneratorMixture
from dpgen.privacy import two_stage
from dpgen.privacy.gaussian import gaussian_sigma
from dpgen.privacy.ledger import NO_DATA_DEPENDENT_BOUND, PrivacyLedger
from dpgen.privacy.rdp import DEFAULT_ORDERS

log = logging.getLogger(__name__)
FEATURES_KEY = "dpmerf_features"
LABELS = ("balanced", "released")
LR_DECAYS = (None, "cosine")  # method.module.lr_decay
KIND_LABELS = {"image": "balanced", "table": "released"}  # labels=None
IMAGE_BANDWIDTH = 5.0  # bandwidth=None for images, on [0, 1] pixels (the value of the measured MNIST runs)
TABLE_BANDWIDTH_PER_COLUMN = 0.2  # bandwidth=None for tables: this times sqrt(columns), on the datamodule's [0, 1]
# method.module.guide: a DP-SGD classifier trained after the release that labels (or filters) the samples
# (methods/guide.py); its settings, the measured ones (docs/methods/dpmerf.md, "The guide")
GUIDE_DEFAULTS = {"share": 0.5, "epochs": 8, "batch_size": 512, "lr": 2.0, "momentum": 0.9, "clip": 0.1,
                  "mode": "relabel", "tries": 10, "rule": None}
KIND_RULES = {"image": "argmax", "table": "shares"}  # guide.rule=None (methods/guide.py `relabel`)
POST_PROCESSING = ("the run's only access to private data, once before training; every training step reads this "
                   "release alone (post-processing: no privacy cost)")


def default_bandwidth(kind: str, shape) -> float:
    """The public kernel length scale when none is configured, a function of the data's public shape alone (a
    median heuristic on the private records, as DP-MERF's tabular code uses, would leak them): images
    IMAGE_BANDWIDTH; tables TABLE_BANDWIDTH_PER_COLUMN * sqrt(F) for F columns on the datamodule's [0, 1] scale
    (a one-hot block counts one column per category), about the 0.18 per column that 5 is on MNIST's 784 pixels."""
    return IMAGE_BANDWIDTH if kind == "image" else TABLE_BANDWIDTH_PER_COLUMN * math.sqrt(math.prod(shape))


def record_chunks(data: TensorData, size: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The records of `data` in order, `size` at a time: each record read exactly once."""
    for start in range(0, len(data), size):
        yield data[start:start + size]


def check_relabel(relabel: str | None, guide: dict | None, kind: str) -> None:
    """ValueError unless method.module.relabel is one of labeller.KINDS, for a table, without a guide (both label
    the samples)."""
    if relabel not in labeller.KINDS:
        raise ValueError(f"method.module.relabel must be one of {labeller.KINDS}, got {relabel!r}")
    if relabel is not None and guide is not None:
        raise ValueError("method.module.relabel and method.module.guide both label the samples: give one of them")
    if relabel is not None and kind != "table":
        raise ValueError(f"method.module.relabel={relabel} is for tables (measured there only), not {kind} data")


def check_guide(guide: dict, conversion: str, kind: str = "image") -> dict:
    """The guide's settings over GUIDE_DEFAULTS, rule=None resolved for the data's `kind` (KIND_RULES); ValueError
    for unknown keys or values, or an unsupported conversion."""
    unknown = sorted(set(guide) - set(GUIDE_DEFAULTS))
    if unknown:
        raise ValueError(f"unknown method.module.guide settings {unknown}; known: {sorted(GUIDE_DEFAULTS)}")
    if conversion not in two_stage.CONVERSIONS:
        raise ValueError(f"method.module.guide composes a Gaussian release with DP-SGD by RDP: give "
                         f"privacy.conversion=improved (or classical), not {conversion!r}")
    spec = {**GUIDE_DEFAULTS, **guide}
    spec["rule"] = KIND_RULES[kind] if spec["rule"] is None else spec["rule"]
    if spec["rule"] not in RULES:
        raise ValueError(f"method.module.guide.rule must be one of {RULES} (or null), got {spec['rule']!r}")
    two_stage.check_share(spec["share"])
    if spec["mode"] not in MODES:
        raise ValueError(f"method.module.guide.mode must be one of {MODES}, got {spec['mode']!r}")
    if not (spec["epochs"] > 0 and spec["batch_size"] >= 1 and spec["lr"] > 0 and spec["clip"] > 0):
        raise ValueError(f"method.module.guide needs epochs, batch_size, lr and clip > 0, got {spec}")
    return spec


class DPMERF(PrivateGenerator):
    """Once, at fit start: S = sum over the training set of [phi(x), a] in row y, plus N(0, sigma^2) noise
    (mean_embedding.release), sigma calibrated so that the ledger reports exactly the budget (privacy.epsilon,
    privacy.delta) under privacy.conversion (gdp: the analytic Gaussian mechanism, privacy/gaussian.py). Then each
    step: a batch of `batch_size` labels (balanced, or drawn from the released class counts: `labels="released"`),
    G(z, y), and one Adam step on sum_c |sum_{i: y_i = c} (phi(G(z_i, c)) - m_c)|^2 / B^2, m_c the released mean
    embedding of class c (DP-MERF's squared MMD between the released and the generated embeddings).

    The generator for images is the project's DCGAN-style one (generator.kind=conv, the default: 93-95% against
    87-90% for the MLP in docs/LOG.md) or DP-MERF's MLP [z, y] -> 200 -> 500 -> C*H*W (kind=fc); for tables, DP-MERF's tabular MLP with a sigmoid per
    continuous column and a drawn category per one-hot block (table_generator). `bandwidth` / `labels` None: the
    data kind's public defaults (default_bandwidth; labels balanced for images, released for tables). `features`
    None: phi is the pixel random Fourier features (n_features, bandwidth); a list of blocks: their weighted
    concatenation (aggregation/feature_maps.py: rff, ntk, conv, marginals), rows of norm 1 as well, so the
    sensitivity and the noise are the same. The datamodule's loader only drives Lightning's steps; its batches are
    not used."""

    neighbouring = "add_remove"

    def __init__(self, shape, num_classes, kind, epsilon: float, delta: float, conversion: str = "gdp",
                 batch_size: int = 500, n_features: int = 10_000, bandwidth: float | list[float] | None = None,
                 count_feature: float = 0.2, z_dim: int = 20, lr: float = 1e-2, labels: str | None = None,
                 chunk_size: int = 4096, features: list[dict] | None = None, lr_decay: str | None = None,
                 generator: dict | None = None, guide: dict | None = None, relabel: str | None = None,
                 seed: int = 0):
        if kind not in KIND_LABELS:
            raise ValueError(f"method=dpmerf supports image and table data, not {kind!r}")
        labels = KIND_LABELS[kind] if labels is None else labels
        if labels not in LABELS:
            raise ValueError(f"labels must be one of {LABELS}, got {labels!r}")
        guide_spec = None if guide is None else check_guide(guide, conversion, kind)
        if lr_decay not in LR_DECAYS:
            raise ValueError(f"method.module.lr_decay must be one of {LR_DECAYS}, got {lr_decay!r}")
        check_relabel(relabel, guide, kind)
        if conversion == "pld":
            raise ValueError("method=dpmerf makes one Gaussian release, for which privacy.conversion=gdp is exact: "
                             "use gdp (pld would only add discretization error)")
        if batch_size < 1 or chunk_size < 1 or not count_feature > 0:
            raise ValueError(f"need batch_size >= 1, chunk_size >= 1, count_feature > 0; got {batch_size}, "
                             f"{chunk_size}, {count_feature}")
        super().__init__(shape, num_classes, kind, z_dim=z_dim, generator=generator)
        self.latent_dist = "normal"  # DP-MERF's code draws z ~ N(0, I)
        self.guide_spec = guide_spec
        self.relabel, self.relabel_seed = relabel, seed
        self.fitted_labeller: tuple[int, nn.Module] | None = None  # (global_step, labeller) of relabel=logistic
        self.epsilon, self.delta, self.conversion = float(epsilon), float(delta), conversion
        self.batch_size, self.lr, self.labels, self.chunk_size = int(batch_size), float(lr), labels, int(chunk_size)
        self.count_feature = float(count_feature)
        self.lr_decay = lr_decay
        bandwidth = default_bandwidth(kind, self.shape) if bandwidth is None else bandwidth
        # None: the pixel random Fourier features alone; a list: a weighted concatenation of feature blocks
        # (aggregation/feature_maps.py), rows of norm 1 either way, so the sensitivity below holds for both
        # a table's one-hot layout is the generator's (nn/mixed_table.py), so the map reads its samples as records
        self.features = feature_maps.build(features, self.shape, n_features, bandwidth, seed,
                                           one_hot=self.net_g.one_hot if kind == "table" else None)
        self.sensitivity = mean_embedding.sensitivity(self.count_feature)
        # with a guide the release is calibrated alone to its share of the budget, exactly (gdp), and the guide's
        # DP-SGD gets what the conversion leaves (privacy/two_stage.py)
        self.sigma = (gaussian_sigma(self.epsilon, self.delta, self.sensitivity, conversion) if guide is None else
                      two_stage.release_sigma(self.epsilon, self.delta, self.sensitivity, self.guide_spec["share"]))
        self.guide_net = None if guide is None else guide_net(kind, self.shape, self.num_classes)
        self.guide_plan: dict | None = None  # sample rate, steps and noise multiplier, set up with the data
        self.guide_optimizer_hook = None  # train_dpsgd's on_optimizer (the audit's canaries)
        self.orders = DEFAULT_ORDERS
        self.ledger = PrivacyLedger(self.orders, aliases=NO_DATA_DEPENDENT_BOUND)
        # the release, post-processed: class mean embeddings (K, D) and noisy class counts (K,)
        self.register_buffer("target", torch.zeros(self.num_classes, self.features.n_features))
        self.register_buffer("counts", torch.zeros(self.num_classes))

    def build_generator(self, kind: str | None = None, fc: dict | None = None, conv: dict | None = None,
                        table: dict | None = None, members: int = 1) -> nn.Module:
        """Images: kind="conv" (the default) the project's DCGAN-style conditional generator (nn/generator.py),
        `conv` its sizes; kind="fc": DP-MERF's MLP [z, y] -> hidden -> C*H*W (BatchNorm, ReLU, sigmoid output),
        `fc` its hidden sizes and batch_norm. Tables: kind="table" (the default), `table_generator(**table)`. All
        sets live in the config, so `generator.kind` alone switches. members > 1: that many generators of the
        kind, each drawn afresh and trained on the one release by itself, sampled as their equal mixture
        (nn/mixture.py): post-processing of the same release, so the privacy cost is the same."""
        if members < 1:
            raise ValueError(f"method.module.generator.members must be >= 1, got {members}")
        if members > 1:
            return GeneratorMixture([self.build_generator(kind, fc, conv, table) for _ in range(members)])
        kind = kind or ("table" if self.kind == "table" else "conv")
        if (kind == "table") != (self.kind == "table"):
            raise ValueError(f"method.module.generator.kind={kind!r} does not fit {self.kind} data: tables take "
                             "kind=table, images kind=conv or fc")
        if kind == "table":
            return self.table_generator(**(table or {}))
        if kind == "conv":
            return super().build_generator(**(conv or {}))
        if kind != "fc":
            raise ValueError(f"unknown method.module.generator.kind {kind!r} (conv, fc or table)")
        arch = dict(fc or {})
        hidden, batch_norm = tuple(arch.pop("hidden", (200, 500))), arch.pop("batch_norm", True)
        return FCGenerator(self.shape, self.num_classes, z_dim=self.z_dim, hidden=hidden, activation="relu",
                           feature_bound=None, label_every_layer=False, batch_norm=batch_norm, **arch)

    def configure_optimizers(self):
        if self.lr_decay is not None and not self.trainer.max_steps > 0:
            raise ValueError("method.module.lr_decay=cosine anneals over the run's steps: set method.max_steps")
        return torch.optim.Adam(self.net_g.parameters(), lr=self.lr)

    def step_lr(self) -> float:
        """lr_decay=cosine: lr (1 + cos(pi t / T)) / 2 at step t of T = max_steps, from the step count alone, so
        that a resumed run takes the rate of its step"""
        if self.lr_decay is None:
            return self.lr
        return self.lr * (1 + math.cos(math.pi * self.global_step / self.trainer.max_steps)) / 2

    # privacy

    def step_cost(self):
        """The release (mu-GDP, upfront) and steps that cost nothing: PrivacyBudget refuses a budget the release
        alone exceeds (it cannot, sigma being calibrated to it) and lets every step run. With a guide, its DP-SGD
        steps are upfront too (their RDP); unknown (None) until the data's size sets their sampling rate."""
        if self.guide_spec is None:
            return mean_embedding.step_cost(self.count_feature, self.sigma, self.orders)
        return None if self.guide_plan is None else two_stage.step_cost(self.guide_plan, self.orders)

    def setup(self, stage: str) -> None:
        """With a guide: its sampling rate batch_size / N (N public, as for every DP-SGD method), its steps and the
        noise multiplier that brings the release and the guide to the budget (privacy/two_stage.py)."""
        if stage == "fit" and self.guide_spec is not None:
            spec = self.guide_spec
            self.guide_plan = two_stage.plan(self.epsilon, self.delta, self.sensitivity, spec["share"],
                                             spec["batch_size"], spec["epochs"], len(self.train_records()),
                                             self.conversion, self.orders)

    def train_records(self) -> TensorData:
        dm = getattr(self.trainer, "datamodule", None)
        if dm is None or getattr(dm, "train_data", None) is None:
            raise ValueError("method=dpmerf needs the training records: fit with a dpgen datamodule")
        return dm.train_data

    def on_fit_start(self) -> None:
        # Runs after a checkpoint is restored (ledger, release and guide included): a resumed run never releases
        # again.
        if self.ledger.empty:
            self.release_embedding(self.train_records())
            if self.guide_spec is not None:
                self.train_guide(self.train_records())
        if self.labels == "released":
            self.class_probs = (self.counts / self.counts.sum()).cpu()

    @torch.no_grad()
    def release_embedding(self, data: TensorData) -> None:
        """The one release, recorded in the ledger; keeps its post-processed class means and counts."""
        out = mean_embedding.release(record_chunks(data, self.chunk_size), self.features, self.num_classes,
                                     self.count_feature, self.sigma)
        out.record(self.ledger, {"epsilon": self.epsilon, "delta": self.delta, "conversion": self.conversion,
                                 **self.feature_record(), "note": POST_PROCESSING})
        means, counts = out.class_means()
        self.target.copy_(means)
        self.counts.copy_(counts)

    def train_guide(self, data: TensorData) -> None:
        """The second release: the guide trained with DP-SGD on the records the embedding read (methods/guide.py),
        recorded in the ledger with the plan's sampling rate, steps and noise multiplier."""
        spec, plan = self.guide_spec, self.guide_plan
        x, y = data[:]
        train_dpsgd(self.guide_net, x, y, steps=plan["steps"], batch_size=spec["batch_size"], lr=spec["lr"],
                    momentum=spec["momentum"], clip=spec["clip"], noise_multiplier=plan["noise_multiplier"],
                    device=self.device, log=lambda step, loss: log.info("guide: DP-SGD step %d of %d", step,
                                                                        plan["steps"]),
                    on_optimizer=self.guide_optimizer_hook)
        for p in self.guide_net.parameters():
            p.requires_grad_(False)
        test = getattr(self.trainer.datamodule, "test_data", None)
        if test is not None:  # public records: how good the released guide is, for the log
            with torch.no_grad():
                right = sum(int((self.guide_net(tx.to(self.device)).argmax(1).cpu() == ty).sum())
                            for tx, ty in record_chunks(test, self.chunk_size))
            log.info("guide: %d DP-SGD steps at noise multiplier %.4g; accuracy on the real test set %.4f",
                     plan["steps"], plan["noise_multiplier"], right / len(test))
        two_stage.record_dpsgd(self.ledger, plan["sample_rate"], plan["noise_multiplier"], plan["steps"],
                               params={**{k: plan[k] for k in ("sample_rate", "steps", "noise_multiplier")},
                                       "max_grad_norm": spec["clip"], "epochs": spec["epochs"]})

    @property
    def generator(self) -> nn.Module:
        """The trained generator; with a guide in mode=filter, its samples filtered by the guide (GuidedGenerator)."""
        if self.guide_spec is None or self.guide_spec["mode"] != "filter":
            return super().generator
        return GuidedGenerator(super().generator, self.guide_net, self.latent_dist, self.guide_spec["tries"])

    @property
    def labeller(self) -> nn.Module | None:
        """With a guide in mode=relabel: the guide, whose classes label the samples (methods/guide.py `relabel`); with
        relabel=logistic: a logistic regression fitted on labeller.SAMPLES of the generator's own samples (drawn
        under a forked RNG seeded with the run's seed), fitted again when the generator has taken steps since; its
        probabilities label the samples at the released class shares (`labeller_shares`)."""
        if self.relabel is not None:
            if self.fitted_labeller is None or self.fitted_labeller[0] != self.global_step:
                with torch.random.fork_rng():
                    torch.manual_seed(self.relabel_seed)
                    x, y = super().sample(labeller.SAMPLES)
                self.fitted_labeller = (self.global_step, labeller.logistic_labeller(x, y, self.num_classes))
            return self.fitted_labeller[1]
        return self.guide_net if self.guide_spec is not None and self.guide_spec["mode"] == "relabel" else None

    @property
    def labeller_shares(self) -> list[float] | None:
        """With guide.rule=shares or relabel=logistic, the class shares the labeller's labels keep (`match_shares`):
        the released class shares (labels=released) or equal ones (balanced), both public or released; None for the
        argmax."""
        guide = self.guide_spec
        guided = guide is not None and guide["mode"] == "relabel" and guide["rule"] == "shares"
        if self.relabel is None and not guided:
            return None
        return [1 / self.num_classes] * self.num_classes if self.class_probs is None else self.class_probs.tolist()

    def sample(self, n: int, labels: torch.Tensor | None = None, batch_size: int = 1000):
        """`(x, y)` as the base class draws them, y replaced by the labeller's classes (a guide in mode=relabel, or
        relabel=logistic)."""
        x, y = super().sample(n, labels, batch_size)
        labeller_net = self.labeller  # relabel=logistic: fitted here if the generator moved since
        return (x, y) if labeller_net is None else (x, relabel(labeller_net, x, batch_size, self.labeller_shares))

    def release(self) -> dict:
        """The base release and the labeller of the samples, if any (generate.py)."""
        return {**super().release(), "labeller": self.labeller, "labeller_shares": self.labeller_shares}

    def feature_record(self) -> dict:
        """The public description of the feature map, for the ledger: n_features, bandwidth and feature_seed of the
        pixel random Fourier features, or n_features and the blocks of a feature_maps.WeightedConcat."""
        if isinstance(self.features, mean_embedding.RandomFourierFeatures):
            return {"n_features": self.features.n_features, "bandwidth": self.features.bandwidth,
                    "feature_seed": self.features.seed}
        return {"n_features": self.features.n_features, "feature_map": feature_maps.describe(self.features)}

    def feature_identity(self) -> dict:
        if isinstance(self.features, mean_embedding.RandomFourierFeatures):
            return {"seed": self.features.seed, "bandwidth": self.features.bandwidth}
        return feature_maps.describe(self.features)

    def on_save_checkpoint(self, checkpoint):
        checkpoint[FEATURES_KEY] = self.feature_identity()

    def on_load_checkpoint(self, checkpoint):
        saved = checkpoint.get(FEATURES_KEY)
        mine = self.feature_identity()
        if saved is not None and saved != mine:
            raise CheckpointError(f"this checkpoint's release was made with random features {saved}, not {mine}: "
                                  "resume it with the same seed, method.module.bandwidth and method.module.features")

    # training

    def embedding_loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """sum_c |sum_{i: y_i = c} (phi(x_i) - m_c)|^2 / B^2: the squared distance between the generated
        embedding sum_i phi(x_i) e_{y_i}^T / B and the released means weighted by the batch's label shares."""
        return feature_maps.mmd_loss(self.features, x, y, self.target)

    def training_step(self, batch, batch_idx):
        # a mixture's members each fit the release on a batch of their own; the loss is their mean
        members = self.net_g.members if isinstance(self.net_g, GeneratorMixture) else [self.net_g]
        losses = []
        for member in members:
            y = self.sample_labels(self.batch_size)
            losses.append(self.embedding_loss(member(self.latent(self.batch_size), y), y))
        loss = torch.stack(losses).mean()
        opt = self.optimizers()
        for group in opt.param_groups:
            group["lr"] = self.step_lr()
        opt.zero_grad()
        self.manual_backward(loss)
        opt.step()
        self.log_losses({"loss_g": loss.detach()})
