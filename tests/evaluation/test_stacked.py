"""Classifiers trained together (evaluation/stacked.py) against each trained alone, a killed stacked training
resumed to the same end, and real learning of the authors' CNN on real digits."""
import pytest
import torch
from torch import nn

from dpgen.evaluation import training
from dpgen.evaluation.stacked import stalled, train_stacked
from dpgen.evaluation.training import train_classifier
from dpgen.nn.classifier import reference_script_cnn


def small_net(seed: int) -> nn.Module:  # no dropout: its masks are the one thing a stacked model draws differently
    torch.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(4 * 13 * 13, 10))


@pytest.mark.parametrize("vectorize", [True, False])
def test_each_stacked_model_is_trained_as_it_would_be_alone(mnist, vectorize):
    """Three models, each with its own data, learning rate and seed (its order): the stacked training, vectorized
    or model by model, gives each the weights, losses and test accuracies of `train_classifier(optimizer="sgd")` on
    its own data, up to float rounding (the accuracies exactly)."""
    x, y = mnist["train"]
    test_x, test_y = mnist["test"]
    data = [(x[i * 200:(i + 1) * 200], y[i * 200:(i + 1) * 200]) for i in range(3)]  # a partial last batch: 200 % 64
    lrs, seeds = [0.1, 0.05, 0.2], [0, 1, 2]
    trained, histories = train_stacked([small_net(s) for s in seeds], [d[0] for d in data], [d[1] for d in data],
                                       [test_x[:300]] * 3, [test_y[:300]] * 3, lrs=lrs, seeds=seeds, max_epochs=3,
                                       batch_size=64, device="cpu", vectorize=vectorize)
    for i, (xi, yi) in enumerate(data):
        alone = small_net(seeds[i])
        fit = train_classifier(alone, xi, yi, test_x=test_x[:300], test_y=test_y[:300], max_epochs=3, batch_size=64,
                               lr=lrs[i], optimizer="sgd", seed=seeds[i], device="cpu")
        for a, b in zip(alone.state_dict().values(), trained[i].state_dict().values()):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
        assert [r["test_accuracy"] for r in histories[i]] == [r["test_accuracy"] for r in fit["history"]]
        assert [r["loss"] for r in histories[i]] == pytest.approx([r["loss"] for r in fit["history"]], rel=1e-5)
    assert histories[0][-1]["loss"] != histories[1][-1]["loss"]  # the models do differ


def two_authors_cnns(mnist, lrs, max_epochs, vectorize, **resumable):
    """Two of the authors' CNNs (seeds 0 and 1) trained stacked on 128 real digits each, tested on 100."""
    x, y = mnist["train"]
    test_x, test_y = mnist["test"]
    models = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        models.append(reference_script_cnn(1, 10, 28))
    return train_stacked(models, [x[:128], x[128:256]], [y[:128], y[128:256]], [test_x[:100]] * 2, [test_y[:100]] * 2,
                         lrs=list(lrs), seeds=[0, 1], max_epochs=max_epochs, batch_size=64, device="cpu",
                         vectorize=vectorize, **resumable)


def untimed(histories):
    """Histories without their wall seconds (which differ from run to run)."""
    return [[{k: v for k, v in r.items() if k != "seconds"} for r in h] for h in histories]


