import pytest
import torch
from torch_fidelity.registry import FEATURE_EXTRACTORS_REGISTRY

from dpgen.evaluation import fidelity
from dpgen.evaluation.fidelity import (
    domain_classifier_for,
    full_recipe,
    image_quality,
    load_classifier,
    register_classifier,
    save_classifier,
    train_domain_classifier,
    weights_hash,
)
from dpgen.nn.classifier import domain_classifier


def test_fid_of_a_set_against_itself_is_zero_and_against_noise_is_large(mnist, classifier, tmp_path):
    test_x, _ = mnist["test"]
    itself = image_quality(test_x[:500], test_x[:500], classifier, cache_root=tmp_path)
    assert itself["FID"] == pytest.approx(0.0, abs=1e-6)
    other_real = image_quality(mnist["train"][0][:500], test_x[:500], classifier, cache_root=tmp_path)
    noise = image_quality(torch.rand(500, 1, 28, 28), test_x[:500], classifier, cache_root=tmp_path)
    assert noise["FID"] > 100 and noise["FID"] > 10 * other_real["FID"]


def test_inception_score_of_one_class_is_about_one(mnist, classifier, tmp_path):
    test_x, test_y = mnist["test"]
    ones = image_quality(test_x[test_y == 1], test_x, classifier, cache_root=tmp_path, isc_splits=1)
    mixed = image_quality(test_x, test_x, classifier, cache_root=tmp_path, isc_splits=1)
    assert 1.0 <= ones["IS"] < 1.3
    assert mixed["IS"] > 5  # 10 balanced classes: at most 10


def test_real_statistics_are_cached_under_the_classifier_hash(mnist, classifier, tmp_path):
    test_x, _ = mnist["test"]
    image_quality(test_x[:200], test_x[200:400], classifier, cache_root=tmp_path)
    cached = sorted(p.name for p in tmp_path.iterdir())
    real_key = f"dpgen-real-{fidelity.tensor_hash(test_x[200:400])}-dpgen-domain-{weights_hash(classifier)}"
    assert f"{real_key}-stat-fid-penultimate.pt" in cached
    assert all(name.startswith(real_key) for name in cached)  # the synthetic input is never cached
    assert all(p.requires_grad for p in classifier.parameters())  # torch-fidelity froze a copy, not ours


def test_registered_extractor_gives_the_classifiers_logits_and_features(classifier):
    name = register_classifier(classifier)
    assert register_classifier(classifier) == name
    extractor = FEATURE_EXTRACTORS_REGISTRY[name](name, ["penultimate", "logits"])
    x = torch.rand(4, 1, 28, 28)
    penultimate, logits = extractor(x)
    classifier.eval()
    assert torch.allclose(logits, classifier(x)) and torch.allclose(penultimate, classifier.features(x))


def test_missing_inception_weights_fail_clearly(mnist, classifier, tmp_path):
    x = mnist["test"][0][:50]
    with pytest.raises(FileNotFoundError, match="Inception weights file .*missing.pth"):
        image_quality(x, x, classifier, cache_root=tmp_path, inception_weights=tmp_path / "missing.pth")


