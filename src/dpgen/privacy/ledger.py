"""PrivacyLedger: every release a run makes, its running RDP per bound, and epsilon(delta)."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence

import numpy as np

from . import pld
from .gdp import eps_from_gdp
from .rdp import CONVERSIONS, DEFAULT_ORDERS, as_orders, check_delta, eps_from_rdp

STANDARD_BOUNDS = ("data_dependent", "data_independent")
GDP_EXTRA = "gdp_mu"
# The aliases of a method whose releases are all priced without looking at the data (DP-SGD, GDP votes).
NO_DATA_DEPENDENT_BOUND = {"data_dependent": "data_independent"}

BOUND_NOTES = {
    "data_dependent": (
        "DATA-DEPENDENT bound (Papernot et al. 2018): computed from the private teacher votes, so the number"
        " itself depends on private data; it is not a differential-privacy guarantee unless released through"
        " smooth sensitivity. Reported because the G-PATE and PATE-GAN papers report it."
    ),
    "data_independent": "Data-independent bound: a worst-case (eps, delta)-DP guarantee for the released outputs.",
}

CONVERSION_NOTES = {
    "classical": "eps = min_a rdp(a) + log(1/delta)/(a-1) (Mironov 2017), as in G-PATE",
    "improved": "eps = min_a rdp(a) + log((a-1)/a) - (log delta + log a)/(a-1) (Balle et al. 2020)",
    "gdp": "exact mu-GDP conversion of Dong et al. 2022 (only when every release is GDP)",
    "pld": "privacy loss distribution (dp_accounting PLD accountant, pessimistic discretization): tight and sound;"
           " only when every release is a Gaussian or a Poisson-subsampled Gaussian (data-independent)",
}
ALL_CONVERSIONS = CONVERSIONS + ("gdp", "pld")


def conversion_for(conversion: str, has_pld: bool) -> str:
    """The conversion a bound is priced by: the requested one, except "pld" for a bound its PLD events do not
    describe (GS-WGAN's as_published), which is priced classically."""
    return conversion if conversion != "pld" or has_pld else "classical"

# Which neighbouring data sets a method's guarantee is about (privacy.json "neighbouring"; docs/PRIVACY.md).
NEIGHBOURING = {
    "add_remove": "add/remove one record. Teacher partitions, critic shards and the labelled split are a keyed "
                  "hash of each record and every per-teacher batch has a fixed size drawn from that teacher's "
                  "records alone (data/partition.py), so a record added or removed changes one teacher or "
                  "critic (their number is fixed); DP-SGD steps are Opacus' Poisson-subsampled Gaussian "
                  "(sampling rate batch / N, N treated as public)",
}


class PrivacyLedger:
    """Records releases and composes them.

    RDP channel: `record(mechanism, {bound: rdp_total_over_orders}, count, params)`. A mechanism must
    give the same bound names at every record. Under a bound a release does not give, it counts with
    its "data_independent" value, or, if it has none, with the elementwise max of the bounds it gives.

    GDP channel: `record_gdp(mechanism, mu, count, params)`; `count` releases each mu-GDP compose to
    sqrt(count) mu. A mu-GDP release is also (a, a mu^2 / 2)-RDP (Blackwell: it is a post-processing of
    N(0,1) vs N(mu,1)), which is how it joins the RDP total; `conversion="gdp"` is exact but allowed only
    when the ledger holds GDP releases alone.

    Aliases: a method may name the bounds it computes as another one, e.g. NO_DATA_DEPENDENT_BOUND, so that
    `privacy.bound=data_dependent` is reported as what it is. An aliased name is accepted wherever a bound is
    asked for, is resolved first (`resolve_bound`), and is neither recorded nor listed in `bounds`.

    PLD: an RDP release may also give `event`, its description for privacy.pld (the same at every record);
    `conversion="pld"` composes the privacy loss distributions of all releases (GDP ones as Gaussians), allowed
    only when every RDP release has an event and no GDP release is asymptotic. It prices no hypothetical
    `extra` step: budgets under it are checked after each step (PrivacyBudget rolls an over-budget step back).
    `pld_bounds`: the bounds the events describe (None: all; GS-WGAN's describe "sound", not "as_published").
    """

    def __init__(self, orders=DEFAULT_ORDERS, aliases: Mapping[str, str] | None = None,
                 pld_bounds: Sequence[str] | None = None):
        self.orders = as_orders(orders).copy()
        self.aliases = dict(aliases or {})
        self.pld_bounds = None if pld_bounds is None else tuple(pld_bounds)
        self._rdp: dict[str, dict] = {}
        self._gdp: dict[str, dict] = {}
        self.stop: dict | None = None

    # recording

    def record(self, mechanism: str, rdp: Mapping[str, np.ndarray], count: int = 1, params: dict | None = None,
               event: dict | None = None):
        if mechanism in self._gdp:
            raise ValueError(f"{mechanism!r} is recorded on the GDP channel")
        if not rdp:
            raise ValueError("record needs at least one bound")
        event = None if event is None else pld.check_event(event)
        aliased = sorted(set(rdp) & set(self.aliases))
        if aliased:
            raise ValueError(f"bounds {aliased} are aliases here ({self.aliases}): record the bound they stand for")
        if "data_dependent" in rdp and "data_independent" not in rdp:
            raise ValueError("a release with a data_dependent bound must also give its data_independent bound")
        values = {}
        for bound, value in rdp.items():
            value = np.asarray(value, dtype=float)
            if value.shape != self.orders.shape:
                raise ValueError(f"RDP for {bound!r} has shape {value.shape}, orders have {self.orders.shape}")
            if np.any(np.isnan(value)) or np.any(value < 0):
                raise ValueError(f"RDP for {bound!r} must be >= 0")
            values[bound] = value
        entry = self._rdp.get(mechanism)
        if entry is None:
            entry = self._rdp[mechanism] = {
                "count": 0,
                "params": [],
                "rdp": {bound: np.zeros_like(self.orders) for bound in values},
                "event": event,
            }
        if set(values) != set(entry["rdp"]):
            raise ValueError(f"{mechanism!r} recorded bounds {sorted(entry['rdp'])}, now {sorted(values)}")
        if event != entry["event"]:
            raise ValueError(f"{mechanism!r} recorded PLD event {entry['event']}, now {event}")
        for bound, value in values.items():
            entry["rdp"][bound] += value
        self._count(entry, count, params)

    def record_gdp(self, mechanism: str, mu: float, count: int = 1, params: dict | None = None, asymptotic=False):
        """`asymptotic=True` marks a central-limit mu (Bu et al. 2020), an approximation, not a bound."""
        if mechanism in self._rdp:
            raise ValueError(f"{mechanism!r} is recorded on the RDP channel")
        if not mu >= 0:
            raise ValueError(f"mu must be >= 0, got {mu}")
        entry = self._gdp.setdefault(mechanism, {"count": 0, "params": [], "mu_squared": 0.0, "asymptotic": False})
        entry["mu_squared"] += int(count) * float(mu) ** 2
        entry["asymptotic"] = entry["asymptotic"] or bool(asymptotic)
        self._count(entry, count, params)

    @staticmethod
    def _count(entry: dict, count: int, params: dict | None):
        if int(count) != count or count < 0:
            raise ValueError(f"count must be a non-negative integer, got {count}")
        entry["count"] += int(count)
        if params is not None and params not in entry["params"]:
            entry["params"].append(dict(params))

    def note_stop(self, reason: str, discarded_steps: int = 0):
        """Why training stopped and how many steps were rolled back (written to privacy.json)."""
        self.stop = {"reason": str(reason), "discarded_steps": int(discarded_steps)}

    # queries

    @property
    def bounds(self) -> list[str]:
        names = {bound for entry in self._rdp.values() for bound in entry["rdp"]}
        return sorted((names | set(STANDARD_BOUNDS)) - set(self.aliases))

    def resolve_bound(self, bound: str) -> str:
        """The bound `bound` is computed as (itself unless the method aliased it)."""
        return self.aliases.get(bound, bound)

    @property
    def empty(self) -> bool:
        return not self._rdp and not self._gdp

    @staticmethod
    def _under(entry: dict, bound: str) -> np.ndarray:
        rdp = entry["rdp"]
        if bound in rdp:
            return rdp[bound]
        if "data_independent" in rdp:
            return rdp["data_independent"]
        return np.max(np.stack(list(rdp.values())), axis=0)

    def _gdp_rdp(self, mu_squared: float) -> np.ndarray:
        return self.orders * mu_squared / 2.0

    def _check_bound(self, bound: str, extra: Mapping | None) -> str:
        """`bound` resolved through the aliases; ValueError if neither the ledger nor `extra` knows it."""
        resolved = self.resolve_bound(bound)
        known = set(self.bounds) | set(extra or ())
        if resolved not in known - {GDP_EXTRA}:
            raise ValueError(f"unknown bound {bound!r}; this ledger has {self.bounds}")
        return resolved

    def rdp(self, bound: str = "data_dependent", extra: Mapping | None = None) -> np.ndarray:
        """Total RDP over orders under `bound`. `extra` is a hypothetical further release used by budget
        checks: a mapping bound -> RDP over orders, or {"gdp_mu": mu} for a mu-GDP release."""
        bound = self._check_bound(bound, extra)
        extra = dict(extra or {})
        total = self._gdp_rdp(self.mu() ** 2 + float(extra.pop(GDP_EXTRA, 0.0)) ** 2)
        for entry in self._rdp.values():
            total = total + self._under(entry, bound)
        if extra:
            total = total + self._under({"rdp": {k: np.asarray(v, dtype=float) for k, v in extra.items()}}, bound)
        return total

    def mu(self) -> float:
        """Composed GDP parameter of the GDP releases."""
        return float(np.sqrt(sum(e["mu_squared"] for e in self._gdp.values())))

    def epsilon(self, delta: float, bound: str = "data_dependent", conversion: str = "classical",
                extra: Mapping | None = None):
        """(eps, order) such that the recorded releases (plus `extra`, see rdp) are (eps, delta)-DP under
        `bound`. order is None for the GDP conversion and for no release at all ((0, 0)-DP)."""
        delta = check_delta(delta)
        bound = self._check_bound(bound, extra)
        if conversion not in ALL_CONVERSIONS:
            raise ValueError(f"conversion must be one of {ALL_CONVERSIONS}, got {conversion!r}")
        if self.empty and not extra:
            return 0.0, None
        if conversion == "pld":
            if extra:
                raise ValueError("conversion='pld' prices no hypothetical step: check the budget after the step")
            self.check_pld_bound(bound)
            return pld.epsilon_pld(self.pld_events(), delta), None
        if conversion == "gdp":
            if self._rdp or set(extra or ()) - {GDP_EXTRA}:
                raise ValueError("conversion='gdp' needs a ledger of GDP releases only")
            mu = float(np.hypot(self.mu(), float((extra or {}).get(GDP_EXTRA, 0.0))))
            return eps_from_gdp(mu, delta), None
        return eps_from_rdp(self.rdp(bound, extra), self.orders, delta, conversion)

    def has_pld(self, bound: str) -> bool:
        return self.pld_bounds is None or self.resolve_bound(bound) in self.pld_bounds

    def check_pld_bound(self, bound: str) -> None:
        if not self.has_pld(bound):
            raise ValueError(f"conversion='pld' describes the bounds {list(self.pld_bounds)} only, not {bound!r}")

    def pld_missing(self) -> list[str]:
        """Mechanisms that keep conversion='pld' out: RDP releases without an event, asymptotic GDP ones."""
        return sorted([name for name, e in self._rdp.items() if e["event"] is None]
                      + [name for name, e in self._gdp.items() if e["asymptotic"]])

    def pld_events(self, mechanisms=None) -> list[tuple[dict, int]]:
        """(event, count) of the releases of `mechanisms` (all by default), the GDP ones as one Gaussian."""
        names = set(self._rdp) | set(self._gdp) if mechanisms is None else set(mechanisms)
        missing = sorted(set(self.pld_missing()) & names)
        if missing:
            raise ValueError(f"conversion='pld' needs every release as a Gaussian or subsampled Gaussian event; "
                             f"{missing} are not (an RDP-only mechanism or a central-limit mu)")
        events = [(e["event"], e["count"]) for name, e in self._rdp.items() if name in names]
        mu_squared = sum(e["mu_squared"] for name, e in self._gdp.items() if name in names)
        return pld.compose_gdp(events, float(np.sqrt(mu_squared)))

    def conversions(self) -> list[str]:
        gdp = ["gdp"] if self._gdp and not self._rdp else []
        return list(CONVERSIONS) + gdp + (["pld"] if not self.empty and not self.pld_missing() else [])

    def _eps_table(self, rdp_by_bound: dict, delta: float) -> dict:
        table = {}
        for bound, rdp in rdp_by_bound.items():
            table[bound] = {}
            for conversion in CONVERSIONS:
                eps, order = eps_from_rdp(rdp, self.orders, delta, conversion)
                table[bound][conversion] = {"epsilon": eps, "order": order}
        return table

    def summary(self, delta: float) -> dict:
        """Per-mechanism totals (count, params, eps under every bound and conversion) and the run totals."""
        delta = check_delta(delta)
        mechanisms = {}
        for name, entry in self._rdp.items():
            mechanisms[name] = {
                "channel": "rdp",
                "count": entry["count"],
                "params": entry["params"],
                "epsilon": self._eps_table({b: self._under(entry, b) for b in self.bounds}, delta),
            }
            if entry["event"] is not None:  # GDP mechanisms below have their exact "gdp" entry instead
                mechanisms[name]["pld_event"] = entry["event"]
                eps = pld.epsilon_pld(self.pld_events([name]), delta)
                for bound in filter(self.has_pld, self.bounds):
                    mechanisms[name]["epsilon"][bound]["pld"] = {"epsilon": eps, "order": None}
        for name, entry in self._gdp.items():
            mu = float(np.sqrt(entry["mu_squared"]))
            table = self._eps_table({b: self._gdp_rdp(entry["mu_squared"]) for b in self.bounds}, delta)
            for bound in table:
                table[bound]["gdp"] = {"epsilon": eps_from_gdp(mu, delta), "order": None}
            mechanisms[name] = {
                "channel": "gdp",
                "count": entry["count"],
                "params": entry["params"],
                "mu": mu,
                "asymptotic_mu": entry["asymptotic"],
                "epsilon": table,
            }
        total = {}
        conversions = self.conversions()
        pld_total = pld.epsilon_pld(self.pld_events(), delta) if "pld" in conversions else None
        for bound in self.bounds:
            total[bound] = {}
            for conversion in conversions:
                if conversion == "pld" and not self.has_pld(bound):
                    continue
                eps, order = (pld_total, None) if conversion == "pld" else self.epsilon(delta, bound, conversion)
                total[bound][conversion] = {"epsilon": eps, "order": order}
        return {"delta": delta, "mechanisms": mechanisms, "total": total}

    # persistence

    def state_dict(self) -> dict:
        """Plain python (lists, floats, dicts): safe for torch.load(weights_only=True) checkpoints."""
        rdp = {
            name: {"count": e["count"], "params": copy.deepcopy(e["params"]),
                   "rdp": {b: v.tolist() for b, v in e["rdp"].items()}, "event": copy.deepcopy(e["event"])}
            for name, e in self._rdp.items()
        }
        return {"orders": self.orders.tolist(), "rdp": rdp, "gdp": copy.deepcopy(self._gdp),
                "stop": copy.deepcopy(self.stop)}

    def load_state_dict(self, state: dict):
        state = copy.deepcopy(state)
        self.orders = as_orders(state["orders"])
        self._rdp = {
            name: {"count": e["count"], "params": e["params"],  # older runs also recorded aliased names: dropped
                   "rdp": {b: np.asarray(v, dtype=float) for b, v in e["rdp"].items() if b not in self.aliases},
                   "event": e.get("event")}
            for name, e in state["rdp"].items()
        }
        self._gdp = state["gdp"]
        self.stop = state["stop"]

    def report_json(self, delta: float, governing_bound: str, extra: dict | None = None,
                    conversion: str = "classical") -> str:
        """The text of privacy.json: every bound and conversion, which bound and conversion governed the run."""
        summary = self.summary(delta)
        eps, order = self.epsilon(delta, governing_bound, conversion)
        requested, governing_bound = governing_bound, self.resolve_bound(governing_bound)
        report = {
            "epsilon": eps,
            "delta": summary["delta"],
            "governing_bound": governing_bound,
            "conversion": conversion,
            "order": order,
            "note": BOUND_NOTES.get(governing_bound, f"bound {governing_bound!r} as defined by its mechanism"),
            "bounds": {b: BOUND_NOTES.get(b, "method-specific bound") for b in self.bounds},
            "conversions": {c: CONVERSION_NOTES[c] for c in self.conversions()},
            "stop": self.stop,
            "total": summary["total"],
            "mechanisms": summary["mechanisms"],
        }
        if requested != governing_bound:
            report["requested_bound"] = requested
            report["aliases"] = self.aliases
        if any(e["asymptotic"] for e in self._gdp.values()):
            report["asymptotic_warning"] = (
                "some GDP releases use the central-limit mu of Bu et al. 2020, an approximation, not a bound"
            )
        if extra:
            report.update(extra)
        return json.dumps(report, indent=2, default=_to_plain) + "\n"


def _to_plain(value):
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"cannot write {type(value).__name__} to privacy.json")
