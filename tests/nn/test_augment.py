"""Teachers' translation augmentation: what `translate` does to images, and that the ensemble trains on it."""
import pytest
import torch
from torch.nn.functional import binary_cross_entropy_with_logits as bce

from dpgen.nn import ensemble as ensemble_module
from dpgen.nn.augment import translate
from dpgen.nn.ensemble import TeacherEnsemble


def test_each_image_moves_by_its_own_offset_within_the_shift_and_fills_with_zeros():
    torch.manual_seed(0)
    x = torch.zeros(400, 2, 9, 9)
    x[:, :, 4, 4] = torch.arange(1, 401.0)[:, None]  # one bright pixel per image, in both channels
    y = translate(x, 2)
    assert y.shape == x.shape
    offsets = set()
    for i in range(len(x)):
        where = (y[i, 0] > 0).nonzero()
        assert len(where) == 1 and y[i, 0].sum() == i + 1  # moved, not blurred or lost; zeros elsewhere
        assert torch.equal(y[i, 0], y[i, 1])  # the channels of one image move together
        offsets.add(tuple((where[0] - 4).tolist()))
    assert offsets == {(dy, dx) for dy in range(-2, 3) for dx in range(-2, 3)}  # every offset occurs


def test_pixels_shifted_out_are_dropped_and_zero_shift_is_the_identity():
    x = torch.rand(3, 1, 5, 5)
    assert translate(x, 0) is x
    torch.manual_seed(1)
    y = translate(torch.ones(50, 1, 5, 5), 1)
    # an image moved by (dy, dx) keeps (5 - |dy|) x (5 - |dx|) of its 25 pixels
    kept = {int(v) for v in y.sum((1, 2, 3))}
    assert kept <= {25, 20, 16} and 16 in kept


def test_teachers_train_on_the_translated_real_and_fake_images(monkeypatch):
    """With `augment`, each teacher steps as a module trained on translate()d real and fake batches; its input
    gradients are taken on the images as given."""
    n, b, shape = 2, 4, (1, 28, 28)
    seen = []

    def shift_right(x, shift):  # a deterministic stand-in, so the reference modules see the same images
        seen.append(shift)
        return torch.roll(x, 1, dims=-1)

    monkeypatch.setattr(ensemble_module, "translate", shift_right)
    ens = TeacherEnsemble(n, shape, 10, chunk_size=1, seed=1, augment=3).to(torch.float64)
    modules = [ens.teacher(i) for i in range(n)]
    g = torch.Generator().manual_seed(0)
    real_x, real_y = torch.rand(n, b, *shape, generator=g, dtype=torch.float64), torch.randint(0, 10, (n, b), generator=g)
    fake_x, fake_y = torch.rand(b, *shape, generator=g, dtype=torch.float64), torch.randint(0, 10, (b,), generator=g)
    ens.train_step(real_x, real_y, fake_x, fake_y)
    assert seen == [3, 3]  # once per chunk
    for i, m in enumerate(modules):
        opt = torch.optim.Adam(m.parameters(), lr=1e-3, betas=(0.5, 0.999))
        real, fake = m(torch.roll(real_x[i], 1, dims=-1), real_y[i]), m(torch.roll(fake_x, 1, dims=-1), fake_y)
        (bce(real, torch.ones_like(real)) + bce(fake, torch.zeros_like(fake))).backward()
        opt.step()
        torch.testing.assert_close(ens.params.out_weight[i], m.out.weight.detach(), rtol=0, atol=1e-10)
    grads = ens.input_grads(fake_x, fake_y)
    x = fake_x.clone().requires_grad_()
    out = modules[0](x, fake_y)
    (want,) = torch.autograd.grad(bce(out, torch.ones_like(out)), [x])
    torch.testing.assert_close(grads[0], want.reshape(b, -1), rtol=0, atol=1e-12)
    assert seen == [3, 3]


def test_augment_is_for_images_only():
    with pytest.raises(ValueError, match="for images only"):
        TeacherEnsemble(2, (6,), 2, augment=1)
    with pytest.raises(ValueError, match="shift in pixels"):
        TeacherEnsemble(2, (1, 28, 28), 10, augment=-1)
