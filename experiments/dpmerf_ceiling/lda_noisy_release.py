"""DP-LDA simulated: the class sums and the second-moment matrix of D = 2,000 RFF features released in one vector
(weights 1/2 each, count column a = 0.2) with the Gaussian noise of eps = 10 and 1 (sigma from privacy/gaussian.py;
ridge read on the test set: optimistic) (README). No arguments."""
import torch, math
from dpgen.aggregation import feature_maps
from dpgen.data.mnist import MNISTDataModule
torch.set_num_threads(1)
dm = MNISTDataModule(batch_size=500); dm.setup()
x, y = dm.train_data[:]; xt, yt = dm.test_data[:]
D, b, a = 2000, 0.5, 0.2
phi = feature_maps.build(None, (1, 28, 28), D, 5.0, seed=0).double()
S = torch.zeros(D, D, dtype=torch.float64); M = torch.zeros(10, D, dtype=torch.float64)
for i in range(0, len(x), 4096):
    f = phi(x[i:i+4096].double()); S += f.T @ f; M.index_add_(0, y[i:i+4096], f)
n = torch.bincount(y, minlength=10).double()
ft = phi(xt.double())
g = torch.Generator().manual_seed(1)
for eps, sigma in ((1e4, 0.0), (10, 0.5098), (1, 3.8045)):
    Mn = math.sqrt(1 - b) * M + sigma * torch.randn(M.shape, generator=g, dtype=torch.float64)
    Sn = math.sqrt(b) * S + sigma * torch.randn(S.shape, generator=g, dtype=torch.float64)
    nn_ = n + sigma / a * torch.randn(10, generator=g, dtype=torch.float64)
    Sn = (Sn + Sn.T) / 2 / math.sqrt(b); Mn = Mn / math.sqrt(1 - b)
    means = Mn / nn_[:, None]; N = nn_.sum()
    cov = Sn / N - (means.T * (nn_ / N)) @ means
    evals, evecs = torch.linalg.eigh(cov)
    for ridge in (1e-4, 1e-3, 3e-3, 1e-2):
        w = evecs @ ((evecs.T @ means.T) / (evals.clamp(min=0) + ridge)[:, None])
        bb = -0.5 * (means * w.T).sum(1)
        print(f"eps {eps} ridge {ridge}: LDA {((ft @ w + bb).argmax(1) == yt).double().mean().item():.4f}", flush=True)
