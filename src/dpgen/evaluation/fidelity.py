"""IS and FID of synthetic images through torch-fidelity, with domain classifiers (G-PATE appendix F).

Appendix F (following GS-WGAN) computes IS and FID with classifiers trained on the real data
of each dataset (99% / 93% / 97% test accuracy on MNIST / Fashion-MNIST / CelebA-Gender)
instead of Inception. Such a classifier is registered with torch-fidelity as a feature
extractor: its logits feed IS, its penultimate layer feeds FID (and KID). Nothing here needs
the network. Standard Inception IS / FID / KID run too when an Inception weights file is given.
"""

from __future__ import annotations

import copy
import hashlib
import os
import time
from collections.abc import Mapping
from pathlib import Path

import torch
import torch_fidelity
from torch.utils.data import Dataset
from torch_fidelity.feature_extractor_base import FeatureExtractorBase
from torch_fidelity.registry import FEATURE_EXTRACTORS_REGISTRY

from dpgen.evaluation.training import accuracy, resolve_device, train_classifier
from dpgen.nn.classifier import CNNClassifier, domain_classifier

FEATURES = ("logits", "penultimate")
# Domain classifiers shipped with dpgen, so that a first run need not train one (docs/EVALUATION.md)
SHIPPED = Path(__file__).resolve().parent / "classifiers"
# How a domain classifier is trained (`train_classifier` settings); part of its cache key. A cached file without
# an entry was trained with its default here.
RECIPE = {"epochs": 3, "flip": False, "cosine": False, "channels": (32, 64)}


def full_recipe(recipe: Mapping | None) -> dict:
    """`recipe` with RECIPE's defaults filled in; ValueError on a setting RECIPE does not have."""
    recipe = dict(recipe or {})
    unknown = sorted(set(recipe) - set(RECIPE))
    if unknown:
        raise ValueError(f"domain classifier recipe: unknown settings {unknown}; known: {sorted(RECIPE)}")
    recipe = {**RECIPE, **recipe}
    channels = tuple(recipe["channels"])  # a config list and a cached tuple are the same recipe
    if len(channels) != 2 or not all(isinstance(c, int) and c > 0 for c in channels):
        raise ValueError(f"domain classifier recipe: channels must be two positive integers, got {recipe['channels']}")
    return {**recipe, "channels": channels}


def cache_dir() -> Path:
    """Root of dpgen's evaluation caches: $DPGEN_CACHE or ~/.cache/dpgen."""
    return Path(os.environ.get("DPGEN_CACHE", "~/.cache/dpgen")).expanduser()


def weights_hash(model: CNNClassifier) -> str:
    """sha256 (hex, 16 chars) of the architecture settings and every tensor of the state dict."""
    digest = hashlib.sha256(repr(sorted(model.config.items())).encode())
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


