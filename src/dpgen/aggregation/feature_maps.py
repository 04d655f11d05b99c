"""Data-independent feature maps for DP-MERF's one release (aggregation/mean_embedding.py), beside its pixel random
Fourier features: every map sends each record to a vector of L2 norm exactly 1 (non-finite inputs included), so the
release's sensitivity sqrt(1 + a^2) does not depend on which map, or which weighted concatenation of maps, is used.

A map provides
- `forward(x)`: the (n, n_features) unit rows (explicit; the tests' independent check, small sizes),
- `describe()`: its public parameters (seed, sizes), for the ledger and for checking a resumed checkpoint.
The module's `class_sums(features, x, onehot)` (sum over the records of each class of their rows, (K, n_features),
as the release needs) and `mmd_loss(features, x, y, target)` (sum_c |sum_{i: y_i = c} (phi(x_i) - target_c)|^2 /
B^2, DP-MERF's generator loss against the released class means `target`) use the explicit rows; a map whose rows
are too long to build for a generated batch (NTKFeatures, MarginalFeatures, WeightedConcat of such blocks) provides
methods of the same names that compute them without the rows."""
from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import torch
from torch import nn

from dpgen.aggregation.mean_embedding import RandomFourierFeatures


def finite_rows(x: torch.Tensor) -> torch.Tensor:
    """(n,) True where every entry of the flattened row is finite."""
    return x.flatten(1).isfinite().all(1)


