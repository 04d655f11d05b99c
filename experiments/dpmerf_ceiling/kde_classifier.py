"""How class-discriminative a DP-MERF feature map is: the noise-free release's class means m_c define a Parzen
classifier argmax_c <phi(x), m_c> (+ log of the class share); its accuracy on the real MNIST test set is measured
here for the pixel random Fourier features and the feature maps of aggregation/feature_maps.py.
Usage: kde_classifier.py  (prints one line per map)"""
import time

import torch

from dpgen.aggregation import feature_maps
from dpgen.aggregation.mean_embedding import embedding_sums
from dpgen.data.mnist import MNISTDataModule

MAPS = {
    "rff bw5 D10k": None,
    "rff bw3 D10k": ("bw", 3.0),
    "ntk800": [{"kind": "ntk", "width": 800}],
    "conv128 s2 pool7 m2": [{"kind": "conv", "channels": 128, "kernel": 5, "stride": 2, "pool": 7, "moments": 2}],
    "conv128 s2 pool2": [{"kind": "conv", "channels": 128, "kernel": 5, "stride": 2, "pool": 2}],
}


def main():
    torch.set_num_threads(1)
    dm = MNISTDataModule(batch_size=500)
    dm.setup()
    train, test = dm.train_data, dm.test_data
    xt, yt = test[:]
    for name, spec in MAPS.items():
        start = time.time()
        bw = 5.0
        if isinstance(spec, tuple):
            bw, spec = spec[1], None
        phi = feature_maps.build(spec, (1, 28, 28), 10_000, bw, seed=0)
        chunks = [train[i:i + 4096] for i in range(0, len(train), 4096)]
        sums = embedding_sums(chunks, phi, 10, 1.0)
        counts = sums[:, -1]
        means = (sums[:, :-1] / counts[:, None]).float()
        correct = 0
        for i in range(0, len(xt), 1000):
            if isinstance(phi, feature_maps.NTKFeatures):  # NTK rows of 1000 images are 2.5 GB: use the structure
                score = torch.stack([ntk_scores(phi, xt[i:i + 1000], means[c]) for c in range(10)], 1)
            else:
                score = phi(xt[i:i + 1000]) @ means.T
            correct += (score.argmax(1) == yt[i:i + 1000]).sum().item()
        print(f"{name}: Parzen accuracy {correct / len(xt):.4f} ({time.time() - start:.0f} s)", flush=True)


def ntk_scores(phi, x, mean):
    x, relu, vm, norm = phi.parts(x)
    t_relu, t_vm, t_w, t_c = phi.split(mean[None])
    return ((relu * t_relu).sum(1) + (vm * (t_vm + x @ t_w[0].T)).sum(1) + t_c) / norm


if __name__ == "__main__":
    main()
