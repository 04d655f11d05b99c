import pytest
import torch
from torch.nn.functional import binary_cross_entropy_with_logits as bce

from dpgen.aggregation.dpgradagg import project
from dpgen.nn.ensemble import TeacherEnsemble, key


def batches(n, b, shape, classes, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(n, b, *shape, generator=g, dtype=torch.float64),
            torch.randint(0, classes, (n, b), generator=g),
            torch.rand(b, *shape, generator=g, dtype=torch.float64),
            torch.randint(0, classes, (b,), generator=g))


@pytest.mark.parametrize("shape, classes, steps, arch", [((1, 28, 28), 10, 2, {}), ((3, 64, 64), 3, 1, {}),
                                                         ((6,), 2, 2, {}), ((1, 28, 28), 10, 2, {"pool": 2}),
                                                         ((1, 28, 28), 10, 2, {"channels": [], "hidden": 0})])
def test_same_updates_and_input_grads_as_independent_modules(shape, classes, steps, arch):
    """3 teachers in chunks of 2 (one partial chunk) against 3 nn.Modules with their own torch.optim.Adam."""
    n, b = 3, 4
    ens = TeacherEnsemble(n, shape, classes, chunk_size=2, seed=1, **arch).to(torch.float64)
    modules = [ens.teacher(i) for i in range(n)]
    optims = [torch.optim.Adam(m.parameters(), lr=1e-3, betas=(0.5, 0.999)) for m in modules]
    for step in range(steps):
        real_x, real_y, fake_x, fake_y = batches(n, b, shape, classes, seed=step)
        losses = ens.train_step(real_x, real_y, fake_x, fake_y)
        for i, (m, opt) in enumerate(zip(modules, optims)):
            real, fake = m(real_x[i], real_y[i]), m(fake_x, fake_y)  # two calls: separate BN statistics
            loss = bce(real, torch.ones_like(real)) + bce(fake, torch.zeros_like(fake))
            opt.zero_grad()
            loss.backward()
            opt.step()
            assert losses[i].item() == pytest.approx(loss.item(), abs=1e-12)  # loss before the step
        grads = ens.input_grads(fake_x, fake_y)
        assert grads.shape == (n, b, torch.Size(shape).numel())
        for i, m in enumerate(modules):
            for name, p in m.named_parameters():
                # a bias right before a BatchNorm has a true gradient of exactly 0 and no effect on any output;
                # Adam turns its rounding noise (~1e-17) into steps up to lr * noise / eps ~ 1e-10
                torch.testing.assert_close(getattr(ens.params, key(name))[i], p.detach(), rtol=0,
                                           atol=1e-8 if name in ens.inert else 1e-10)
            x = fake_x.clone().requires_grad_()
            out = m(x, fake_y)
            (want,) = torch.autograd.grad(bce(out, torch.ones_like(out)), [x])  # batch-mean loss, as the reference
            torch.testing.assert_close(grads[i], want.reshape(b, -1), rtol=0, atol=1e-12)


@pytest.mark.parametrize("shape, channels", [((1, 28, 28), None), ((1, 28, 28), [4, 4, 4]), ((6,), [])])
def test_the_biases_before_batch_norm_change_no_output_and_the_others_do(shape, channels):
    ens = TeacherEnsemble(2, shape, 3, channels=channels, seed=1).to(torch.float64)
    x, y = torch.rand(2, 8, *shape, dtype=torch.float64), torch.randint(0, 3, (2, 8))
    theta = ens.stacked(ens.params)
    base = ens.logits(theta, x, y, groups=2)
    biases = [name for name in ens.shapes if name.endswith("bias") and "norm" not in name]
    assert ens.inert == [f"convs.{i}.bias" for i in range(1, len(ens.channels))] + ["fc.bias"]
    for name in biases:
        moved = ens.logits(dict(theta, **{name: theta[name] + 0.5}), x, y, groups=2)
        if name in ens.inert:
            torch.testing.assert_close(moved, base, rtol=0, atol=1e-12)
        else:
            assert (moved - base).abs().max() > 1e-3, name


