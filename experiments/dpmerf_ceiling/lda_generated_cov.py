"""LDA from the released class means with the within-class covariance of 30,000 samples of a run's generator
(post-processing, free) instead of the private one (README). Reads outputs/dpmerf_ceiling/base/generator.pt."""
import time, torch
from dpgen.aggregation import feature_maps
from dpgen.data.mnist import MNISTDataModule
from dpgen.nn.generator import generate
torch.set_num_threads(1)
dm = MNISTDataModule(batch_size=500); dm.setup()
x, y = dm.train_data[:]; xt, yt = dm.test_data[:]
rel = torch.load("outputs/dpmerf_ceiling/base/generator.pt", map_location="cpu", weights_only=False)
lab = torch.arange(30000) % 10
with torch.no_grad():
    xg = generate(rel["generator"], lab, rel["z_dim"], rel["latent_dist"], 1000, None)
D = 4000
phi = feature_maps.build(None, (1, 28, 28), D, 5.0, seed=0).double()
M = torch.zeros(10, D, dtype=torch.float64)
for i in range(0, len(x), 4096):
    M.index_add_(0, y[i:i+4096], phi(x[i:i+4096].double()))
means = M / torch.bincount(y, minlength=10).double()[:, None]
S = torch.zeros(D, D, dtype=torch.float64); Mg = torch.zeros(10, D, dtype=torch.float64)
for i in range(0, len(xg), 4096):
    f = phi(xg[i:i+4096].double()); S += f.T @ f; Mg.index_add_(0, lab[i:i+4096], f)
mg = Mg / torch.bincount(lab, minlength=10).double()[:, None]
cov = S / len(xg) - mg.T @ mg / 10
ft = phi(xt.double())
for ridge in (1e-3, 1e-2, 1e-1):
    w = torch.linalg.solve(cov + ridge * torch.eye(D, dtype=torch.float64) * cov.diagonal().mean(), means.T)
    b = -0.5 * (means * w.T).sum(1)
    print("gen-cov LDA", ridge, (( ft @ w + b).argmax(1) == yt).double().mean().item(), flush=True)
    wg = torch.linalg.solve(cov + ridge * torch.eye(D, dtype=torch.float64) * cov.diagonal().mean(), mg.T)
    bg = -0.5 * (mg * wg.T).sum(1)
    print("  gen-only LDA", ridge, ((ft @ wg + bg).argmax(1) == yt).double().mean().item(),
          "agreement on gen", ((phi(xg[:5000].double()) @ w + b).argmax(1) == lab[:5000]).double().mean().item(), flush=True)