@pytest.mark.parametrize("vectorize", [True, False])
def test_a_killed_stacked_training_continues_to_the_same_end(mnist, tmp_path, monkeypatch, vectorize):
    """Killed after its first epoch and called again with the state file: the same weights and histories as an
    uninterrupted training (dropout masks and each model's order included); the file is removed at the end and one
    of other settings is refused."""
    def fit(state=None, lrs=(0.05, 0.1)):
        return two_authors_cnns(mnist, lrs, 3, vectorize, state_file=state)

    whole, whole_histories = fit()
    state = tmp_path / "stacked-state.pt"
    save = training.Resumable.save

    def save_then_die(self, *args):
        save(self, *args)
        raise KeyboardInterrupt

    monkeypatch.setattr(training.Resumable, "save", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        fit(state)
    monkeypatch.setattr(training.Resumable, "save", save)
    with pytest.raises(ValueError, match="with other settings"):
        fit(state, lrs=(0.05, 0.2))
    resumed, resumed_histories = fit(state)
    assert not state.exists()
    assert untimed(resumed_histories) == untimed(whole_histories)
    for a_model, b_model in zip(whole, resumed):
        for a, b in zip(a_model.state_dict().values(), b_model.state_dict().values()):
            assert torch.equal(a, b)


def test_stalled_counts_epochs_since_each_models_first_best():
    def history(*per_model):
        return [{"test_accuracy": list(epoch)} for epoch in zip(*per_model)]

    # model 0: best 0.5 first at epoch 2 (the tie at epoch 4 is not a gain), 3 epochs since; model 1: best at epoch 5
    still_learning = history([0.1, 0.5, 0.4, 0.5, 0.3], [0.1, 0.2, 0.3, 0.4, 0.6])
    assert stalled(still_learning, 3) is False  # model 1 gained at the last epoch
    assert stalled(history([0.1, 0.5, 0.4, 0.5, 0.3]), 3) is True
    assert stalled(history([0.1, 0.5, 0.4, 0.5, 0.3]), 4) is False
    assert stalled([], 1) is False
    with pytest.raises(ValueError, match="at least 1"):
        stalled(still_learning, 0)


def test_a_training_stopped_by_patience_keeps_its_state_and_continues_to_the_last_epoch(mnist, tmp_path):
    """Two models that cannot gain (lr 0: the same test accuracy every epoch) stop `patience` epochs after their
    first one, the state file kept; a call without patience continues it to the same histories (the dropout masks'
    stream included) and weights as a training never stopped, and removes the file."""
    def fit(state=None, patience=None):
        return two_authors_cnns(mnist, (0.0, 0.0), 5, False, state_file=state, patience=patience)

    _, whole = fit()
    state = tmp_path / "stacked-state.pt"
    _, stopped = fit(state, patience=2)
    assert [len(h) for h in stopped] == [3, 3] and state.exists()
    _, continued = fit(state)
    assert not state.exists()
    assert untimed(continued) == untimed(whole)
    assert len({r["loss"] for r in whole[0]}) > 1  # the dropout masks differ from epoch to epoch


def test_the_authors_cnn_learns_digits_stacked(mnist):
    """Two copies of the authors' CNN with plain SGD on 1,000 real digits each reach well above chance."""
    x, y = mnist["train"]
    test_x, test_y = mnist["test"]
    models = [reference_script_cnn(1, 10, 28) for _ in range(2)]
    _, histories = train_stacked(models, [x[:1000], x[1000:2000]], [y[:1000], y[1000:2000]], [test_x] * 2,
                                 [test_y] * 2, lrs=[0.05, 0.05], seeds=[0, 1], max_epochs=3, batch_size=32,
                                 device="cpu")
    assert all(h[-1]["test_accuracy"] > 0.6 for h in histories)


def test_refusals():
    net = small_net(0)
    x, y = torch.zeros(8, 1, 28, 28), torch.zeros(8, dtype=torch.long)
    with pytest.raises(ValueError, match="same number of records"):
        train_stacked([net, small_net(1)], [x, x[:4]], [y, y[:4]], [x, x], [y, y], lrs=[0.1, 0.1], seeds=[0, 1],
                      max_epochs=1, batch_size=4)
    with pytest.raises(ValueError, match="one architecture"):
        train_stacked([net, reference_script_cnn(1, 10, 28)], [x, x], [y, y], [x, x], [y, y], lrs=[0.1, 0.1],
                      seeds=[0, 1], max_epochs=1, batch_size=4)
    with pytest.raises(ValueError, match="one training set"):
        train_stacked([net], [x, x], [y, y], [x], [y], lrs=[0.1], seeds=[0], max_epochs=1, batch_size=4)
