"""The conditional image generator's initialisation options (nn/generator.py)."""
import pytest
import torch
from torch import nn

from dpgen.nn.generator import ConditionalImageGenerator


def test_dcgan_init_draws_weights_with_std_002_and_zero_biases():
    torch.manual_seed(0)
    g = ConditionalImageGenerator((1, 28, 28), 10, z_dim=50, init="dcgan")
    layers = [m for m in g.modules() if isinstance(m, (nn.Linear, nn.ConvTranspose2d))]
    assert len(layers) == 4  # FC 1024, FC 128*7*7, deconv 128, deconv to the image
    for m in layers:
        assert m.weight.std().item() == pytest.approx(0.02, rel=0.05)
        assert abs(m.weight.mean().item()) < 0.002 and torch.all(m.bias == 0)
    for m in g.modules():
        if isinstance(m, nn.BatchNorm1d | nn.BatchNorm2d):
            assert torch.all(m.weight == 1) and torch.all(m.bias == 0)


def test_dcgan_init_starts_closer_to_grey_than_torch_init():
    torch.manual_seed(0)
    z, y = torch.rand(64, 50) * 2 - 1, torch.arange(64) % 10
    spread = {}
    for init in ("dcgan", "torch"):
        x = ConditionalImageGenerator((1, 28, 28), 10, z_dim=50, init=init)(z, y)
        spread[init] = (x - 0.5).abs().mean().item()
    assert spread["dcgan"] < 0.1 and spread["torch"] > 3 * spread["dcgan"]  # measured 0.078 vs 0.275


def test_unknown_init_is_refused():
    with pytest.raises(ValueError, match="unknown generator init"):
        ConditionalImageGenerator((1, 28, 28), 10, init="xavier")


@pytest.mark.parametrize("n", [7, 14])
def test_tf_alignment_is_the_adjoint_of_a_same_convolution_padded_1_before_and_2_after(n):
    """TensorFlow's conv2d_transpose(padding="SAME") is the input gradient of conv2d SAME, which pads a
    2n -> n stride-2 5x5 convolution by 1 before and 2 after: computed here with autograd, independently."""
    from dpgen.nn.generator import deconv
    torch.manual_seed(0)
    tf_layer = nn.Sequential(*deconv(3, 2, 2 * n, "tf"))
    x = torch.randn(4, 3, n, n)
    u = torch.zeros(4, 2, 2 * n, 2 * n, requires_grad=True)
    conv = nn.functional.conv2d(nn.functional.pad(u, (1, 2, 1, 2)), tf_layer[0].weight, stride=2)
    assert conv.shape[-1] == n
    (expected,) = torch.autograd.grad(conv, u, grad_outputs=x)
    expected = expected + tf_layer[0].bias[:, None, None]
    assert torch.allclose(tf_layer(x), expected, atol=1e-5)
    torch_layer = nn.Sequential(*deconv(3, 2, 2 * n, "torch"))
    with torch.no_grad():
        torch_layer[0].weight.copy_(tf_layer[0].weight)
        torch_layer[0].bias.copy_(tf_layer[0].bias)
    shifted = torch_layer(x)  # PyTorch's padding 2 / output_padding 1: the same image one pixel up and left
    assert torch.allclose(shifted[..., :-1, :-1], expected[..., 1:, 1:], atol=1e-5)
    assert not torch.allclose(shifted, expected, atol=1e-3)


def test_tf_aligned_generator_draws_the_image_size():
    g = ConditionalImageGenerator((1, 28, 28), 10, z_dim=50, init="dcgan", align="tf")
    assert g(torch.rand(3, 50), torch.tensor([0, 1, 2])).shape == (3, 1, 28, 28)
    g64 = ConditionalImageGenerator((3, 64, 64), 2, z_dim=50, align="tf")
    assert g64(torch.rand(2, 50), torch.tensor([0, 1])).shape == (2, 3, 64, 64)
    with pytest.raises(ValueError, match="alignment"):
        ConditionalImageGenerator((1, 28, 28), 10, align="same")


def test_generate_with_batch_statistics_samples_per_batch_and_leaves_the_net_unchanged():
    from dpgen.nn.generator import generate, latent
    torch.manual_seed(0)
    g = ConditionalImageGenerator((1, 28, 28), 10, z_dim=8, init="dcgan")
    g(torch.rand(32, 8), torch.arange(32) % 10)  # running statistics that differ from a fresh net's
    g.eval()
    before = {k: v.clone() for k, v in g.state_dict().items()}
    labels = torch.arange(12) % 10
    torch.manual_seed(1)
    x = generate(g, labels, 8, batch_norm_batch=4)
    assert not g.training and all(torch.equal(v, g.state_dict()[k]) for k, v in before.items())
    torch.manual_seed(1)
    g.train()
    with torch.no_grad():  # by hand: three training-mode forward passes of 4 samples
        want = torch.cat([g(latent(4, 8), y) for y in labels.split(4)])
    torch.testing.assert_close(x, want)
    g.load_state_dict(before)
    torch.manual_seed(1)
    assert not torch.allclose(generate(g, labels, 8), x, atol=1e-3)  # running statistics: other samples