def tensor_hash(x: torch.Tensor) -> str:
    digest = hashlib.sha256(repr((tuple(x.shape), str(x.dtype))).encode())
    digest.update(x.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


def save_classifier(model: CNNClassifier, dataset: str, directory: str | Path, info: dict) -> Path:
    """Write `<directory>/<dataset>-<weights hash>.pt` with the architecture, weights and `info`."""
    key = weights_hash(model)
    path = Path(directory) / f"{dataset}-{key}.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"config": model.config, "state_dict": model.state_dict(), "hash": key, "info": {**info, "dataset": dataset}}
    torch.save(payload, path.with_suffix(".tmp"))
    os.replace(path.with_suffix(".tmp"), path)
    return path


def load_classifier(path: str | Path) -> tuple[CNNClassifier, dict]:
    """Load a classifier written by `save_classifier`; raises ValueError if its weights do not match the hash."""
    payload = torch.load(path, map_location="cpu", weights_only=False)
    model = CNNClassifier(**payload["config"])
    model.load_state_dict(payload["state_dict"])
    model.eval()
    if weights_hash(model) != payload["hash"]:
        raise ValueError(f"{path}: weights do not match their recorded hash {payload['hash']}")
    return model, {**payload["info"], "hash": payload["hash"], "path": str(path)}


def train_domain_classifier(
    train_x: torch.Tensor,
    train_y: torch.Tensor,
    test_x: torch.Tensor,
    test_y: torch.Tensor,
    *,
    num_classes: int,
    recipe: Mapping | None = None,
    batch_size: int = 128,
    seed: int = 0,
    device=None,
    progress: bool = True,
) -> tuple[CNNClassifier, dict]:
    """Train the domain classifier on the real training set as `recipe` says (RECIPE: epochs, flips, cosine
    learning-rate decay, the two conv layers' channels), for a fixed number of epochs (no model selection)."""
    recipe = full_recipe(recipe)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = domain_classifier(train_x.shape[1], num_classes, tuple(train_x.shape[2:]),
                                  channels=recipe["channels"])
    start = time.perf_counter()
    train_classifier(model, train_x, train_y, max_epochs=recipe["epochs"], flip=recipe["flip"], cosine=recipe["cosine"],
                     batch_size=batch_size, seed=seed, device=device, progress=progress)
    seconds = time.perf_counter() - start
    model.cpu()
    info = {"test_accuracy": accuracy(model, test_x, test_y), "train_seconds": seconds, **recipe, "n_train": len(train_x),
            "train_data": tensor_hash(train_x)}
    return model, info


def domain_classifier_for(
    dataset: str,
    train_x: torch.Tensor,
    train_y: torch.Tensor,
    test_x: torch.Tensor,
    test_y: torch.Tensor,
    *,
    num_classes: int,
    directory: str | Path | None = None,
    recipe: Mapping | None = None,
    seed: int = 0,
    device=None,
    progress: bool = True,
) -> tuple[CNNClassifier, dict]:
    """The cached domain classifier of `dataset` (newest `<dataset>-<hash>.pt` in `directory` whose
    architecture fits the data and that was trained by `recipe`), trained on the real training set and
    cached on a miss. `directory` defaults to `cache_dir() / "classifiers"`, and then the classifiers shipped
    with dpgen (SHIPPED) are also used, each only for the very training set it was trained on."""
    recipe = full_recipe(recipe)
    wanted = {"in_channels": train_x.shape[1], "num_classes": num_classes, "image_size": tuple(train_x.shape[2:])}

    def fits(model, info) -> bool:
        trained_by = {key: info.get(key, default) for key, default in RECIPE.items()}
        return all(model.config[key] == value for key, value in wanted.items()) and trained_by == recipe

    shipped = [] if directory is not None else sorted(SHIPPED.glob(f"{dataset}-*.pt"))
    directory = Path(directory) if directory is not None else cache_dir() / "classifiers"
    for path in sorted(directory.glob(f"{dataset}-*.pt"), key=lambda p: p.stat().st_mtime, reverse=True):
        model, info = load_classifier(path)
        if fits(model, info):
            return model, info
    data = tensor_hash(train_x) if shipped else None
    for path in shipped:
        model, info = load_classifier(path)
        if fits(model, info) and info.get("train_data") == data:
            return model, info
    model, info = train_domain_classifier(
        train_x, train_y, test_x, test_y, num_classes=num_classes, recipe=recipe, seed=seed, device=device, progress=progress
    )
    path = save_classifier(model, dataset, directory, info)
    return model, {**info, "dataset": dataset, "hash": weights_hash(model), "path": str(path)}


def register_classifier(classifier: CNNClassifier) -> str:
    """Register `classifier` with torch-fidelity as a feature extractor; returns its name.

    Features: "logits" (IS, appendix F) and "penultimate" (FID, KID). The name carries the
    weights hash, so torch-fidelity's caches of real statistics follow the classifier.
    """
    name = f"dpgen-domain-{weights_hash(classifier)}"
    if name in FEATURE_EXTRACTORS_REGISTRY:
        return name
    frozen = copy.deepcopy(classifier).cpu().eval()

    class DomainFeatures(FeatureExtractorBase):
        def __init__(self, name, features_list, **kwargs):
            super().__init__(name, features_list)
            self.classifier = copy.deepcopy(frozen)

        @staticmethod
        def get_provided_features_list():
            return FEATURES

        @staticmethod
        def get_default_feature_layer_for_metric(metric):
            return "logits" if metric == "isc" else "penultimate"

        @staticmethod
        def can_be_compiled():
            return False

        def forward(self, x):
            # G-PATE appendix F: IS from the real-data classifier's logits; FID from its penultimate features.
            penultimate = self.classifier.features(x.float())
            features = {"logits": self.classifier.head(penultimate), "penultimate": penultimate}
            return tuple(features[name] for name in self.features_list)

    torch_fidelity.register_feature_extractor(name, DomainFeatures)
    return name


class ImageTensors(Dataset):
    """Images (N,C,H,W) in [0,1] as torch-fidelity input: as they are, or as uint8 RGB for Inception."""

    def __init__(self, x: torch.Tensor, uint8_rgb: bool = False):
        self.x, self.uint8_rgb = x, uint8_rgb

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        image = self.x[i]
        if not self.uint8_rgb:
            return image
        image = (image * 255).round().clamp(0, 255).to(torch.uint8)
        return image.expand(3, *image.shape[1:]) if image.shape[0] == 1 else image


def image_quality(
    synth_x: torch.Tensor,
    real_x: torch.Tensor,
    classifier: CNNClassifier,
    *,
    inception_weights: str | Path | None = None,
    kid: bool = False,
    cache_root: str | Path | None = None,
    isc_splits: int = 10,
    batch_size: int = 256,
    device=None,
) -> dict:
    """IS of `synth_x` and FID of `synth_x` against `real_x` with the domain classifier's features.

    Real-data features and statistics are cached by torch-fidelity under `cache_root`
    (default `cache_dir() / "fidelity"`), keyed by a hash of `real_x` and the classifier's
    weights hash. With `inception_weights` (a torch-fidelity Inception-v3 .pth file) also
    standard Inception IS / FID / KID, prefixed "inception_". Returns {"IS", "IS_std", "FID", ...}.
    """
    synth_x, real_x = torch.as_tensor(synth_x, dtype=torch.float32), torch.as_tensor(real_x, dtype=torch.float32)
    cuda = resolve_device(device).type == "cuda"
    common = dict(
        cuda=cuda,
        batch_size=batch_size,
        isc_splits=min(isc_splits, len(synth_x)),
        cache_root=str(cache_root if cache_root is not None else cache_dir() / "fidelity"),
        save_cpu_ram=True,
        verbose=False,
    )
    real_key = f"dpgen-real-{tensor_hash(real_x)}"
    metrics = torch_fidelity.calculate_metrics(
        input1=ImageTensors(synth_x),
        input2=ImageTensors(real_x),
        input2_cache_name=real_key,
        feature_extractor=register_classifier(classifier),
        isc=True,
        fid=True,
        kid=kid,
        kid_subset_size=min(1000, len(synth_x), len(real_x)),
        **common,
    )
    out = _rename(metrics, "")
    if inception_weights is not None:
        out.update(_inception_quality(synth_x, real_x, Path(inception_weights), real_key, kid, common))
    return out


def _inception_quality(synth_x, real_x, weights: Path, real_key: str, kid: bool, common: dict) -> dict:
    if not weights.is_file():
        raise FileNotFoundError(
            f"Inception weights file {weights} not found: give the path of torch-fidelity's "
            "weights-inception-2015-12-05-6726825d.pth (it cannot be downloaded here), or leave inception_weights unset"
        )
    metrics = torch_fidelity.calculate_metrics(
        input1=ImageTensors(synth_x, uint8_rgb=True),
        input2=ImageTensors(real_x, uint8_rgb=True),
        input2_cache_name=f"{real_key}-{hashlib.sha256(weights.read_bytes()).hexdigest()[:16]}",
        feature_extractor="inception-v3-compat",
        feature_extractor_weights_path=str(weights),
        isc=True,
        fid=True,
        kid=kid,
        kid_subset_size=min(1000, len(synth_x), len(real_x)),
        **common,
    )
    return _rename(metrics, "inception_")


def _rename(metrics: dict, prefix: str) -> dict:
    names = {
        torch_fidelity.KEY_METRIC_ISC_MEAN: "IS",
        torch_fidelity.KEY_METRIC_ISC_STD: "IS_std",
        torch_fidelity.KEY_METRIC_FID: "FID",
        torch_fidelity.KEY_METRIC_KID_MEAN: "KID",
        torch_fidelity.KEY_METRIC_KID_STD: "KID_std",
    }
    return {prefix + names[key]: float(value) for key, value in metrics.items() if key in names}
