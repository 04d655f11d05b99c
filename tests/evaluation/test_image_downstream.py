import torch

from dpgen.evaluation.downstream import image_accuracy
from dpgen.evaluation.training import accuracy, train_classifier
from dpgen.nn.classifier import CNNClassifier, downstream_cnn


def test_cnn_shapes_and_features():
    model = downstream_cnn(3, 2, (32, 32))
    x = torch.rand(5, 3, 32, 32)
    assert model(x).shape == (5, 2)
    assert model.features(x).shape == (5, 128)
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    assert [c.out_channels for c in convs] == [32, 64]  # appendix E: 32 and 64 kernels
    assert sum(isinstance(m, torch.nn.Dropout) for m in model.modules()) == 3  # dropout on all layers


def test_cnn_on_few_hundred_real_images_beats_chance(mnist):
    x, y = mnist["train"]
    result = image_accuracy(x[:600], y[:600], *mnist["test"], num_classes=10, max_epochs=6, patience=2, progress=False)
    assert result["accuracy"] > 0.5  # chance is 0.1
    assert result["n_train"] == 540 and result["n_val"] == 60
    assert 1 <= result["best_epoch"] <= result["epochs_run"] <= 6


def test_model_selection_never_looks_at_the_test_labels(mnist):
    """Shuffled test labels change only the reported accuracy, not the epoch chosen or its validation score."""
    x, y = mnist["train"]
    test_x, test_y = mnist["test"]
    kwargs = dict(num_classes=10, max_epochs=4, patience=1, progress=False)
    honest = image_accuracy(x[:400], y[:400], test_x, test_y, **kwargs)
    shuffled = image_accuracy(x[:400], y[:400], test_x, test_y[torch.randperm(len(test_y))], **kwargs)
    assert (honest["best_epoch"], honest["val_accuracy"]) == (shuffled["best_epoch"], shuffled["val_accuracy"])
    assert shuffled["accuracy"] < 0.2 < honest["accuracy"]


def test_training_restores_the_best_validation_epoch_and_keeps_the_callers_rng(mnist):
    x, y = mnist["train"]
    model = CNNClassifier(1, 10, 28, hidden=32)
    state = torch.get_rng_state()
    fit = train_classifier(model, x[:300], y[:300], val_x=x[300:400], val_y=y[300:400], max_epochs=4, lr=3e-3)
    assert torch.equal(torch.get_rng_state(), state)
    best = max(fit["history"], key=lambda r: r["val_accuracy"])
    assert fit["best_epoch"] == best["epoch"]
    assert accuracy(model, x[300:400], y[300:400]) == best["val_accuracy"] == fit["val_accuracy"]
