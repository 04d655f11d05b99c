"""The work counts the benchmarks set their times against (benchmarks/rates.py); nothing here is timed."""
import torch
from torch.nn import functional as F
from torch.utils.flop_counter import FlopCounterMode

from benchmarks.dpmerf import embedding_flops
from benchmarks.rates import adam_bytes, bmm_flops, conv_flops, matrix_kernels
from dpgen.aggregation.mean_embedding import RandomFourierFeatures, embedding_sums
from dpgen.nn.ensemble import TeacherEnsemble


def counted(run) -> int:
    """FLOPs torch's own counter gives run()."""
    with FlopCounterMode(display=False) as counter:
        run()
    return counter.get_total_flops()


def test_conv_flops_of_a_tiny_grouped_convolution():
    x, weight = torch.rand(2, 4, 6, 6), torch.rand(6, 2, 3, 3)  # 2 groups: 2 input, 3 output channels each
    # output (2, 6, 2, 2) with stride 2: 2 * N 2 * Cout 6 * 2 * 2 * Cin/groups 2 * 3 * 3
    assert conv_flops(2, 6, 2, 2, 2, 3, 3) == 1728
    assert counted(lambda: F.conv2d(x, weight, stride=2, groups=2)) == 1728


def test_bmm_flops_of_a_tiny_batched_product():
    assert bmm_flops(b=3, m=2, n=5, k=4) == 240
    assert counted(lambda: torch.baddbmm(torch.zeros(3, 2, 5), torch.rand(3, 2, 4), torch.rand(3, 4, 5))) == 240


def test_adam_bytes_count_the_widening_copies_of_low_precision_moments():
    assert adam_bytes(10) == 280  # fp32 moments: read p, g, m, v, write p, m, v
    assert adam_bytes(10, moment_bytes=2) == 280 + 10 * 4 * 6  # bf16 moments: each copied in and out


def test_recorded_teacher_kernels_count_what_torch_counts():
    ens = TeacherEnsemble(2, (1, 8, 8), 3, channels=[2, 3], hidden=4)
    x, y = torch.rand(2, 6, 1, 8, 8), torch.randint(0, 3, (2, 6))

    def forward():
        with torch.no_grad():
            ens.logits(ens.stacked(ens.params), x, y, groups=2)

    kernels = matrix_kernels(forward)
    assert [k["kernel"] for k in kernels].count("convolution") == 2
    assert sum(k["flop"] for k in kernels) == counted(forward)


def test_embedding_flops_count_what_torch_counts_over_chunks():
    features = RandomFourierFeatures(12, 8, 5.0, seed=0)
    x, y = torch.rand(10, 12), torch.randint(0, 3, (10,))
    chunks = [(x[:6], y[:6]), (x[6:], y[6:])]
    # W x: 2 * 10 records * 4 frequencies * 12 dims; one-hot^T phi: 2 * 3 classes * 8 features * 10 records
    assert embedding_flops(10, 12, 8, 3) == 960 + 480
    assert counted(lambda: embedding_sums(chunks, features, 3, 0.2)) == 1440


def test_flop_count_equals_torchs_counter_also_inside_torch_func_transforms():
    from torch.func import functional_call, grad

    from benchmarks.rates import flop_count

    net = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, stride=2), torch.nn.ReLU(), torch.nn.Flatten(),
                              torch.nn.Linear(4 * 3 * 3, 2))
    x = torch.rand(5, 1, 8, 8)

    def train():
        net.zero_grad()
        net(x).pow(2).sum().backward()

    assert flop_count(train) == counted(train) > 0
    params = {k: v.detach() for k, v in net.named_parameters()}

    def penalty(theta, batch):  # an input gradient inside grad, as GS-WGAN's gradient penalty takes it
        return grad(lambda inp: functional_call(net, theta, (inp,)).sum())(batch).pow(2).sum()

    def penalty_autograd():  # the same work through autograd (torch's own counter refuses a create_graph gradient)
        theta = {k: v.clone().requires_grad_(True) for k, v in params.items()}
        inp = x.clone().requires_grad_(True)
        (slopes,) = torch.autograd.grad(functional_call(net, theta, (inp,)).sum(), inp, create_graph=True)
        torch.autograd.grad(slopes.pow(2).sum(), list(theta.values()), allow_unused=True)

    assert flop_count(lambda: grad(penalty)(params, x)) == flop_count(penalty_autograd) > flop_count(train)
