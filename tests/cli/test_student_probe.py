"""scripts/pategan_student_probe.py: its measures are what they say on a student and teachers whose answer is known."""
import importlib.util
from pathlib import Path

import pytest
import torch
from torch import nn

from dpgen.methods.pategan import PATEGAN

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "pategan_student_probe.py"
spec = importlib.util.spec_from_file_location("pategan_student_probe", SCRIPT)
probe = importlib.util.module_from_spec(spec)
spec.loader.exec_module(probe)


def tiny_score_model(clip=0.05):
    torch.manual_seed(0)
    return PATEGAN((4,), 2, "table", n_teachers=6, lam=1.0, batch_size=16, z_dim=8, vote="score", score_clip=clip,
                   teachers=dict(hidden=16), generator=dict(hidden=[16]), student=dict(hidden=[16]))


class TeachersAsStudent(nn.Module):
    """A student whose score is the teachers' mean clipped score plus a constant: it has learned them exactly."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x, y):
        return probe.teacher_score(self.model, x, y)[:, None] + 3.0


def test_the_teachers_score_is_their_mean_clipped_logit_and_a_perfect_student_measures_one():
    model = tiny_score_model()
    with torch.no_grad():
        x, y = model.generated(64)
        logits = model.ensemble.predict_logits(x, y)
    assert (logits.abs() > 0.05).any()  # the clip matters on these samples
    torch.testing.assert_close(probe.teacher_score(model, x, y).detach(), logits.clamp(-0.05, 0.05).mean(0))
    model.student = TeachersAsStudent(model)
    row = probe.measure(model, x, y)
    assert row["cosine_per_sample"] == pytest.approx(1.0, abs=1e-5)
    assert row["cosine_batch_sum"] == pytest.approx(1.0, abs=1e-5) and row["r2"] == pytest.approx(1.0, abs=1e-5)


def test_teachers_halves_agree_fully_when_the_halves_are_the_same_teachers():
    model = tiny_score_model(clip=100.0)
    with torch.no_grad():
        x, y = model.generated(64)
    assert probe.teacher_halves(model, x, y)["halves_cosine_batch_sum"] < 0.999  # six different teachers
    for stacked in model.ensemble.params.buffers():  # teachers 3-5 become copies of teachers 0-2
        stacked.data[3:] = stacked.data[:3]
    halves = probe.teacher_halves(model, x, y)
    assert halves["halves_cosine_per_sample"] == pytest.approx(1.0, abs=1e-5)
    assert halves["halves_cosine_batch_sum"] == pytest.approx(1.0, abs=1e-5)


def test_the_student_batch_is_moved_by_noise_of_a_per_sample_scale_up_to_perturb():
    model = tiny_score_model()
    with torch.no_grad():
        torch.manual_seed(1)
        unmoved, y_unmoved = model.generated(model.batch_size)
        torch.manual_seed(1)
        plain, y_plain = probe.training_batch(model, 0.0)
        torch.manual_seed(1)
        moved, y = probe.training_batch(model, 0.5)
    torch.testing.assert_close(plain, unmoved)  # no noise at 0: the generator's own samples
    torch.testing.assert_close(y_plain, y_unmoved)
    torch.testing.assert_close(y, y_plain)
    scale = (moved - plain).std(1)  # one noise scale per sample: the spread of its 4 moved features
    assert scale.max() < 0.5 * 2 and scale.min() < 0.1 and (scale > 0.25).any()


def test_tangent_is_the_gradient_with_respect_to_the_basis_generators_coefficients():
    torch.manual_seed(0)
    model = PATEGAN((1, 8, 8), 2, "image", n_teachers=2, lam=1.0, z_dim=4, generator=dict(basis_size=3, hidden=[8]))
    c = torch.randn(5, 1, 9, requires_grad=True)
    x = torch.sigmoid(c @ model.net_g.basis).view(5, 1, 8, 8)
    weights = torch.randn(5, 1, 8, 8)
    (expected,) = torch.autograd.grad((x * weights).sum() + (x ** 2).sum(), c)
    g_pixels = weights + 2 * x.detach()  # the pixel gradient of the same function
    torch.testing.assert_close(probe.tangent(model, x.detach(), g_pixels), expected.view(5, -1))


def test_coefficient_noise_moves_the_basis_generators_samples_within_its_image_set():
    torch.manual_seed(0)
    model = PATEGAN((1, 8, 8), 2, "image", n_teachers=2, lam=1.0, batch_size=16, z_dim=4,
                    generator=dict(basis_size=3, hidden=[8]))
    with torch.no_grad():
        torch.manual_seed(1)
        plain, y_plain = probe.training_batch(model, 0.0, coefficients=True)
        torch.manual_seed(1)
        moved, y = probe.training_batch(model, 0.5, coefficients=True)
    torch.testing.assert_close(y, y_plain)
    assert (moved - plain).abs().max() > 0.05  # moved ...
    basis = model.net_g.basis  # ... and still sigmoid of the 3 x 3 subspace: the logit has no other component
    logit = torch.logit(moved.double()).view(16, 1, 64)
    residual = logit - (logit @ basis.double().T) @ basis.double() / 64
    assert residual.abs().max() < 1e-4 * logit.abs().max()