def test_per_teacher_fake_batches_train_each_teacher_on_its_own():
    """fake_x (T, b, ...), fake_y (T, b): teacher i steps exactly as a module trained against fake_x[i]."""
    n, b, shape = 3, 4, (1, 28, 28)
    ens = TeacherEnsemble(n, shape, 10, chunk_size=2, seed=1).to(torch.float64)
    modules = [ens.teacher(i) for i in range(n)]
    optims = [torch.optim.Adam(m.parameters(), lr=1e-3, betas=(0.5, 0.999)) for m in modules]
    real_x, real_y, _, _ = batches(n, b, shape, 10, seed=0)
    fake_x, fake_y = torch.rand(n, b, *shape, dtype=torch.float64), torch.randint(0, 10, (n, b))
    losses = ens.train_step(real_x, real_y, fake_x, fake_y)
    for i, (m, opt) in enumerate(zip(modules, optims)):
        real, fake = m(real_x[i], real_y[i]), m(fake_x[i], fake_y[i])
        loss = bce(real, torch.ones_like(real)) + bce(fake, torch.zeros_like(fake))
        opt.zero_grad()
        loss.backward()
        opt.step()
        assert losses[i].item() == pytest.approx(loss.item(), abs=1e-12)
        torch.testing.assert_close(ens.params.out_weight[i], m.out.weight.detach(), rtol=0, atol=1e-10)
        torch.testing.assert_close(ens.params.convs_0_weight[i], m.convs[0].weight.detach(), rtol=0, atol=1e-10)


def test_fakes_by_label_are_the_per_teacher_fakes_gathered_from_the_pool():
    """by_label=True: fake_x (b, K, ...) and fake_y (T, b) train teacher t on fake_x[j, fake_y[t, j]], bitwise as
    the gathered (T, b, ...) per-teacher batches do."""
    n, b, shape, classes = 3, 4, (1, 28, 28), 10
    real_x, real_y, _, _ = batches(n, b, shape, classes, seed=0)
    pool = torch.rand(b, classes, *shape, dtype=torch.float64)
    labels = torch.randint(0, classes, (n, b))
    gathered = pool[torch.arange(b), labels]
    assert gathered.shape == (n, b, *shape) and torch.equal(gathered[2, 1], pool[1, labels[2, 1]])
    by_label, explicit = (TeacherEnsemble(n, shape, classes, chunk_size=2, seed=1).to(torch.float64) for _ in range(2))
    torch.testing.assert_close(by_label.train_step(real_x, real_y, pool, labels, by_label=True),
                               explicit.train_step(real_x, real_y, gathered, labels), rtol=0, atol=0)
    for name, p in by_label.params.named_buffers():
        assert torch.equal(p, getattr(explicit.params, name))


def test_input_grads_are_the_summed_loss_gradient_over_b():
    # d/dx_j mean_j' l_j' = (1/b) d/dx_j sum_j' l_j'  (b = 5), coupling through BatchNorm included
    ens = TeacherEnsemble(2, (1, 28, 28), 10).to(torch.float64)
    _, _, fake_x, fake_y = batches(2, 5, (1, 28, 28), 10, seed=0)
    m = ens.teacher(1)
    x = fake_x.clone().requires_grad_()
    out = m(x, fake_y)
    (summed,) = torch.autograd.grad(bce(out, torch.ones_like(out), reduction="sum"), [x])
    torch.testing.assert_close(ens.input_grads(fake_x, fake_y)[1], summed.reshape(5, -1) / 5, rtol=0, atol=1e-14)


