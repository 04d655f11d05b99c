"""A labeller fitted on a generator's own samples (DP-MERF's method.module.relabel=logistic): a logistic regression
trained on records drawn from the trained generator, with the labels the generator drew them for, then used to
label every synthetic record. It reads only the generator, a function of the differentially private release, so
it is post-processing and costs no privacy."""
from __future__ import annotations

import torch
from sklearn.linear_model import LogisticRegression
from torch import nn

KINDS = (None, "logistic")  # method.module.relabel
SAMPLES = 20_000  # records drawn to fit it (about the size of the real tables' training splits)


def logistic_labeller(x: torch.Tensor, y: torch.Tensor, num_classes: int) -> nn.Sequential:
    """Flatten, then a Linear layer whose logits are those of scikit-learn's LogisticRegression (its defaults: L2
    penalty, C = 1, lbfgs) fitted on (x, y): its argmax is the regression's prediction and its softmax the
    regression's probabilities. A class absent from y gets the logit -inf (never predicted); ValueError if y
    holds fewer than two classes."""
    present = sorted(set(y.tolist()))
    if len(present) < 2:
        raise ValueError(f"a logistic labeller needs samples of at least two classes, got only {present}")
    fit = LogisticRegression(max_iter=5000).fit(x.reshape(len(x), -1).double().numpy(), y.numpy())
    coef = torch.as_tensor(fit.coef_, dtype=torch.float32)
    intercept = torch.as_tensor(fit.intercept_, dtype=torch.float32)
    if len(present) == 2:  # scikit-learn's binary model: one logit for the second class against the first
        coef, intercept = torch.cat([torch.zeros_like(coef), coef]), torch.cat([torch.zeros(1), intercept])
    linear = nn.Linear(coef.shape[1], num_classes)
    with torch.no_grad():
        linear.weight.zero_()
        linear.bias.fill_(-torch.inf)
        linear.weight[present] = coef
        linear.bias[present] = intercept
    linear.requires_grad_(False)
    return nn.Sequential(nn.Flatten(), linear)
