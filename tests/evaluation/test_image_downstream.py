import re

import pytest
import torch

from dpgen.evaluation.downstream import image_accuracy
from dpgen.evaluation.training import accuracy, train_classifier
from dpgen.nn.classifier import CNNClassifier, KerasDropout, downstream_cnn, reference_script_cnn


def test_cnn_shapes_and_features():
    model = downstream_cnn(3, 2, (32, 32))
    x = torch.rand(5, 3, 32, 32)
    assert model(x).shape == (5, 2)
    assert model.features(x).shape == (5, 128)
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    assert [c.out_channels for c in convs] == [32, 64]  # appendix E: 32 and 64 kernels
    assert sum(isinstance(m, torch.nn.Dropout) for m in model.modules()) == 3  # dropout on all layers


def test_the_reference_scripts_cnn_layer_by_layer():
    model = reference_script_cnn(1, 10, 28)
    x = torch.rand(5, 1, 28, 28)
    assert model(x).shape == (5, 10)
    shapes = [tuple(p.shape) for p in model.parameters()]  # Keras: valid 3x3 convs, one pool, dense 64
    assert shapes == [(32, 1, 3, 3), (32,), (64, 32, 3, 3), (64,), (64, 64 * 11 * 11), (64,), (10, 64), (10,)]
    assert [m.p for m in model if isinstance(m, torch.nn.Dropout)] == [0.2, 0.25]
    assert all(not b.any() for name, b in model.named_parameters() if name.endswith("bias"))
    fc = model[8].weight  # Glorot uniform: bound sqrt(6 / (fan_in + fan_out))
    assert fc.abs().max() <= (6 / (7744 + 64)) ** 0.5 < 3 * fc.std()


def test_the_reference_cnn_pools_before_relu_as_the_script_relus_before_pooling():
    """Max-pool then ReLU (reference_script_cnn) against the script's ReLU then max-pool, same weights and dropout
    masks: the same logits and the same gradients, bit for bit."""
    model = reference_script_cnn(1, 10, 28)
    script = torch.nn.Sequential(*[model[i] for i in (0, 2, 1, *range(3, len(model)))])
    x = torch.randn(64, 1, 28, 28)
    for train in (False, True):
        grads = []
        for net in (model, script):
            net.train(train)
            net.zero_grad()
            torch.manual_seed(0)  # the same dropout masks in both
            out = net(x)
            out.square().sum().backward()
            grads.append((out.detach(), [p.grad.clone() for p in net.parameters()]))
        assert torch.equal(grads[0][0], grads[1][0])
        assert all(torch.equal(a, b) for a, b in zip(grads[0][1], grads[1][1]))


def test_keras_dropout_keeps_where_a_uniform_draw_reaches_p():
    """Kept where torch.rand >= p (TensorFlow's keep mask), scaled by 1 / (1 - p); identity in eval mode."""
    drop = KerasDropout(0.25)
    x = torch.rand(200, 500) + 1
    torch.manual_seed(3)
    out = drop(x)
    torch.manual_seed(3)
    keep = torch.rand_like(x) >= 0.25
    assert torch.equal(out != 0, keep)
    torch.testing.assert_close(out[keep], x[keep] / 0.75)
    assert abs(keep.float().mean().item() - 0.75) < 0.005  # 100,000 draws: sd 0.0014
    assert torch.equal(drop.eval()(x), x)


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


def test_max_test_accuracy_is_the_best_epoch_on_the_test_set_and_is_reported_apart(mnist):
    """The reference script's number: without a hold-out the last epoch's model is tested (`accuracy`); the
    highest test accuracy over the epochs is `max_test_accuracy`, that of the model stopped at its epoch."""
    x, y = mnist["train"]
    kwargs = dict(num_classes=10, val_fraction=0.0, optimizer="sgd", lr=0.05, batch_size=64, cnn="reference_script",
                  progress=False, device="cpu")  # bit-for-bit equal runs: GPU kernels do not repeat exactly
    long = image_accuracy(x[:400], y[:400], *mnist["test"], max_epochs=5, **kwargs)
    assert long["n_val"] == 0 and long["epochs_run"] == 5 and 1 <= long["max_test_epoch"] <= 5
    short = image_accuracy(x[:400], y[:400], *mnist["test"], max_epochs=long["max_test_epoch"], **kwargs)
    assert short["accuracy"] == long["max_test_accuracy"] >= long["accuracy"] > 0.2
    with pytest.raises(ValueError, match="cnn must be one of"):
        image_accuracy(x[:8], y[:8], x[:8], y[:8], num_classes=10, cnn="vgg")


