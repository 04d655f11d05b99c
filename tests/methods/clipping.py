"""The clipped gradient sum the DP-SGD tests compare against, computed term by term on a plain network."""
import torch


def clipped_sum(params, terms, c: float) -> list[torch.Tensor]:
    """Sum over (loss, clipped) terms of d loss / d params, scaled by Opacus' factor min(1, c / (norm + 1e-6))
    where clipped, as it is otherwise."""
    total = [torch.zeros_like(p) for p in params]
    for loss, clipped in terms:
        grads = torch.autograd.grad(loss, params)
        norm = torch.sqrt(sum(g.pow(2).sum() for g in grads)).item()
        scale = min(1.0, c / (norm + 1e-6)) if clipped else 1.0
        total = [t + scale * g for t, g in zip(total, grads)]
    return total
