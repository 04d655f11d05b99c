"""LDA on pixel RFF features (bandwidth 5) from the noise-free private class means and within-class second moments:
accuracy on the real MNIST test set for D = 2,000 / 4,000 (README, "What would separate them"). No arguments."""
import time, torch
from dpgen.aggregation import feature_maps
from dpgen.data.mnist import MNISTDataModule
torch.set_num_threads(1)
dm = MNISTDataModule(batch_size=500); dm.setup()
x, y = dm.train_data[:]; xt, yt = dm.test_data[:]
for D, bw in [(2000, 5.0), (4000, 5.0), (2000, 3.0)]:
    t = time.time()
    phi = feature_maps.build(None, (1, 28, 28), D, bw, seed=0).double()
    S = torch.zeros(D, D, dtype=torch.float64); M = torch.zeros(10, D, dtype=torch.float64)
    for i in range(0, len(x), 4096):
        f = phi(x[i:i+4096].double()); S += f.T @ f
        M.index_add_(0, y[i:i+4096], f)
    n = torch.bincount(y, minlength=10).double()
    means = M / n[:, None]
    cov = S / len(x) - (means.T * (n / len(x))) @ means   # within-class covariance
    for ridge in (1e-4, 1e-3):
        w = torch.linalg.solve(cov + ridge * torch.eye(D, dtype=torch.float64) * cov.diagonal().mean(), means.T)  # (D, K)
        b = -0.5 * (means * w.T).sum(1)
        score = phi(xt.double()) @ w + b
        print(D, bw, ridge, "LDA acc", (score.argmax(1) == yt).double().mean().item(), f"{time.time()-t:.0f}s", flush=True)