def explicit_mmd_loss(phi: torch.Tensor, y: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """sum_c |sum_{i: y_i = c} (phi_i - target_c)|^2 / B^2 from explicit rows phi (B, D)."""
    per_class = torch.zeros_like(target).index_add_(0, y, phi.to(target.dtype) - target[y])
    return per_class.pow(2).sum() / len(y) ** 2


class NTKFeatures(nn.Module):
    """The normalised empirical neural tangent kernel features of a randomly initialised, never trained network
    (DP-NTK: Yang, Adamczewski, Sutherland, Li & Park, 2023, section 3: phi(x) = grad_theta f_theta(x) /
    |grad_theta f_theta(x)|): f(x) = v . relu(W x + b) + c, one hidden layer of `width` ReLU units, scalar output,
    PyTorch's default nn.Linear initialisation drawn from `seed` (public, data-independent). Its gradient in
    (v, b, W, c) is u(x) = [relu(h), v * 1[h > 0], (v * 1[h > 0]) x^T, 1], h = W x + b, whose norm is >= 1 (the
    constant of c), so phi = u / |u| has norm exactly 1; a record with a non-finite entry, or whose |u| overflows,
    is mapped to phi(0), a fixed public unit vector.

    n_features = 2 width + width dim + 1 (the network's parameter count). The rows of a generated batch are never
    built: the release sums (v * mask / |u|) x^T per class with one matmul, and the loss uses the inner products
    <u_i, u_j> = relu(h_i) . relu(h_j) + (x_i . x_j + 1) (v m_i) . (v m_j) + 1 and <u_i, t> for the target t."""

    def __init__(self, dim: int, width: int, seed: int):
        super().__init__()
        if width < 1:
            raise ValueError(f"need width >= 1, got {width}")
        self.dim, self.width, self.seed = int(dim), int(width), int(seed)
        self.n_features = 2 * self.width + self.width * self.dim + 1
        g = torch.Generator().manual_seed(self.seed)
        bound_in, bound_hidden = 1 / math.sqrt(self.dim), 1 / math.sqrt(self.width)  # nn.Linear's default init
        self.register_buffer("w", (2 * torch.rand(self.width, self.dim, generator=g) - 1) * bound_in,
                             persistent=False)
        self.register_buffer("b", (2 * torch.rand(self.width, generator=g) - 1) * bound_in, persistent=False)
        self.register_buffer("v", (2 * torch.rand(self.width, generator=g) - 1) * bound_hidden, persistent=False)

    def describe(self) -> dict:
        return {"kind": "ntk", "width": self.width, "seed": self.seed}

    def parts(self, x: torch.Tensor):
        """(x (n, dim), relu(h) (n, width), v * mask (n, width), |u| (n,)), non-finite records replaced by 0."""
        x = x.flatten(1).to(self.w.dtype)
        x = torch.where(finite_rows(x)[:, None], x, torch.zeros_like(x))
        for _ in range(2):  # the second pass only if some |u| overflowed: those records become 0 too
            h = x @ self.w.T + self.b
            relu, vm = h.clamp(min=0), self.v * (h > 0).to(x.dtype)
            norm2 = relu.pow(2).sum(1) + (x.pow(2).sum(1) + 1) * vm.pow(2).sum(1) + 1
            bad = ~norm2.isfinite()
            if not bad.any():
                break
            x = torch.where(bad[:, None], torch.zeros_like(x), x)
        return x, relu, vm, norm2.sqrt()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x, relu, vm, norm = self.parts(x)
        # DP-NTK section 3: the e-NTK feature grad_theta f(x), normalised to norm 1 per record
        u = torch.cat([relu, vm, (vm[:, :, None] * x[:, None, :]).flatten(1), torch.ones_like(norm)[:, None]], 1)
        return u / norm[:, None]

    def class_sums(self, x: torch.Tensor, onehot: torch.Tensor) -> torch.Tensor:
        x, relu, vm, norm = self.parts(x)
        weight = onehot.to(x.dtype) / norm[:, None]  # (n, K): row i's class, divided by its |u|
        k = weight.shape[1]
        grad_w = torch.einsum("nk,nm,nd->kmd", weight, vm, x).reshape(k, -1)  # per class sum of (v m / |u|) x^T
        return torch.cat([weight.T @ relu, weight.T @ vm, grad_w, weight.sum(0)[:, None]], 1)

    def split(self, target: torch.Tensor):
        m = self.width
        return target[:, :m], target[:, m:2 * m], target[:, 2 * m:-1].reshape(-1, m, self.dim), target[:, -1]

    def mmd_loss(self, x: torch.Tensor, y: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        x, relu, vm, norm = self.parts(x)
        t_relu, t_vm, t_w, t_c = self.split(target.to(x.dtype))
        same = (y[:, None] == y[None, :]).to(x.dtype)
        gram = relu @ relu.T + (x @ x.T + 1) * (vm @ vm.T) + 1
        gram = gram / (norm[:, None] * norm[None, :])
        proj = torch.zeros_like(relu)  # row i: W-part of the target of its class applied to x_i, (n, width)
        for c in y.unique():
            rows = y == c
            proj[rows] = x[rows] @ t_w[c].T
        cross = ((relu * t_relu[y]).sum(1) + (vm * (t_vm[y] + proj)).sum(1) + t_c[y]) / norm  # <phi_i, t_{y_i}>
        counts = torch.bincount(y, minlength=len(target)).to(x.dtype)
        cross_sum = torch.zeros_like(counts).index_add_(0, y, cross)
        total = (gram * same).sum() - 2 * (counts * cross_sum).sum() + (counts.pow(2) * target.pow(2).sum(1)).sum()
        return total / len(y) ** 2


class ConvFeatures(nn.Module):
    """A randomly initialised, never trained convolution as a perceptual feature extractor (DP-MEPF, Harder, Jalali
    Asadabadi, Sutherland & Park, TMLR 2023, section 3, with random instead of publicly pretrained weights): f(x)
    = avg_pool(relu(conv(x)), `pool`) flattened, `channels` filters of `kernel` x `kernel` at `stride`, padded by
    kernel // 2 (He-normal weights, zero-mean normal biases of std `bias_std`, drawn from `seed`), averaged over
    `pool` x `pool` regions of the convolution's output; with `moments=2` also
    its squares f * f (DP-MEPF's second moments, per feature). The row is [f, f^2] / |[f, f^2]|, norm exactly 1
    (DP-MEPF section 3.2: features normalised per record to bound the sensitivity); a record with a non-finite
    entry, a non-finite norm or no positive feature maps to a fixed public unit vector (1, .., 1) / sqrt(D)."""

    def __init__(self, shape: Sequence[int], channels: int, kernel: int, pool: int, seed: int, moments: int = 1,
                 bias_std: float = 0.1, stride: int = 1):
        super().__init__()
        c, height, width = shape
        if min(channels, kernel, pool, stride) < 1 or moments not in (1, 2):
            raise ValueError(f"need channels, kernel, pool, stride >= 1 and moments 1 or 2; got {channels}, {kernel}, "
                             f"{pool}, {stride}, {moments}")
        self.shape, self.channels, self.kernel, self.pool = tuple(shape), int(channels), int(kernel), int(pool)
        self.seed, self.moments, self.bias_std, self.stride = int(seed), int(moments), float(bias_std), int(stride)
        g = torch.Generator().manual_seed(self.seed)
        fan_in = c * kernel * kernel
        self.register_buffer("w", torch.randn(channels, c, kernel, kernel, generator=g) * math.sqrt(2 / fan_in),
                             persistent=False)
        self.register_buffer("b", torch.randn(channels, generator=g) * self.bias_std, persistent=False)
        conv = [(side + 2 * (kernel // 2) - kernel) // self.stride + 1 for side in (height, width)]
        self.n_features = self.moments * channels * (conv[0] // pool) * (conv[1] // pool)

    def describe(self) -> dict:
        return {"kind": "conv", "channels": self.channels, "kernel": self.kernel, "pool": self.pool,
                "stride": self.stride, "moments": self.moments, "bias_std": self.bias_std, "seed": self.seed}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.reshape(len(x), *self.shape).to(self.w.dtype)
        ok = finite_rows(x)
        x = torch.where(ok[:, None, None, None], x, torch.zeros_like(x))
        h = nn.functional.conv2d(x, self.w, self.b, stride=self.stride, padding=self.kernel // 2)
        f = nn.functional.avg_pool2d(h.relu(), self.pool).flatten(1)
        if self.moments == 2:  # DP-MEPF section 3: first and second (per-feature) moments in one released vector
            f = torch.cat([f, f * f], 1)
        norm = f.norm(dim=1, keepdim=True)
        good = ok[:, None] & norm.isfinite() & (norm > 0)
        fixed = torch.full_like(f, 1 / math.sqrt(self.n_features))
        return torch.where(good, f / torch.where(good, norm, torch.ones_like(norm)), fixed)


class PooledFourierFeatures(nn.Module):
    """The pixel random Fourier features of the image averaged over `pool` x `pool` blocks (a coarser resolution:
    the Gaussian kernel on downsampled images), norm exactly 1 as RandomFourierFeatures (whose guard maps a
    non-finite pooled row to phi(0)). Several resolutions in one release: one block each in a WeightedConcat."""

    def __init__(self, shape: Sequence[int], pool: int, n_features: int, bandwidth, seed: int):
        super().__init__()
        c, height, width = shape
        if pool < 1 or height % pool or width % pool:
            raise ValueError(f"pool must divide the image side, got {pool} for {height}x{width}")
        self.shape, self.pool = tuple(shape), int(pool)
        self.rff = RandomFourierFeatures(c * (height // pool) * (width // pool), n_features, bandwidth, seed)
        self.n_features = self.rff.n_features

    def describe(self) -> dict:
        return {"kind": "rff", "pool": self.pool, "n_features": self.n_features, "bandwidth": self.rff.bandwidth,
                "seed": self.rff.seed}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.reshape(len(x), *self.shape).to(self.rff.w.dtype)
        return self.rff(nn.functional.avg_pool2d(x, self.pool) if self.pool > 1 else x)


class MarginalFeatures(nn.Module):
    """A table's `order`-way marginals as a feature map, for records in the tabular datamodules' layout
    (data/tables.py: the continuous columns in [0, 1], then one one-hot block per categorical column; `one_hot` the
    blocks' sizes). Each column c becomes a unit vector u_c: a categorical block its row normalised (exactly its
    one-hot row for a real record), a continuous column `bins` Gaussian bumps exp(-((x - m_b) bins)^2 / 2) at the
    bin centres m_b = (b + 1/2) / bins, normalised (a soft histogram bin, differentiable for the generator). The
    row is [u_c1 x .. x u_c_order for each set of `order` columns] / sqrt(number of sets), flattened tensor
    products: each product of unit vectors has norm 1, so the row has norm exactly 1. The kernel is the mean over
    column sets of the product of their columns' kernels, and a class's mean embedding holds the class's soft
    `order`-way marginals, the statistics marginal-based synthesizers measure (MST, AIM); DP-HP's sum kernel
    (Vinaroz et al., ICML 2022) is the order-1 case with Hermite features. A non-finite continuous entry
    counts as 0, values outside [0, 1] are clipped, and a block with no positive entry maps to its uniform unit
    vector, so every record's row has norm 1, whatever it holds."""

    def __init__(self, dim: int, one_hot: Sequence[int], bins: int, order: int):
        super().__init__()
        self.one_hot = tuple(int(k) for k in one_hot)
        self.n_continuous = int(dim) - sum(self.one_hot)
        self.bins, self.order = int(bins), int(order)
        columns = self.n_continuous + len(self.one_hot)
        if self.n_continuous < 0 or any(k < 1 for k in self.one_hot) or self.bins < 1:
            raise ValueError(f"one-hot blocks {list(self.one_hot)} of a {dim}-column table with {bins} bins: need "
                             "blocks of >= 1 column that fit in the table and bins >= 1")
        if not 1 <= self.order <= columns:
            raise ValueError(f"need 1 <= order <= {columns} (the table's columns), got {order}")
        self.sizes = [self.bins] * self.n_continuous + list(self.one_hot)
        self.sets = list(itertools.combinations(range(columns), self.order))
        self.n_features = sum(math.prod(self.sizes[c] for c in s) for s in self.sets)
        self.register_buffer("centres", (torch.arange(self.bins, dtype=torch.float32) + 0.5) / self.bins,
                             persistent=False)

    def describe(self) -> dict:
        return {"kind": "marginals", "order": self.order, "bins": self.bins, "one_hot": list(self.one_hot)}

    def columns(self, x: torch.Tensor) -> list[torch.Tensor]:
        """u_c (n, size_c) for each column, every row of norm 1."""
        x = x.flatten(1).to(self.centres.dtype)
        cont, *blocks = x.split([self.n_continuous, *self.one_hot], 1)
        cont = torch.nan_to_num(cont, nan=0.0, posinf=0.0, neginf=0.0).clamp(0, 1)
        units = []
        for c in range(self.n_continuous):
            bumps = torch.exp(-0.5 * ((cont[:, c:c + 1] - self.centres) * self.bins) ** 2)
            units.append(bumps / bumps.norm(dim=1, keepdim=True))  # the nearest bump is >= exp(-1/8)
        for block in blocks:
            block = torch.nan_to_num(block, nan=0.0, posinf=0.0, neginf=0.0).clamp(min=0)
            top = block.amax(dim=1, keepdim=True)
            block = block / torch.where(top > 0, top, torch.ones_like(top))  # in [0, 1]: its norm cannot overflow
            norm = block.norm(dim=1, keepdim=True)
            uniform = torch.full_like(block, 1 / math.sqrt(block.shape[1]))
            units.append(torch.where(norm > 0, block / torch.where(norm > 0, norm, torch.ones_like(norm)), uniform))
        return units

    @staticmethod
    def row_products(first: torch.Tensor, others: Sequence[torch.Tensor]) -> torch.Tensor:
        """Row by row, the flattened tensor product first_i x others[0]_i x .. (n, product of the widths)."""
        for u in others:
            first = (first[:, :, None] * u[:, None, :]).flatten(1)
        return first

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        units = self.columns(x)
        parts = [self.row_products(units[s[0]], [units[c] for c in s[1:]]) for s in self.sets]
        return torch.cat(parts, 1) / math.sqrt(len(self.sets))

    def class_sums(self, x: torch.Tensor, onehot: torch.Tensor) -> torch.Tensor:
        """onehot^T forward(x) without the (n, n_features) rows: for each column set, the class weights times all
        but its last column's unit vectors (n, K x ..), then one matmul with the last column's (10 times less
        memory than the rows for three columns of 10)."""
        units = self.columns(x)
        weight = onehot.to(units[0].dtype)
        parts = [(self.row_products(weight, [units[c] for c in s[:-1]]).T @ units[s[-1]]).reshape(weight.shape[1], -1)
                 for s in self.sets]
        return torch.cat(parts, 1) / math.sqrt(len(self.sets))

    def mmd_loss(self, x: torch.Tensor, y: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """explicit_mmd_loss from the class sums: sum_{i: y_i = c} (phi_i - target_c) = S_c - n_c target_c."""
        onehot = nn.functional.one_hot(y.long(), target.shape[0])
        per_class = self.class_sums(x, onehot).to(target.dtype) - onehot.sum(0).to(target.dtype)[:, None] * target
        return per_class.pow(2).sum() / len(y) ** 2


class WeightedConcat(nn.Module):
    """[sqrt(w_1) phi_1(x), .., sqrt(w_J) phi_J(x)] with w_j = weight_j / sum(weights): every block has norm 1, so
    the row has norm sqrt(sum_j w_j) = 1 exactly, and the kernel is the weighted mean sum_j w_j k_j of the blocks'
    kernels; DP-MERF's loss is then sum_j of block j's loss against its part of the target, scaled by w_j."""

    def __init__(self, blocks: Sequence[nn.Module], weights: Sequence[float]):
        super().__init__()
        if len(blocks) != len(weights) or not blocks or not all(w > 0 for w in weights):
            raise ValueError(f"need one weight > 0 per block, got {list(weights)} for {len(blocks)} blocks")
        self.blocks = nn.ModuleList(blocks)
        total = float(sum(weights))
        self.weights = [float(w) / total for w in weights]
        self.sizes = [b.n_features for b in blocks]
        self.n_features = sum(self.sizes)

    def describe(self) -> dict:
        return {"kind": "concat", "blocks": [{**describe(b), "weight": w} for b, w in zip(self.blocks, self.weights)]}

    @property
    def dtype(self) -> torch.dtype:
        return next(iter(self.blocks[0].buffers())).dtype

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([math.sqrt(w) * b(x) for b, w in zip(self.blocks, self.weights)], 1)

    def class_sums(self, x: torch.Tensor, onehot: torch.Tensor) -> torch.Tensor:
        return torch.cat([math.sqrt(w) * class_sums(b, x, onehot) for b, w in zip(self.blocks, self.weights)], 1)

    def mmd_loss(self, x: torch.Tensor, y: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        # |sqrt(w) sum phi - t|^2 = w |sum phi - t / sqrt(w)|^2, block by block
        parts = target.split(self.sizes, 1)
        return sum(w * mmd_loss(b, x, y, t / math.sqrt(w)) for b, w, t in zip(self.blocks, self.weights, parts))


def describe(features: nn.Module) -> dict:
    if isinstance(features, RandomFourierFeatures):
        return {"kind": "rff", "n_features": features.n_features, "bandwidth": features.bandwidth,
                "seed": features.seed}
    return features.describe()


def class_sums(features: nn.Module, x: torch.Tensor, onehot: torch.Tensor) -> torch.Tensor:
    """(K, D): per class sums of the rows of `features` over the records x with one-hot labels `onehot`."""
    if hasattr(features, "class_sums"):
        return features.class_sums(x, onehot)
    phi = features(x)
    return onehot.to(phi.dtype).T @ phi


def mmd_loss(features: nn.Module, x: torch.Tensor, y: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    if hasattr(features, "mmd_loss"):
        return features.mmd_loss(x, y, target)
    return explicit_mmd_loss(features(x), y, target)


def scale(bandwidth, factor: float):
    """A bandwidth or list of bandwidths times factor."""
    return bandwidth * factor if isinstance(bandwidth, (int, float)) else [b * factor for b in bandwidth]


def build(spec: Sequence[dict] | None, shape: Sequence[int], n_features: int, bandwidth, seed: int,
          one_hot: Sequence[int] | None = None) -> nn.Module:
    """The method's feature map: None: the pixel RandomFourierFeatures(n_features, bandwidth, seed) alone (DP-MERF);
    otherwise a WeightedConcat of the listed blocks, each a dict {kind: rff | ntk | conv | marginals, weight, ...its
    options} (marginals: tables only, `one_hot` the sizes of the table's one-hot blocks),
    block j's random draws from seed + j (an rff block without n_features / bandwidth takes the method's; with
    pool p, PooledFourierFeatures, its default bandwidth is the method's / p: averaging p x p pixels divides the
    distance between two images by about p)."""
    dim = math.prod(shape)
    if spec is None:
        return RandomFourierFeatures(dim, n_features, bandwidth, seed)
    blocks, weights = [], []
    for j, entry in enumerate(spec):
        entry = dict(entry)
        kind, weight = entry.pop("kind"), float(entry.pop("weight", 1.0))
        block_seed = seed + j
        if kind == "rff" and entry.get("pool", 1) != 1:  # pooled: bandwidth / pool unless given
            pool = int(entry.pop("pool"))
            blocks.append(PooledFourierFeatures(shape, pool, int(entry.pop("n_features", n_features)),
                                                entry.pop("bandwidth", scale(bandwidth, 1 / pool)), block_seed))
        elif kind == "rff":
            entry.pop("pool", None)
            blocks.append(RandomFourierFeatures(dim, int(entry.pop("n_features", n_features)),
                                                entry.pop("bandwidth", bandwidth), block_seed))
        elif kind == "ntk":
            blocks.append(NTKFeatures(dim, int(entry.pop("width", 800)), block_seed))
        elif kind == "conv":
            blocks.append(ConvFeatures(shape, int(entry.pop("channels", 64)), int(entry.pop("kernel", 5)),
                                       int(entry.pop("pool", 7)), block_seed, moments=int(entry.pop("moments", 1)),
                                       bias_std=float(entry.pop("bias_std", 0.1)), stride=int(entry.pop("stride", 2))))
        elif kind == "marginals":
            if one_hot is None or len(shape) != 1:
                raise ValueError("a marginals feature block reads a table's columns: it takes tabular data only")
            blocks.append(MarginalFeatures(dim, one_hot, int(entry.pop("bins", 10)), int(entry.pop("order", 2))))
        else:
            raise ValueError(f"unknown feature block kind {kind!r} (rff, ntk, conv or marginals)")
        if entry:
            raise ValueError(f"unknown options {sorted(entry)} for a {kind} feature block")
        weights.append(weight)
    return WeightedConcat(blocks, weights)