def test_sgd_is_plain_sgd_and_unknown_optimizers_are_refused(mnist):
    x, y = mnist["train"]
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 10))
    by_hand = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 10))
    by_hand.load_state_dict(model.state_dict())
    train_classifier(model, x[:64], y[:64], max_epochs=1, batch_size=64, lr=0.1, optimizer="sgd", device="cpu")  # 1 step
    torch.nn.functional.cross_entropy(by_hand(x[:64]), y[:64]).backward()
    for p, q in zip(model.parameters(), by_hand.parameters()):
        assert torch.allclose(p, q - 0.1 * q.grad, atol=1e-6)  # p - lr * grad: no momentum, no decay
    with pytest.raises(ValueError, match="optimizer must be one of"):
        train_classifier(model, x[:8], y[:8], max_epochs=1, optimizer="adamw")


def test_training_restores_the_best_validation_epoch_and_keeps_the_callers_rng(mnist):
    x, y = mnist["train"]
    model = CNNClassifier(1, 10, 28, hidden=32)
    state = torch.get_rng_state()
    fit = train_classifier(model, x[:300], y[:300], val_x=x[300:400], val_y=y[300:400], max_epochs=4, lr=3e-3)
    assert torch.equal(torch.get_rng_state(), state)
    best = max(fit["history"], key=lambda r: r["val_accuracy"])
    assert fit["best_epoch"] == best["epoch"]
    assert accuracy(model, x[300:400], y[300:400]) == best["val_accuracy"] == fit["val_accuracy"]


def halves(n: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    """1x2x2 images with one bright pixel: class 0 has it on the left, class 1 on the right."""
    y = torch.arange(n) % 2
    x = torch.zeros(n, 1, 2, 2)
    x[torch.arange(n), 0, torch.arange(n) // 2 % 2, y] = 1.0  # the row says nothing of the class
    return x, y


def test_flip_mirrors_the_training_images():
    """A class told only by left / right cannot be learnt when every image may be mirrored; it is without flips."""
    x, y = halves()
    results = {}
    for flip in (False, True):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 2))
        train_classifier(model, x, y, max_epochs=30, batch_size=32, lr=0.05, flip=flip)
        results[flip] = accuracy(model, x, y)
    assert results[False] == 1.0 and results[True] < 0.75


