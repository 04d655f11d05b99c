"""`ImageQuality`: IS / FID of the generator's images every N steps and at the end of training.

The domain classifier of the dataset (G-PATE appendix F) is loaded from its on-disk cache, or
trained on the real training set the first time; the metrics come from `dpgen.evaluation.fidelity`.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from dpgen.callbacks.downstream import EvaluationCallback
from dpgen.evaluation.fidelity import domain_classifier_for, full_recipe, image_quality


class ImageQuality(EvaluationCallback):
    """IS of `n_samples` synthetic images (uniform labels) and FID against the real `reference`
    split ("test" or "train"). Does nothing on tabular data. `results` also names the domain
    classifier (`classifier`: its weights hash) and gives its real test accuracy."""

    name = "image_quality"

    def __init__(
        self,
        every_n_steps: int = 0,
        n_samples: int = 10000,
        at_end: bool = True,
        seed: int = 0,
        reference: str = "test",
        classifier_dir: str | None = None,
        classifier_recipes: Mapping[str, Mapping] | None = None,
        cache_root: str | None = None,
        inception_weights: str | None = None,
        kid: bool = False,
    ):
        super().__init__(every_n_steps, n_samples, at_end, seed)
        if reference not in ("test", "train"):
            raise ValueError(f"reference must be 'test' or 'train', got {reference!r}")
        self.classifier_recipes = {"default": {}, **(classifier_recipes or {})}
        for recipe in self.classifier_recipes.values():
            full_recipe(recipe)  # an unknown setting fails here, not after training
        self.reference, self.classifier_dir = reference, classifier_dir
        self.cache_root, self.inception_weights, self.kid = cache_root, inception_weights, kid
        self.classifier = None
        self.classifier_info: dict = {}

    def recipe_for(self, dataset: str) -> dict:
        """How the domain classifier of `dataset` is trained: its entry of `classifier_recipes`, else "default"."""
        return full_recipe(self.classifier_recipes.get(dataset, self.classifier_recipes["default"]))

    def evaluate(self, trainer, pl_module) -> dict:
        if trainer.datamodule.test_data.x.dim() != 4:
            return {}
        x, y = self.synthetic(pl_module, torch.arange(self.n_samples) % trainer.datamodule.num_classes)
        return self.evaluate_synthetic(x, y, trainer.datamodule, pl_module.device)

    def evaluate_synthetic(self, x: torch.Tensor, y: torch.Tensor, dm, device=None) -> dict:
        """IS / FID of a given synthetic image set against the datamodule's real data (also evaluate.py's)."""
        if dm.test_data.x.dim() != 4:
            return {}
        if self.classifier is None:
            self.classifier, self.classifier_info = domain_classifier_for(
                dm.name, dm.all_train_data.x, dm.all_train_data.y, dm.test_data.x, dm.test_data.y,
                num_classes=dm.num_classes, directory=self.classifier_dir, recipe=self.recipe_for(dm.name),
                seed=self.seed, device=device, progress=True,
            )
        real = dm.test_data.x if self.reference == "test" else dm.all_train_data.x
        metrics = image_quality(
            x, real, self.classifier, inception_weights=self.inception_weights, kid=self.kid,
            cache_root=self.cache_root, device=device,
        )
        return {
            **metrics,
            "classifier": self.classifier_info["hash"],
            "classifier_test_accuracy": self.classifier_info["test_accuracy"],
        }
