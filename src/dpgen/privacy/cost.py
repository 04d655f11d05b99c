"""What one training step can cost, described once per mechanism (in the spirit of dp_accounting's DpEvent).

A method builds its `StepCost` from its own parameters; PrivacyBudget checks `worst` before each step and refuses a
run whose first step cannot fit the budget (`epsilon`), and the planner (`python -m dpgen.cli.plan`) turns the same
description into the number of steps a budget buys. A cost is a mapping in the ledger's `extra` format: bound -> RDP
over `orders` and / or "gdp_mu" -> mu."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from .dpsgd import rdp_subsampled_gaussian
from .ledger import GDP_EXTRA, NO_DATA_DEPENDENT_BOUND, PrivacyLedger
from .plan import largest_fitting
from .pld import compose_gdp, dpsgd_event, epsilon_pld
from .rdp import as_orders


@dataclass(frozen=True)
class StepCost:
    worst: Mapping            # the dearest a step can be (every query answered): what PrivacyBudget checks
    orders: np.ndarray        # the RDP orders of the costs
    best: Mapping | None = None  # a lower bound on any step (cheapest votes, no query answered); None: always `worst`
    aliases: Mapping = field(default_factory=dict)  # the method ledger's bound aliases
    pld_events: tuple = ()    # ((PLD event, count), ...) of one step when all of it is Gaussian (conversion=pld)
    pld_bounds: tuple | None = None  # the bounds those events describe (None: all; the ledger's pld_bounds)
    # a release made once before training, in the same format: G-PATE's class ratio (RDP), DP-MERF's mean
    # embedding ({"gdp_mu": mu})
    upfront: Mapping | None = None

    def ledger(self) -> PrivacyLedger:
        """A ledger holding what a run has spent before its first step."""
        ledger = PrivacyLedger(self.orders, aliases=self.aliases, pld_bounds=self.pld_bounds)
        upfront = dict(self.upfront or {})
        mu = float(upfront.pop(GDP_EXTRA, 0.0))
        if upfront:
            ledger.record("upfront", upfront)
        if mu > 0:
            ledger.record_gdp("upfront_gdp", mu)
        return ledger

    def epsilon(self, delta: float, bound: str, conversion: str, case: str = "worst", n: int = 1) -> float:
        """epsilon at `delta` of the upfront release and n steps, each costing the `case` cost ("worst" or
        "best"), under `bound` and `conversion`: with case="best" and n=1, the least a run's first step costs."""
        cost = self.worst if case == "worst" or self.best is None else self.best
        if conversion == "pld":
            if not self.pld_events or self.upfront is not None:
                raise ValueError("privacy.conversion=pld needs every release to be a Gaussian or a Poisson-subsampled "
                                 "Gaussian")
            self.ledger().check_pld_bound(bound)
            mu = math.sqrt(n) * float(cost.get(GDP_EXTRA, 0.0))  # n mu-GDP: sqrt(n) mu (Dong et al. 2022 Cor. 3.3)
            return epsilon_pld(compose_gdp([(event, n * count) for event, count in self.pld_events], mu), delta)
        if conversion == "gdp" and set(cost) - {GDP_EXTRA}:
            raise ValueError("privacy.conversion=gdp needs every release in Gaussian DP (PATE-TripleGAN: "
                             "method.module.accounting=clt)")
        return self.ledger().epsilon(delta, bound, conversion, extra=times(cost, n))[0]

    def steps(self, epsilon: float, delta: float, bound: str, conversion: str, case: str = "worst") -> int:
        """The most steps, each costing the `case` ("worst" or "best") cost, that fit (epsilon, delta) under
        `bound` and `conversion`, after the upfront release: what PrivacyBudget lets a run take."""
        if not epsilon > 0:
            raise ValueError(f"epsilon must be > 0, got {epsilon}")
        return largest_fitting(lambda n: self.epsilon(delta, bound, conversion, case, n) <= epsilon)


def times(cost: Mapping, n: int) -> dict:
    """n steps of `cost`: RDP adds up; n mu-GDP releases compose to sqrt(n) mu (Dong et al. 2022 Cor. 3.3)."""
    return {k: (math.sqrt(n) * float(v) if k == GDP_EXTRA else n * np.asarray(v, dtype=float)) for k, v in cost.items()}


def dpsgd_step(q: float, noise_multiplier: float, steps: int, orders) -> StepCost:
    """`steps` DP-SGD steps (one generator iteration of DP-GAN / DP-CGAN): the same cost every time."""
    orders = as_orders(orders)
    return StepCost({"data_independent": rdp_subsampled_gaussian(q, noise_multiplier, steps, orders)}, orders,
                    aliases=NO_DATA_DEPENDENT_BOUND, pld_events=((dpsgd_event(q, noise_multiplier), steps),))
