"""Utility of synthetic data: train on synthetic, test on real.

Images: the CNN of G-PATE appendix E (or a Wide ResNet), its epoch chosen on a held-out part of the synthetic set,
and from the same training on a private validation split by a DP selection and, for comparison with the papers'
numbers only, on the real test set (reported apart).
Tables: the 4 sklearn models of G-PATE appendix E and the 12 of PATE-GAN Table 1 (AUROC and
AUPRC), PATE-GAN settings A / B / C (section 5.1), the Synthetic Ranking Agreement (PATE-GAN
eq. 8) and the feature-importance ranking agreement (PATE-GAN appendix, Table 6).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np
import torch
from sklearn.base import ClassifierMixin
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
from sklearn.ensemble import AdaBoostClassifier, BaggingClassifier, GradientBoostingClassifier, RandomForestClassifier
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import average_precision_score, roc_auc_score
from sklearn.naive_bayes import BernoulliNB, GaussianNB
from sklearn.neural_network import MLPClassifier
from sklearn.svm import LinearSVC
from sklearn.tree import DecisionTreeClassifier

from dpgen.evaluation.training import accuracy, train_classifier
from dpgen.nn.classifier import downstream_cnn, ptg_cnn, reference_script_cnn
from dpgen.nn.wide_resnet import downstream_wrn

CNNS = {"appendix_e": downstream_cnn, "reference_script": reference_script_cnn, "wrn": downstream_wrn, "ptg": ptg_cnn}
# How the classifier's epoch is chosen (docs/EVALUATION.md): on the synthetic hold-out, on a private validation
# split by a DP selection, or on the real test set (not DP; the papers choose so, with their own classifiers: eval=reference)
SELECTIONS = ("synthetic", "private_val", "test")


def image_accuracy(
    synth_x: torch.Tensor,
    synth_y: torch.Tensor,
    test_x: torch.Tensor,
    test_y: torch.Tensor,
    *,
    num_classes: int,
    val_fraction: float = 0.1,
    max_epochs: int = 10,
    patience: int = 3,
    batch_size: int = 128,
    optimizer: str = "adam",
    lr: float = 1e-3,
    cnn: str = "appendix_e",
    seed: int = 0,
    device=None,
    progress: bool = True,
    state_file: str | None = None,
    selection: str = "synthetic",
    private_val: tuple[torch.Tensor, torch.Tensor] | None = None,
    choose: Callable[[list[int]], int] | None = None,
) -> dict:
    """Accuracy on the real test set of the appendix E CNN (or `cnn="reference_script"`: the reference code's;
    `cnn="wrn"`: a WRN-16-2) trained on (synth_x, synth_y).

    The epoch is chosen by early stopping on a random `val_fraction` of the SYNTHETIC set (never on the real
    test set); with `val_fraction=0` the last epoch's model is tested. Returns {"accuracy", "best_epoch",
    "val_accuracy", "epochs_run", "n_train", "n_val", "max_test_accuracy", "max_test_epoch", "history"} (history:
    each epoch's loss, synthetic-validation and real-test accuracy and seconds).

    `max_test_accuracy` is the highest real-test accuracy over the epochs run: the number the reference G-PATE
    code's evaluation script prints ("Max eval acc", after 600 epochs of SGD). The test set chooses it, so it
    is optimistic and never the run's `accuracy`; it is reported for comparison with published numbers.
    `state_file`: the CNN's training continues from (and saves every epoch to) that file (`train_classifier`).

    The same training gives one epoch per protocol, each as {"accuracy", "epoch"}: "synthetic" (the hold-out's
    choice above), "test" (= max_test_accuracy) and, with `private_val` (images and labels of a validation split
    of the private training data), "private_val": the epoch `choose(counts)` picks from the epochs' correct counts
    on the split (a DP selection; the counts themselves are returned nowhere). `accuracy` is that of `selection`.
    """
    if cnn not in CNNS:
        raise ValueError(f"cnn must be one of {sorted(CNNS)}, got {cnn!r}")
    if selection not in SELECTIONS:
        raise ValueError(f"selection must be one of {SELECTIONS}, got {selection!r}")
    if (selection == "private_val" and private_val is None) or (private_val is not None) != (choose is not None):
        raise ValueError("a private validation split needs its choice of epoch (choose), and selection=private_val "
                         "needs the split")
    synth_x, synth_y = torch.as_tensor(synth_x, dtype=torch.float32), torch.as_tensor(synth_y, dtype=torch.long)
    test_x, test_y = torch.as_tensor(test_x, dtype=torch.float32), torch.as_tensor(test_y, dtype=torch.long)
    generator = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(synth_x), generator=generator)
    n_val = int(round(val_fraction * len(synth_x)))
    val, train = order[:n_val], order[n_val:]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = CNNS[cnn](synth_x.shape[1], num_classes, tuple(synth_x.shape[2:]))
    fit = train_classifier(
        model,
        synth_x[train],
        synth_y[train],
        val_x=synth_x[val],
        val_y=synth_y[val],
        test_x=test_x,
        test_y=test_y,
        private_x=None if private_val is None else torch.as_tensor(private_val[0], dtype=torch.float32),
        private_y=None if private_val is None else torch.as_tensor(private_val[1], dtype=torch.long),
        max_epochs=max_epochs,
        patience=patience,
        batch_size=batch_size,
        lr=lr,
        optimizer=optimizer,
        seed=seed,
        device=device,
        progress=progress,
        state_file=state_file,
    )
    tested = [record["test_accuracy"] for record in fit["history"]]
    chosen = {
        "synthetic": {"accuracy": accuracy(model, test_x, test_y, device=device), "epoch": fit["best_epoch"]},
        "test": {"accuracy": max(tested), "epoch": 1 + tested.index(max(tested))},
        "private_val": None,
    }
    if private_val is not None:
        epoch = 1 + choose(fit["private_correct"])
        chosen["private_val"] = {"accuracy": tested[epoch - 1], "epoch": epoch}
    return {
        "accuracy": chosen[selection]["accuracy"],
        "selection": selection,
        **chosen,
        "max_test_accuracy": chosen["test"]["accuracy"],
        "max_test_epoch": chosen["test"]["epoch"],
        "best_epoch": fit["best_epoch"],
        "val_accuracy": fit["val_accuracy"],
        "epochs_run": fit["epochs_run"],
        "n_train": len(train),
        "n_val": n_val,
        # per epoch: what each choice of epoch would have given, and the cost (a list: not logged as a scalar)
        "history": [{key: round(value, 4) if isinstance(value, float) else value for key, value in record.items()}
                    for record in fit["history"]],
    }


def gpate_models(seed: int = 0) -> dict[str, ClassifierMixin]:
    """G-PATE appendix E, "Classification Models for Kaggle Credit"."""
    return {
        # L1 penalty, liblinear, class weight 350:1 (the rare positive class weighted 350).
        "logistic_regression": LogisticRegression(l1_ratio=1.0, solver="liblinear", class_weight={0: 1, 1: 350}, random_state=seed),
        # AdaBoost and Bagging over L2 logistic regression with 200 and 100 models.
        "adaboost": AdaBoostClassifier(estimator=LogisticRegression(l1_ratio=0.0, max_iter=1000), n_estimators=200, random_state=seed),
        "bagging": BaggingClassifier(estimator=LogisticRegression(l1_ratio=0.0, max_iter=1000), n_estimators=100, random_state=seed),
        # 3 tanh layers of 18 units, Adam.
        "mlp": MLPClassifier(hidden_layer_sizes=(18, 18, 18), activation="tanh", solver="adam", max_iter=500, random_state=seed),
    }


def pategan_models(seed: int = 0) -> dict[str, ClassifierMixin]:
    """PATE-GAN Table 1 (sklearn defaults, the paper gives no settings); XGBoost when the package is installed."""
    models = {
        "logistic_regression": LogisticRegression(max_iter=1000, random_state=seed),
        "random_forest": RandomForestClassifier(random_state=seed),
        "gaussian_nb": GaussianNB(),
        "bernoulli_nb": BernoulliNB(),
        "linear_svm": LinearSVC(random_state=seed),
        "decision_tree": DecisionTreeClassifier(random_state=seed),
        "lda": LinearDiscriminantAnalysis(),
        "adaboost": AdaBoostClassifier(random_state=seed),
        "bagging": BaggingClassifier(random_state=seed),
        "gbm": GradientBoostingClassifier(random_state=seed),
        "mlp": MLPClassifier(max_iter=500, random_state=seed),
    }
    try:
        from xgboost import XGBClassifier
    except ImportError:
        return models
    models["xgboost"] = XGBClassifier(random_state=seed, n_jobs=1)
    return models


MODEL_SETS = {"gpate": gpate_models, "pategan": pategan_models}


def _scores(model: ClassifierMixin, x: np.ndarray) -> np.ndarray:
    if hasattr(model, "predict_proba"):
        return model.predict_proba(x)[:, 1]
    return model.decision_function(x)


def _metrics(labels: np.ndarray, scores: np.ndarray) -> dict[str, float]:
    if len(np.unique(labels)) < 2:
        return {"auroc": float("nan"), "auprc": float("nan")}
    return {"auroc": float(roc_auc_score(labels, scores)), "auprc": float(average_precision_score(labels, scores))}


def _numpy(a) -> np.ndarray:
    return a.detach().cpu().numpy() if isinstance(a, torch.Tensor) else np.asarray(a)


def tabular_scores(synth_x, synth_y, test_x, test_y, models: str = "gpate", seed: int = 0) -> dict:
    """Train each model of the set on (synth_x, synth_y), score on (test_x, test_y).

    Returns {model: {"auroc", "auprc"}, ..., "average": {"auroc", "auprc"}}. A training set
    with a single class gives every test record the same score (AUROC 0.5, AUPRC = positive
    rate); a test set with a single class gives NaN (the metrics are undefined).
    """
    synth_x, test_x = _numpy(synth_x).astype(np.float64), _numpy(test_x).astype(np.float64)
    synth_y, test_y = _numpy(synth_y).astype(np.int64).ravel(), _numpy(test_y).astype(np.int64).ravel()
    single_class = len(np.unique(synth_y)) < 2
    out = {}
    for name, model in MODEL_SETS[models](seed).items():
        if single_class:
            scores = np.full(len(test_y), float(synth_y[0]))
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                scores = _scores(model.fit(synth_x, synth_y), test_x)
        out[name] = _metrics(test_y, scores)
    out["average"] = {key: float(np.mean([m[key] for m in out.values()])) for key in ("auroc", "auprc")}
    return out


def synthetic_ranking_agreement(a, c) -> float:
    """PATE-GAN eq. 8: 1/(L(L-1)) sum_j sum_{k != j} 1[(A_j - A_k)(C_j - C_k) > 0].

    `a`, `c`: the performances (or any scores) of the same L items in two settings, as
    sequences in the same order or as dicts with the same keys.
    """
    if isinstance(a, dict):
        keys = list(a)
        a, c = [a[k] for k in keys], [c[k] for k in keys]
    a, c = np.asarray(a, dtype=np.float64), np.asarray(c, dtype=np.float64)
    if a.shape != c.shape or a.ndim != 1 or len(a) < 2:
        raise ValueError(f"need two equal-length 1-d score lists of at least 2 items, got {a.shape} and {c.shape}")
    agree = (a[:, None] - a[None, :]) * (c[:, None] - c[None, :]) > 0
    return float(agree.sum() / (len(a) * (len(a) - 1)))


def feature_importance(x, y) -> np.ndarray:
    """|Pearson correlation| of each feature with the label (PATE-GAN appendix); 0 for constant features."""
    x, y = _numpy(x).astype(np.float64), _numpy(y).astype(np.float64).ravel()
    xc, yc = x - x.mean(axis=0), y - y.mean()
    denominator = np.sqrt((xc**2).sum(axis=0) * (yc**2).sum())
    with np.errstate(invalid="ignore", divide="ignore"):
        correlation = (xc * yc[:, None]).sum(axis=0) / denominator
    return np.nan_to_num(np.abs(correlation), nan=0.0)


def feature_ranking_agreement(real_x, real_y, synth_x, synth_y) -> float:
    """PATE-GAN appendix Table 6: eq. 8 with feature importances in place of model performances."""
    return synthetic_ranking_agreement(feature_importance(real_x, real_y), feature_importance(synth_x, synth_y))


def tabular_evaluation(
    real_train_x, real_train_y, real_test_x, real_test_y, synth_x, synth_y, *, models: str = "pategan", synth_test_fraction: float = 0.2, seed: int = 0
) -> dict:
    """PATE-GAN section 5: settings A (real/real), B (synthetic/real), C (synthetic/synthetic) and the agreements.

    The synthetic set is split once into disjoint train / test parts (`synth_test_fraction`);
    B and C both train on the synthetic train part. SRA compares A with C (eq. 8) per metric.
    """
    synth_x, synth_y = _numpy(synth_x), _numpy(synth_y).ravel()
    order = np.random.default_rng(seed).permutation(len(synth_x))
    n_test = int(round(synth_test_fraction * len(synth_x)))
    test, train = order[:n_test], order[n_test:]
    settings = {
        "A": tabular_scores(real_train_x, real_train_y, real_test_x, real_test_y, models, seed),
        "B": tabular_scores(synth_x[train], synth_y[train], real_test_x, real_test_y, models, seed),
        "C": tabular_scores(synth_x[train], synth_y[train], synth_x[test], synth_y[test], models, seed),
    }
    names = [name for name in settings["A"] if name != "average"]
    return {
        **settings,
        "sra": {
            key: synthetic_ranking_agreement([settings["A"][n][key] for n in names], [settings["C"][n][key] for n in names])
            for key in ("auroc", "auprc")
        },
        "feature_ranking_agreement": feature_ranking_agreement(real_train_x, real_train_y, synth_x, synth_y),
    }