def test_projected_input_grads_are_the_input_grads_projected_per_sample():
    ens = TeacherEnsemble(5, (1, 28, 28), 10, chunk_size=2).to(torch.float64)  # chunks of 2, 2 and 1 teachers
    _, _, fake_x, fake_y = batches(5, 3, (1, 28, 28), 10, seed=0)
    proj = torch.randn(3, 784, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    full = ens.input_grads(fake_x, fake_y)
    chunks = []

    def projected_chunk(g):  # DPGradAgg's projection, one chunk of teachers at a time
        chunks.append(len(g))
        return project(g, proj)

    projected = ens.input_grads(fake_x, fake_y, transform=projected_chunk)
    assert chunks == [2, 2, 1]
    assert projected.shape == (5, 3, 4)
    torch.testing.assert_close(projected, torch.einsum("tbd,bdk->tbk", full, proj), rtol=1e-12, atol=1e-18)


def test_bf16_moments_are_rounded_copies_and_first_step_is_exact():
    n, b = 2, 3
    data = [t.float() if t.is_floating_point() else t for t in batches(n, b, (1, 28, 28), 10, seed=0)]
    full = TeacherEnsemble(n, (1, 28, 28), 10, seed=3)
    half = TeacherEnsemble(n, (1, 28, 28), 10, seed=3, moment_dtype="bfloat16")  # as Hydra passes it
    full.train_step(*data)
    half.train_step(*data)
    for name in full.shapes:
        # step 1 updates with the widened fp32 moments: identical parameters
        torch.testing.assert_close(getattr(half.params, key(name)), getattr(full.params, key(name)), rtol=0, atol=0)
        # stored moments are the fp32 ones rounded to bfloat16 (round to nearest)
        for moments in ("exp_avg", "exp_avg_sq"):
            stored = getattr(getattr(half, moments), key(name))
            assert stored.dtype == torch.bfloat16
            assert torch.equal(stored, getattr(getattr(full, moments), key(name)).bfloat16())


def test_memory_bytes_counts_parameters_and_moments():
    ens = TeacherEnsemble(3, (1, 28, 28), 10, moment_dtype=torch.bfloat16)
    mem = ens.memory_bytes()
    assert mem["parameters"] == 3 * 555_655 * 4           # fp32 parameters
    assert mem["optimizer"] == 3 * 555_655 * 2 * 2 + 8     # two bf16 moments + the int64 step
    assert mem["total"] == mem["parameters"] + mem["optimizer"] + mem["working"] and mem["working"] > 0


def test_state_dict_round_trip_continues_identically():
    n, b = 3, 4
    data = [t.float() if t.is_floating_point() else t for t in batches(n, b, (1, 28, 28), 10, seed=0)]
    a = TeacherEnsemble(n, (1, 28, 28), 10, chunk_size=2, seed=0, moment_dtype=torch.bfloat16)
    a.train_step(*data)
    b_ = TeacherEnsemble(n, (1, 28, 28), 10, chunk_size=2, seed=7, moment_dtype=torch.bfloat16)
    b_.load_state_dict(a.state_dict())
    assert int(b_.step) == 1
    torch.testing.assert_close(a.train_step(*data), b_.train_step(*data), rtol=0, atol=0)
    for name in a.shapes:
        assert torch.equal(getattr(a.params, key(name)), getattr(b_.params, key(name)))


def test_teachers_start_different_and_seed_is_reproducible():
    a, b_ = TeacherEnsemble(2, (1, 28, 28), 10, seed=5), TeacherEnsemble(2, (1, 28, 28), 10, seed=5)
    assert torch.equal(a.params.fc_weight, b_.params.fc_weight)
    assert not torch.equal(a.params.fc_weight[0], a.params.fc_weight[1])
    assert torch.all(a.params.fc_norm_weight == 1) and torch.all(a.params.convs_0_weight.abs() <= 0.04)


def test_steps_and_input_grads_also_run_inside_no_grad():
    # e.g. called from a Lightning hook that runs under torch.no_grad()
    ens = TeacherEnsemble(2, (1, 28, 28), 10)
    data = [t.float() if t.is_floating_point() else t for t in batches(2, 3, (1, 28, 28), 10, seed=0)]
    before = ens.params.fc_weight.clone()
    with torch.no_grad():
        ens.train_step(*data)
        grads = ens.input_grads(*data[2:])
    assert not torch.equal(ens.params.fc_weight, before) and grads.abs().sum() > 0


@pytest.mark.parametrize("shape, classes", [((1, 28, 28), 10), ((6,), 2)])
def test_predict_logits_equals_each_teacher_module(shape, classes):
    """5 teachers in chunks of 2 (one partial chunk), after one training step so that teachers differ."""
    n, b = 5, 7
    ens = TeacherEnsemble(n, shape, classes, chunk_size=2, seed=2).to(torch.float64)
    real_x, real_y, x, y = batches(n, b, shape, classes, seed=0)
    ens.train_step(real_x, real_y, x, y)
    before = {name: p.clone() for name, p in ens.params.named_buffers()}
    shared = ens.predict_logits(x, y)  # one set of samples for all teachers
    own = ens.predict_logits(real_x, real_y)  # teacher t on its own (b, *shape) batch real_x[t]
    assert shared.shape == own.shape == (n, b) and not shared.requires_grad
    for i in range(n):
        m = ens.teacher(i)
        torch.testing.assert_close(shared[i], m(x, y).detach(), rtol=0, atol=1e-12)
        torch.testing.assert_close(own[i], m(real_x[i], real_y[i]).detach(), rtol=0, atol=1e-12)
    assert all(torch.equal(p, before[name]) for name, p in ens.params.named_buffers())  # no update
    assert not torch.equal(shared[0], shared[1])  # the teachers are different nets


def test_predict_logits_shared_labels_with_per_teacher_inputs_and_bad_shapes():
    ens = TeacherEnsemble(3, (6,), 2, chunk_size=2).to(torch.float64)
    x, y = torch.rand(3, 4, 6, dtype=torch.float64), torch.tensor([0, 1, 1, 0])
    torch.testing.assert_close(ens.predict_logits(x, y), ens.predict_logits(x, y.expand(3, 4)), rtol=0, atol=0)
    with pytest.raises(ValueError, match="x must be"):
        ens.predict_logits(torch.rand(2, 4, 6), y)  # 2 sets of samples for 3 teachers
    with pytest.raises(ValueError, match="y must be"):
        ens.predict_logits(x, y[:3])


def test_joint_batch_norm_is_one_forward_call_on_own_real_then_fake():
    """joint_batch_norm: each teacher's step and input gradients equal one nn.Module call on [own real; fake]."""
    n, b, shape, classes = 3, 4, (1, 28, 28), 10
    ens = TeacherEnsemble(n, shape, classes, chunk_size=2, seed=1, joint_batch_norm=True).to(torch.float64)
    modules = [ens.teacher(i) for i in range(n)]
    optims = [torch.optim.Adam(m.parameters(), lr=1e-3, betas=(0.5, 0.999)) for m in modules]
    real_x, real_y, fake_x, fake_y = batches(n, b, shape, classes, seed=0)
    losses = ens.train_step(real_x, real_y, fake_x, fake_y)
    with pytest.raises(ValueError, match="real batch"):
        ens.input_grads(fake_x, fake_y)
    grads = ens.input_grads(fake_x, fake_y, real_x, real_y)
    for i, (m, opt) in enumerate(zip(modules, optims)):
        out = m(torch.cat([real_x[i], fake_x]), torch.cat([real_y[i], fake_y]))
        loss = bce(out[:b], torch.ones(b, dtype=out.dtype)) + bce(out[b:], torch.zeros(b, dtype=out.dtype))
        opt.zero_grad()
        loss.backward()
        opt.step()
        assert losses[i].item() == pytest.approx(loss.item(), abs=1e-12)
        torch.testing.assert_close(ens.params.fc_weight[i], m.fc.weight.detach(), rtol=0, atol=1e-10)
        x = fake_x.clone().requires_grad_()
        out = m(torch.cat([real_x[i], x]), torch.cat([real_y[i], fake_y]))[b:]
        (want,) = torch.autograd.grad(bce(out, torch.ones_like(out)), [x])
        torch.testing.assert_close(grads[i], want.reshape(b, -1), rtol=0, atol=1e-12)
    # teacher i's gradients depend on its own real batch only (PATE's per-teacher sensitivity)
    changed = real_x.clone()
    changed[0] = 1 - changed[0]
    other = ens.input_grads(fake_x, fake_y, changed, real_y)
    assert not torch.equal(other[0], grads[0]) and torch.equal(other[1:], grads[1:])


def test_bfloat16_compute_follows_fp32_closely_and_keeps_fp32_state():
    """compute_dtype=bfloat16 rounds weights and inputs for the passes only: logits, input gradients and one Adam
    step stay within bf16 rounding of the fp32 ones, and parameters, moments and outputs stay fp32."""
    n, b, shape = 4, 6, (1, 28, 28)
    fp32 = TeacherEnsemble(n, shape, 10, chunk_size=3, seed=3)
    bf16 = TeacherEnsemble(n, shape, 10, chunk_size=3, seed=3, compute_dtype="bfloat16")
    real_x, real_y, fake_x, fake_y = (t.float() if t.is_floating_point() else t for t in batches(n, b, shape, 10, 0))
    theta = fp32.stacked(fp32.params)
    logits = fp32.logits(theta, real_x, real_y), bf16.logits(bf16.stacked(bf16.params), real_x, real_y)
    assert logits[1].dtype == torch.float32 and torch.allclose(logits[0], logits[1], atol=0.05)
    grads = fp32.input_grads(fake_x, fake_y), bf16.input_grads(fake_x, fake_y)
    assert grads[1].dtype == torch.float32
    cosine = torch.nn.functional.cosine_similarity(grads[0].flatten(1), grads[1].flatten(1))
    assert (cosine > 0.95).all()  # measured 0.977-0.997 (1 and 2 threads)
    before = {k: v.clone() for k, v in fp32.stacked(fp32.params).items()}
    fp32.train_step(real_x, real_y, fake_x, fake_y)
    bf16.train_step(real_x, real_y, fake_x, fake_y)
    steps = [], []
    for name in before:
        assert bf16.stacked(bf16.params)[name].dtype == torch.float32
        steps[0].append((fp32.stacked(fp32.params)[name] - before[name]).flatten())
        steps[1].append((bf16.stacked(bf16.params)[name] - before[name]).flatten())
    # Adam's first step is lr * sign(gradient): bf16 rounding flips the sign only where a gradient is tiny
    differ = (torch.cat(steps[0]) - torch.cat(steps[1])).abs() > 0.25 * 1e-3
    assert differ.float().mean() < 0.1


def test_moment_slots_share_adam_state_in_teacher_order_as_the_reference_slots():
    """moment_slots=S (the signal check's diagnostic of the reference code): teacher t steps with the Adam state
    of slot t % S, which every earlier teacher of that slot has updated; chunks never straddle a pass."""
    n, slots, b, shape = 6, 3, 4, (1, 28, 28)
    ens = TeacherEnsemble(n, shape, 10, chunk_size=2, seed=1, moment_slots=slots).to(torch.float64)
    assert ens.chunks() == [(0, 2), (2, 3), (3, 5), (5, 6)] and ens.exp_avg.fc_weight.shape[0] == slots
    modules = [ens.teacher(i) for i in range(n)]
    slot_modules = [ens.teacher(s) for s in range(slots)]
    optims = [torch.optim.Adam(m.parameters(), lr=1e-3, betas=(0.5, 0.999)) for m in slot_modules]
    for step in range(2):
        real_x, real_y, fake_x, fake_y = batches(n, b, shape, 10, seed=step)
        ens.train_step(real_x, real_y, fake_x, fake_y)
        for t in range(n):  # the reference: swap teacher t into its slot, one Adam step there, swap it out
            slot, opt = slot_modules[t % slots], optims[t % slots]
            slot.load_state_dict(modules[t].state_dict())
            real, fake = slot(real_x[t], real_y[t]), slot(fake_x, fake_y)
            loss = bce(real, torch.ones_like(real)) + bce(fake, torch.zeros_like(fake))
            opt.zero_grad()
            loss.backward()
            opt.step()
            modules[t].load_state_dict(slot.state_dict())
        for t, m in enumerate(modules):
            torch.testing.assert_close(ens.params.convs_0_weight[t], m.convs[0].weight.detach(), rtol=0, atol=1e-10)
            torch.testing.assert_close(ens.params.out_weight[t], m.out.weight.detach(), rtol=0, atol=1e-10)
    with pytest.raises(ValueError, match="must divide"):
        TeacherEnsemble(5, shape, 10, moment_slots=2)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_steps_as_the_cpu_in_one_chunk():
    """On a GPU the ensemble runs `chunk_size` teachers per chunk, not the CPU's allocator-sized chunks: 40
    reference MNIST teachers (CPU: chunks of 15) in one CUDA chunk take the same Adam steps and give the same
    input gradients as on the CPU (float64)."""
    n, b, shape = 40, 4, (1, 28, 28)
    cpu = TeacherEnsemble(n, shape, 10, chunk_size=50, seed=1).to(torch.float64)
    gpu = TeacherEnsemble(n, shape, 10, chunk_size=50, seed=1).to(torch.float64).cuda()
    assert len(cpu.chunks()) == 3 and gpu.chunks() == [(0, n)]
    for step in range(2):
        real_x, real_y, fake_x, fake_y = batches(n, b, shape, 10, seed=step)
        want = cpu.train_step(real_x, real_y, fake_x, fake_y)
        got = gpu.train_step(real_x.cuda(), real_y.cuda(), fake_x.cuda(), fake_y.cuda())
        torch.testing.assert_close(got.cpu(), want, rtol=0, atol=1e-10)
    torch.testing.assert_close(gpu.params.fc_weight.cpu(), cpu.params.fc_weight, rtol=0, atol=1e-8)
    torch.testing.assert_close(gpu.input_grads(fake_x.cuda(), fake_y.cuda()).cpu(), cpu.input_grads(fake_x, fake_y),
                               rtol=0, atol=1e-12)


def test_a_teacher_of_depth_one_is_logistic_regression_on_the_pixels_and_the_label():
    # PATE-GAN's teachers (its appendix: depth 1): one linear layer on [x, one-hot y], no BatchNorm
    ens = TeacherEnsemble(2, (1, 28, 28), 10, channels=[], hidden=0, seed=1).to(torch.float64)
    assert ens.shapes == {"out.weight": (1, 784 + 10), "out.bias": (1,)} and ens.inert == []
    x, y = torch.rand(5, 1, 28, 28, dtype=torch.float64), torch.randint(0, 10, (5,))
    w, bias = ens.params.out_weight[1, 0], ens.params.out_bias[1, 0]
    want = x.flatten(1) @ w[:784] + w[784:][y] + bias
    torch.testing.assert_close(ens.predict_logits(x, y)[1], want, rtol=0, atol=1e-12)