def test_classifier_cache_by_dataset_and_weights_hash(mnist, classifier, tmp_path, monkeypatch):
    path = save_classifier(classifier, "mnist", tmp_path, {"test_accuracy": 0.9, "epochs": 3})
    assert path.name == f"mnist-{weights_hash(classifier)}.pt"
    model, info = domain_classifier_for("mnist", *mnist["train"], *mnist["test"], num_classes=10, directory=tmp_path)
    assert info["hash"] == weights_hash(classifier) == weights_hash(model) and info["test_accuracy"] == 0.9

    def no_training(*args, **kwargs):
        raise AssertionError("must not train")

    monkeypatch.setattr(fidelity, "train_domain_classifier", no_training)
    with pytest.raises(AssertionError, match="must not train"):  # other dataset name: a miss
        domain_classifier_for("fashion_mnist", *mnist["train"], *mnist["test"], num_classes=10, directory=tmp_path)
    for recipe in ({"epochs": 15}, {"flip": True}, {"cosine": True}, {"channels": [64, 128]}):  # another way: a miss
        with pytest.raises(AssertionError, match="must not train"):
            domain_classifier_for("mnist", *mnist["train"], *mnist["test"], num_classes=10, directory=tmp_path,
                                  recipe=recipe)
    # a file from before flips, cosine decay and channels existed (no such entries) counts as trained without them
    # and 32 / 64 wide; the config's list of channels is the same recipe as the cached tuple
    assert domain_classifier_for("mnist", *mnist["train"], *mnist["test"], num_classes=10, directory=tmp_path,
                                 recipe={"epochs": 3, "flip": False, "channels": [32, 64]}
                                 )[1]["hash"] == weights_hash(classifier)
    with pytest.raises(ValueError, match="unknown settings"):
        domain_classifier_for("mnist", *mnist["train"], *mnist["test"], num_classes=10, directory=tmp_path,
                              recipe={"epoch": 3})

    payload = torch.load(path, weights_only=False)
    payload["state_dict"]["head.bias"] += 1
    torch.save(payload, path)
    with pytest.raises(ValueError, match="do not match"):
        load_classifier(path)


def test_a_shipped_classifier_serves_only_the_training_set_it_was_trained_on(mnist, classifier, tmp_path, monkeypatch):
    shipped, cache = tmp_path / "shipped", tmp_path / "cache"
    x, y = mnist["train"]
    save_classifier(classifier, "mnist", shipped, {"epochs": 3, "train_data": fidelity.tensor_hash(x)})
    monkeypatch.setattr(fidelity, "SHIPPED", shipped)
    monkeypatch.setenv("DPGEN_CACHE", str(cache))
    trained = []
    monkeypatch.setattr(fidelity, "train_domain_classifier",
                        lambda *args, **kwargs: trained.append(1) or (classifier, {"epochs": 3}))
    assert domain_classifier_for("mnist", x, y, *mnist["test"], num_classes=10)[1]["hash"] == weights_hash(classifier)
    assert not trained and not cache.exists()  # used as shipped: nothing trained, nothing written
    domain_classifier_for("mnist", x[:2000], y[:2000], *mnist["test"], num_classes=10)  # other data: trained
    domain_classifier_for("mnist", x, y, *mnist["test"], num_classes=10, directory=tmp_path / "mine")  # own folder
    assert len(trained) == 2


def test_weights_hash_follows_the_weights():
    torch.manual_seed(0)
    a = domain_classifier(1, 10, 28)
    b = domain_classifier(1, 10, 28)
    b.load_state_dict(a.state_dict())
    assert weights_hash(a) == weights_hash(b)
    with torch.no_grad():
        b.head.bias[0] += 1e-6
    assert weights_hash(a) != weights_hash(b)


def test_recipe_channels_set_the_domain_classifiers_width(mnist):
    x, y = mnist["train"][0][:64], mnist["train"][1][:64]
    model, info = train_domain_classifier(x, y, x, y, num_classes=10, recipe={"epochs": 1, "channels": [8, 16]},
                                          progress=False)
    assert model.config["channels"] == (8, 16) == info["channels"]
    assert model.body[0].out_channels == 8 and model.body[4].out_channels == 16
    for bad in ([8], [8, 0], [8.5, 16]):
        with pytest.raises(ValueError, match="two positive integers"):
            full_recipe({"channels": bad})


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_scores_on_a_gpu_equal_those_on_the_cpu(mnist, classifier, tmp_path):
    test_x, _ = mnist["test"]
    cpu = image_quality(test_x[:500], test_x[500:], classifier, cache_root=tmp_path / "cpu", device="cpu")
    gpu = image_quality(test_x[:500], test_x[500:], classifier, cache_root=tmp_path / "gpu", device="cuda")
    assert gpu["IS"] == pytest.approx(cpu["IS"], rel=1e-3) and gpu["FID"] == pytest.approx(cpu["FID"], rel=1e-3)
