import pytest
import torch
from torch.nn import functional as F

from dpgen.nn.discriminator import (ConditionalDiscriminator, default_channels, label_map_response, pad_same,
                                    same_padding)


def test_mnist_teacher_has_the_reference_parameter_count():
    # conv1: (1 + 10) -> 11 channels, 5x5: 11*11*25 + 11 = 3,036
    # conv2: (11 + 10) -> 42: 21*42*25 + 42 = 22,092; its BatchNorm: 2*42 = 84
    # fc: 42*7*7 + 10 = 2,068 -> 256: 2068*256 + 256 = 529,664; its BatchNorm: 2*256 = 512
    # out: 256 + 10 -> 1: 267.  Total 3036 + 22092 + 84 + 529664 + 512 + 267 = 555,655
    d = ConditionalDiscriminator((1, 28, 28), 10)
    assert d.channels == (11, 42)
    assert sum(p.numel() for p in d.parameters()) == 555_655


def test_tf_same_padding_puts_the_odd_pixel_after():
    # TF SAME, 5x5 stride 2: out = ceil(n/2), total pad = (out-1)*2 + 5 - n
    assert same_padding(28) == (1, 2)  # (13*2 + 5 - 28) = 3
    assert same_padding(14) == (1, 2)
    assert same_padding(7) == (2, 2)   # out 4: 3*2 + 5 - 7 = 4
    # all-ones 28x28 image, all-ones kernel: output (i, j) counts the taps inside the image.
    # Output 0 covers rows -1..3 (4 inside), output 13 covers rows 25..29 (3 inside), inner ones 5.
    out = F.conv2d(pad_same(torch.ones(1, 1, 28, 28)), torch.ones(1, 1, 5, 5), stride=2)[0, 0]
    assert out.shape == (14, 14)
    assert out[0, 0] == 16 and out[0, 5] == 20 and out[13, 13] == 9 and out[5, 13] == 15 and out[5, 5] == 25


def test_label_response_equals_convolving_the_label_maps():
    torch.manual_seed(0)
    weight = torch.randn(2, 4, 3, 5, 5, dtype=torch.float64)  # (teachers, out, K labels, 5, 5)
    for height, width in [(28, 28), (7, 9)]:
        got = label_map_response(weight, height, width)  # (teachers, K, out, H', W')
        for k in range(3):
            maps = torch.zeros(1, 3, height, width, dtype=torch.float64)
            maps[0, k] = 1
            for t in range(2):
                want = F.conv2d(pad_same(maps), weight[t], stride=2)[0]
                torch.testing.assert_close(got[t, k], want, rtol=0, atol=1e-12)


def test_batchnorm_uses_batch_statistics_also_in_eval_mode():
    torch.manual_seed(0)
    d = ConditionalDiscriminator((1, 28, 28), 10)
    x, y = torch.rand(6, 1, 28, 28), torch.randint(0, 10, (6,))
    train_out = d(x, y)
    d.eval()
    torch.testing.assert_close(d(x, y), train_out)
    # batch statistics couple the samples: the logit of sample 0 depends on which batch it is in
    assert not torch.allclose(d(x[:3], y[:3])[0], train_out[0])


def test_label_conditions_the_output():
    torch.manual_seed(0)
    d = ConditionalDiscriminator((1, 28, 28), 10)
    x = torch.rand(4, 1, 28, 28)
    assert not torch.allclose(d(x, torch.zeros(4, dtype=torch.long)), d(x, torch.ones(4, dtype=torch.long)))


@pytest.mark.parametrize("shape, classes, channels, flat", [
    ((3, 32, 32), 2, (5, 34), 34 * 8 * 8),       # reference design: 32 -> 16 -> 8
    ((3, 64, 64), 3, (6, 35, 35), 35 * 8 * 8),   # one more stride-2 conv: 64 -> 32 -> 16 -> 8
    ((12,), 2, (), 12),                          # tables: a conditional MLP
])
def test_scaled_designs(shape, classes, channels, flat):
    assert default_channels(shape, classes) == channels
    d = ConditionalDiscriminator(shape, classes)
    assert d.fc.in_features == flat + classes
    assert d(torch.rand(5, *shape), torch.randint(0, classes, (5,))).shape == (5,)


def test_reference_initialisation():
    torch.manual_seed(0)
    d = ConditionalDiscriminator((1, 28, 28), 10)
    assert d.convs[0].weight.abs().max() <= 0.04  # truncated at 2 std = 0.04
    assert abs(d.fc.weight.std().item() - 0.02) < 0.001
    assert torch.all(d.fc_norm.weight == 1) and torch.all(d.fc.bias == 0) and torch.all(d.conv_norms[0].bias == 0)


def test_pooled_teacher_sees_only_block_means():
    # pool = 2 on 28 x 28: the layers are those of a 14 x 14 input (14 -> 7 -> 4), and two images with the
    # same 2 x 2 block means (here: one with a +-1 checkerboard added, which every 2 x 2 block cancels) get the
    # same logits and the same input gradients, the gradient constant over each block
    torch.manual_seed(0)
    d = ConditionalDiscriminator((1, 28, 28), 10, pool=2)
    assert d.conv_shape == (1, 14, 14) and d.fc.in_features == d.channels[-1] * 4 * 4 + 10
    x, y = torch.rand(3, 1, 28, 28), torch.tensor([0, 4, 9])
    checker = (torch.arange(28)[:, None] + torch.arange(28)[None, :]) % 2 * 2.0 - 1.0
    a, b = x.clone().requires_grad_(), (x + checker).requires_grad_()
    torch.testing.assert_close(d(a, y), d(b, y))
    (ga,) = torch.autograd.grad(d(a, y).sum(), [a])
    (gb,) = torch.autograd.grad(d(b, y).sum(), [b])
    torch.testing.assert_close(ga, gb)
    torch.testing.assert_close(ga, ga[..., ::2, ::2].repeat_interleave(2, -2).repeat_interleave(2, -1))


@pytest.mark.parametrize("shape, pool", [((1, 28, 28), 3), ((12,), 2), ((1, 28, 28), 0)])
def test_pool_must_divide_an_image(shape, pool):
    with pytest.raises(ValueError, match="pool must"):
        ConditionalDiscriminator(shape, 2, pool=pool)