def test_cosine_decays_the_learning_rate_along_the_epochs():
    """One batch per epoch: the cosine schedule over 3 epochs takes steps at lr x (1, 3/4, 1/4), as a hand-run Adam."""
    x, y = halves(16)
    torch.manual_seed(0)
    scheduled = torch.nn.Linear(4, 2)
    by_hand = torch.nn.Linear(4, 2)
    by_hand.load_state_dict(scheduled.state_dict())
    train_classifier(torch.nn.Sequential(torch.nn.Flatten(), scheduled), x, y, max_epochs=3, batch_size=16, lr=0.1,
                     cosine=True, device="cpu")
    optimizer = torch.optim.Adam(by_hand.parameters(), lr=0.1)
    for factor in (1.0, 0.75, 0.25):  # (1 + cos(pi t / 3)) / 2 for t = 0, 1, 2
        optimizer.param_groups[0]["lr"] = 0.1 * factor
        loss = torch.nn.functional.cross_entropy(by_hand(x.flatten(1)), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    for a, b in zip(scheduled.parameters(), by_hand.parameters()):
        torch.testing.assert_close(a, b)


def test_a_killed_classifier_training_continues_from_its_state_file_to_the_same_end(mnist, tmp_path, monkeypatch):
    """Killed after its second epoch, the training re-run with the same state file ends with the weights and
    history of an uninterrupted one (dropout, shuffling and the best-epoch choice included); the file is removed
    at the end, and a file written for other settings is refused."""
    from dpgen.evaluation import training

    x, y = mnist["train"]
    kwargs = dict(val_x=x[300:400], val_y=y[300:400], test_x=x[400:500], test_y=y[400:500], max_epochs=4,
                  batch_size=64, lr=0.05, optimizer="sgd", device="cpu")  # bit-for-bit: not on a GPU

    def fit(state_file=None):
        torch.manual_seed(0)
        model = reference_script_cnn(1, 10, 28)
        return model, train_classifier(model, x[:300], y[:300], state_file=state_file, **kwargs)

    whole, whole_fit = fit()
    state = tmp_path / "cnn-state.pt"
    save, saves = training.Resumable.save, []

    def save_then_die(self, *args):
        save(self, *args)
        saves.append(len(args[3]))
        if len(saves) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(training.Resumable, "save", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        fit(state)
    assert state.is_file() and saves == [1, 2]
    with pytest.raises(ValueError, match="with other settings"):
        train_classifier(reference_script_cnn(1, 10, 28), x[:300], y[:300], state_file=state, **{**kwargs, "lr": 0.01})
    with pytest.raises(ValueError, match="of other data") as refused:  # the data's digest is never shown
        train_classifier(reference_script_cnn(1, 10, 28), x[:299], y[:299], state_file=state, **kwargs)
    assert not re.search("[0-9a-f]{64}", str(refused.value))
    monkeypatch.setattr(training.Resumable, "save", save)
    resumed, resumed_fit = fit(state)
    assert not state.exists()
    def untimed(fit):
        return {**fit, "history": [{k: v for k, v in r.items() if k != "seconds"} for r in fit["history"]]}

    assert untimed(resumed_fit) == untimed(whole_fit)
    assert all(r["seconds"] > 0 for r in resumed_fit["history"])
    assert [r["epoch"] for r in resumed_fit["history"]] == [1, 2, 3, 4]
    for a, b in zip(whole.state_dict().values(), resumed.state_dict().values()):
        assert torch.equal(a, b)


def test_one_training_gives_the_epoch_of_every_protocol_and_hands_only_the_counts_to_the_choice(mnist):
    """The private split's correct counts per epoch go to `choose` and nowhere else; with the test set as the split
    they are the history's test accuracies times its size (an independent count). Each protocol's accuracy is that
    of its epoch, and `accuracy` follows `selection`."""
    x, y = mnist["train"]
    test_x, test_y = (t[:300] for t in mnist["test"])
    seen = []

    def choose(counts):
        seen.append(list(counts))
        return 0  # the first epoch, whatever the counts

    kwargs = dict(num_classes=10, max_epochs=2, patience=None, progress=False, device="cpu")
    result = image_accuracy(x[:200], y[:200], test_x, test_y, selection="private_val", private_val=(test_x, test_y),
                            choose=choose, **kwargs)
    (counts,) = seen
    history = result["history"]
    assert len(counts) == result["epochs_run"] == 2 and all(isinstance(c, int) for c in counts)
    assert [round(c / len(test_y), 4) for c in counts] == [r["test_accuracy"] for r in history]
    assert result["private_val"]["epoch"] == 1 and result["accuracy"] == result["private_val"]["accuracy"]
    assert result["private_val"]["accuracy"] == pytest.approx(history[0]["test_accuracy"], abs=1e-4)
    assert result["synthetic"]["epoch"] == result["best_epoch"]
    assert result["test"] == {"accuracy": result["max_test_accuracy"], "epoch": result["max_test_epoch"]}
    assert all(set(r) == {"epoch", "loss", "val_accuracy", "test_accuracy", "seconds"} for r in history)
    plain = image_accuracy(x[:200], y[:200], test_x, test_y, selection="test", **kwargs)  # the same, no split
    assert plain["private_val"] is None and plain["selection"] == "test"
    assert plain["accuracy"] == plain["max_test_accuracy"] == result["max_test_accuracy"]
    assert plain["synthetic"] == result["synthetic"]
    with pytest.raises(ValueError, match="needs the split"):
        image_accuracy(x[:8], y[:8], x[:8], y[:8], num_classes=10, selection="private_val")
    with pytest.raises(ValueError, match="selection must be one of"):
        image_accuracy(x[:8], y[:8], x[:8], y[:8], num_classes=10, selection="best")


def test_the_wide_resnet_option_trains_and_predicts_every_class():
    from dpgen.nn.wide_resnet import WideResNet, downstream_wrn

    model = downstream_wrn(1, 10, 28)
    assert model(torch.rand(3, 1, 28, 28)).shape == (3, 10)
    assert sum(p.numel() for p in model.parameters()) == 691_386  # WRN-16-2
    assert sum(p.numel() for p in WideResNet(3, 10, depth=16, widen=4).parameters()) == 2_748_890  # WRN-16-4
    with pytest.raises(ValueError, match="6n \\+ 4"):
        WideResNet(1, 10, depth=12)
    x, y = halves(64)
    result = image_accuracy(x, y, x, y, num_classes=2, cnn="wrn", max_epochs=8, batch_size=16, lr=1e-2,
                            val_fraction=0.0, progress=False, device="cpu")
    assert result["accuracy"] == 1.0  # left / right bright pixel: learnt
