"""Mechanisms and accountants: plain numpy functions over RDP orders, and the PrivacyLedger.

Modules: rdp (orders, RDP -> (eps, delta)), pate (Confident-GNMax), pategan (Laplace PATE moments
accountant), dpsgd (subsampled Gaussian via Opacus), gdp (Gaussian DP), gaussian (one Gaussian release
calibrated to a budget: the analytic Gaussian mechanism), laplace (released counts),
ledger (PrivacyLedger), cost (StepCost: what one training step can cost), plan (steps
within a budget), pld (privacy loss distributions via dp_accounting), selection (Report Noisy Max over a
private validation split, and its composition with the generator's release).
See docs/PRIVACY.md.
"""

from .ledger import PrivacyLedger
from .rdp import DEFAULT_ORDERS, eps_from_rdp

__all__ = ["DEFAULT_ORDERS", "PrivacyLedger", "eps_from_rdp"]
