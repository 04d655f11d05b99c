"""PrivacyBudget: never release a generator over (epsilon, delta)."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import torch

from dpgen.callbacks.release import WritesAtTrainEnd
from dpgen.files import atomic_write_text
from dpgen.privacy.ledger import ALL_CONVERSIONS, NEIGHBOURING, PrivacyLedger
from dpgen.privacy.plan import largest_fitting
from dpgen.privacy.pld import epsilon_pld, merged
from dpgen.privacy.rdp import check_delta, check_delta_for_size

LEDGER_KEY = "privacy_ledger"
STOP_KEY = "privacy_budget_stop"  # a budget stop and the budget it was made under, for a resumed run
SPLIT_KEY = "private_val_split"  # the held-out private validation split's descriptor (None: none), for a resumed run
PLAN_HINT = "`python -m dpgen.cli.plan <the same overrides>` prints how many steps a budget buys"
PRIVATE_LOGS = ("log_private_losses=true: metrics.csv, train.log and the W&B run hold losses computed on private "
                "records without noise (keys private/...); they are not covered by this guarantee and must stay "
                "with the data")


def rounded_up(value: float, digits: int = 3) -> float:
    """`value` rounded up to `digits` significant digits: a budget printed for the user that is never below it."""
    if not 0 < value < math.inf:
        return value
    shown = float(f"{value:.{digits}g}")
    if shown < value:  # rounded down: one unit more in the last digit
        shown = float(f"{shown + 10.0 ** (math.floor(math.log10(shown)) - digits + 1):.{digits}g}")
    return shown


PLAN_LOG_EVERY = 100  # the fixed-cost PLD path logs the spent epsilon every this many steps (a PLD each: ~0.2 s)


class BudgetError(ValueError):
    """The privacy configuration cannot be honoured (bad epsilon / delta / conversion, or a budget too small for
    even one step): raised before any training step runs, or when training ends without a released step."""


def held_out_split(trainer) -> dict | None:
    """The descriptor of the private validation split the trainer's datamodule holds out (None: none)."""
    return getattr(getattr(trainer, "datamodule", None), "private_val_split_descriptor", None)


def check_same_split(checkpoint: dict, split: dict | None) -> None:
    """BudgetError unless a resumed run holds out the very split (or none) its checkpoint's run held out: the
    generator read every record outside that split, so a resume that moves records across it would claim a
    disjointness that does not hold. A checkpoint that names no split (an older dpgen) resumes only without one."""
    saved = checkpoint.get(SPLIT_KEY)
    if saved != split:
        said = "no private validation split" if saved is None else f"the private validation split {saved}"
        raise BudgetError(f"this checkpoint's run held out {said}, and this run "
                          f"{'none' if split is None else split}: its generator read the records outside the "
                          "first, so resume it with the same data and eval settings (eval.selection, "
                          "eval.private_val.fraction, seed, data.*)")


class PrivacyBudget(WritesAtTrainEnd):
    """Stops training at the privacy budget and keeps the last generator within it.

    Contract with the LightningModule (dpgen.methods.base.PrivateGenerator):
      - `ledger`: a dpgen.privacy.PrivacyLedger that the module's mechanisms record into during
        `training_step`, or None for a non-private method (then this callback does nothing);
      - `private_modules` (optional): names of submodules whose state is a function of their own private
        partitions and public inputs only (teacher ensembles, critics). Everything else a step changes (the
        released generator, students, DP discriminators and every optimizer's state) can carry the step's
        releases forward, so it is snapshotted and rolled back with the ledger; the private modules are not
        (they release nothing by themselves, and they can be most of the memory);
      - `step_cost()`: a StepCost whose `worst` maps bound -> RDP over the ledger's orders, an upper bound on
        what the next training step can record, or None when unknown; a bound missing from the mapping (e.g. a
        data-dependent one) is treated as known only after the step;
      - `on_train_batch_start` returns -1 when `self.trainer.should_stop` is set, so that a step refused
        here does not run (Lightning runs a batch whose callbacks set should_stop otherwise).

    Behaviour, with eps(.) = ledger.epsilon(delta, bound, conversion):
      - fit start: BudgetError if no step can fit the budget: when the worst case is checked before each step (below),
        if one worst-case step exceeds it; otherwise if even the cheapest step (`step_cost().best`, a lower bound on
        any step) does. Trainer min_steps / min_epochs are refused (Lightning would keep training after a stop
        request).
      - before each batch: if eps(ledger + step_cost().worst) > epsilon, request the stop; the step is
        skipped through the module hook above.
      - conversion="pld" with a fixed step cost (StepCost with PLD events and no best case: DP-GAN, DP-CGAN,
        GS-WGAN): the steps that fit are found once at train start (`_plan_fixed_pld`), the run stops before the
        first step beyond them, and after each step the ledger's events are compared with the plan's (no PLD
        computed); a step that released anything else drops the plan for the check below.
      - after each batch: if eps(ledger) > epsilon (possible when the cost is only known afterwards, e.g.
        data-dependent PATE, whose `step_cost()` announces no data-dependent worst case, or conversion="pld"),
        restore the released state (above), the optimizers and the ledger to the last in-budget snapshot and stop;
        otherwise refresh that snapshot (in-place tensor copies). Callbacks that write what the generator makes
        (sample grids, evaluations) must come after this one in the trainer's list, so they never see a rolled-back
        step.
      - the snapshot (released state, optimizers, ledger) is the callback state saved in every checkpoint, and the
        ledger is also written under checkpoint["privacy_ledger"]; a resumed run restarts from that snapshot,
        so it ends with the same epsilon as an uninterrupted run. ModelCheckpoint runs after this callback
        (Lightning orders checkpoint callbacks last), so it never saves an over-budget step. A checkpoint written
        after a budget stop also holds the stop and its budget: resumed under the same budget the run stops before
        its first step; under another it trains on, the earlier rolled-back steps still counted as discarded.
      - the ledger notes why training stopped and how many steps were discarded; privacy.json is written
        when training ends, before the evaluation callbacks, into trainer.default_root_dir (the run folder).
      - training end with no released step (every step refused or rolled back): BudgetError, on every process and
        before anything is written, so the run fails with no privacy.json and no generator.pt (`Release` runs
        after this callback).
    """

    def __init__(self, epsilon: float, delta: float, bound: str = "data_dependent",
                 conversion: str = "classical", filename: str = "privacy.json", allow_large_delta: bool = False):
        if not float(epsilon) > 0:
            raise BudgetError(f"privacy.epsilon must be > 0, got {epsilon}")
        self.epsilon = float(epsilon)
        try:
            self.delta = check_delta(delta)
        except ValueError as err:
            raise BudgetError(f"privacy.delta: {err}") from err
        if conversion not in ALL_CONVERSIONS:
            raise BudgetError(f"privacy.conversion must be one of {ALL_CONVERSIONS}, got {conversion!r}")
        self.bound = bound
        self.conversion = conversion
        self.filename = filename
        self.allow_large_delta = bool(allow_large_delta)
        self._model_snapshot: dict[str, torch.Tensor] | None = None
        self._optimizer_snapshot: list[dict] | None = None
        self._ledger_snapshot: dict | None = None
        self._restored = False
        self._resumed_stop: dict | None = None  # the checkpoint's budget stop, if it had one
        self._carried_discarded = 0  # steps rolled back by earlier processes under another budget
        self._stopped = False  # this process's training stopped at the budget (a checkpoint then keeps the stop)
        self._pld_plan: dict | None = None  # the fixed-cost PLD path: steps left and the ledger's events expected

    # budget arithmetic

    def governing(self, ledger: PrivacyLedger) -> str:
        """The bound that governs: `bound` as the method's ledger resolves it (e.g. data_dependent is
        data_independent for DP-SGD)."""
        return ledger.resolve_bound(self.bound)

    def spent(self, ledger: PrivacyLedger, extra=None) -> float:
        return ledger.epsilon(self.delta, self.bound, self.conversion, extra=extra)[0]

    def _over(self, ledger: PrivacyLedger, extra=None) -> bool:
        return self.spent(ledger, extra) > self.epsilon

    def _known_cost(self, pl_module):
        """The next step's worst-case cost under the governing bound, or None if only known afterwards
        (always under the PLD conversion, which composes recorded releases only)."""
        if self.conversion == "pld":
            return None
        cost = pl_module.step_cost()
        cost = None if cost is None else cost.worst
        return cost if cost is not None and (self.governing(pl_module.ledger) in cost or "gdp_mu" in cost) else None

    def _plan_fixed_pld(self, trainer, pl_module) -> dict | None:
        """Under conversion="pld", for a method whose every step is the same announced releases (a StepCost with
        PLD events and no best case): how many more steps fit after what the ledger holds, found once by bisection
        on the PLD of the ledger's events plus n steps' (the same composition the ledger will hold after n steps),
        instead of a PLD after every step. None otherwise."""
        cost = pl_module.step_cost() if self.conversion == "pld" else None
        if cost is None or cost.best is not None or not cost.pld_events or cost.upfront is not None:
            return None
        pl_module.ledger.check_pld_bound(self.bound)
        held = pl_module.ledger.pld_events()

        def after(n: int) -> list:
            return held + [(event, n * count) for event, count in cost.pld_events]

        def fits(n: int) -> bool:
            return epsilon_pld(after(n), self.delta) <= self.epsilon

        remaining = trainer.max_steps - trainer.global_step if trainer.max_steps > 0 else None
        left = remaining if remaining is not None and fits(remaining) else largest_fitting(fits)  # no PLD of 10^12
        return {"left": left, "taken": 0, "after": after}

    def _on_plan(self, ledger: PrivacyLedger) -> bool:
        """Whether the ledger holds exactly the releases the fixed-cost plan expects (cheap: no PLD computed)."""
        plan = self._pld_plan
        return merged(ledger.pld_events()) == merged(plan["after"](plan["taken"]))

    def _check_delta(self, trainer) -> None:
        """BudgetError unless delta < 1/N, N the training records (the held-out split included: all are
        protected), unless `allow_large_delta`. N is read by the data holder's own process and only decides a
        refusal: neither it nor anything computed from it is written anywhere."""
        data = getattr(getattr(trainer, "datamodule", None), "all_train_data", None)
        if data is not None and not self.allow_large_delta:
            try:
                check_delta_for_size(self.delta, len(data))
            except ValueError as err:
                raise BudgetError(str(err)) from err

    def _check_budget(self, pl_module):
        """BudgetError when the conversion does not fit the method, or when no step can fit the budget after what the
        method spends upfront: the worst case of one step when it is checked before each step (a step runs only if
        it fits), else its lower bound (a step whose cost is known afterwards is rolled back when over, and none
        costs less). Nothing to check while the method does not know its step cost yet."""
        if self.conversion == "pld" and not getattr(pl_module, "pld_ready", False):
            raise BudgetError("privacy.conversion=pld needs every release to be a Gaussian or a Poisson-subsampled "
                              "Gaussian: methods dpgan, dpcgan, pate_triplegan (with method.module.accounting=rdp "
                              "and vote_charge=every), "
                              "gswgan (with method.module.critic_updates=discarded or scheduled)")
        cost = pl_module.step_cost()
        if cost is None:
            return
        case = "worst" if self._known_cost(pl_module) is not None else "best"
        try:
            one = cost.epsilon(self.delta, self.bound, self.conversion, case)
        except ValueError as err:  # a bound or conversion that this method's releases do not allow
            raise BudgetError(str(err)) from err
        if one > self.epsilon:
            priced = "one training step, priced at its worst case," if case == "worst" else "the cheapest training step"
            raise BudgetError(
                f"privacy budget too small for one step: {priced} costs epsilon={one:.4g} under bound "
                f"{self.governing(pl_module.ledger)!r} ({self.conversion} conversion, delta={self.delta:g}) > "
                f"privacy.epsilon={self.epsilon:g}; give privacy.epsilon={rounded_up(one):g} or more, or more noise "
                f"({PLAN_HINT})")

    # snapshot

    @staticmethod
    def _released_state(pl_module) -> dict[str, torch.Tensor]:
        """The module's tensors (sharing storage) except those of its `private_modules`."""
        private = tuple(f"{name}." for name in getattr(pl_module, "private_modules", ()))
        return {k: v for k, v in pl_module.state_dict().items() if not k.startswith(private)}

    def _take_snapshot(self, trainer, pl_module):
        state = self._released_state(pl_module)
        if self._model_snapshot is None or self._model_snapshot.keys() != state.keys():
            self._model_snapshot = {k: v.detach().clone() for k, v in state.items()}
        else:
            for k, v in state.items():
                self._model_snapshot[k].copy_(v)
        self._optimizer_snapshot = [copy.deepcopy(opt.state_dict()) for opt in trainer.optimizers]
        self._ledger_snapshot = pl_module.ledger.state_dict()

    def _restore_snapshot(self, trainer, pl_module):
        state = self._released_state(pl_module)
        if state.keys() != self._model_snapshot.keys():
            raise RuntimeError("PrivacyBudget: the snapshot does not match the module's state (a checkpoint of "
                               "another method or configuration?)")
        with torch.no_grad():
            for k, v in state.items():
                v.copy_(self._model_snapshot[k])
        for opt, saved in zip(trainer.optimizers, self._optimizer_snapshot, strict=True):
            opt.load_state_dict(copy.deepcopy(saved))  # load_state_dict may keep the tensors it is given
        pl_module.ledger.load_state_dict(self._ledger_snapshot)

    def _stop(self, trainer, pl_module, reason: str, discarded_steps: int):
        pl_module.ledger.note_stop(reason, discarded_steps + self._carried_discarded)
        trainer.should_stop = self._stopped = True

    def _budget(self) -> dict:
        return {"epsilon": self.epsilon, "delta": self.delta, "bound": self.bound, "conversion": self.conversion}

    def _stopped_again(self, trainer, pl_module) -> bool:
        """A checkpoint written after the budget stopped its run: under the same budget the resumed run releases no
        further step (a fresh draw of the step that did not fit is not a second chance); under another budget it
        trains on, and the steps rolled back before stay counted (trainer.global_step includes them)."""
        resumed, self._resumed_stop = self._resumed_stop, None
        self._carried_discarded = 0
        if resumed is None:
            return False
        if resumed["budget"] == self._budget():
            pl_module.ledger.note_stop(resumed["stop"]["reason"], resumed["stop"]["discarded_steps"])
            trainer.should_stop = self._stopped = True
            return True
        self._carried_discarded = int(resumed["stop"]["discarded_steps"])
        return False

    # hooks

    def setup(self, trainer, pl_module, stage):
        if stage == "fit" and getattr(pl_module, "ledger", None) is not None:
            if trainer.fit_loop.min_steps or trainer.fit_loop.min_epochs:
                raise BudgetError("PrivacyBudget cannot honour trainer.min_steps / min_epochs: unset them")

    def on_fit_start(self, trainer, pl_module):
        super().on_fit_start(trainer, pl_module)
        if getattr(pl_module, "ledger", None) is not None:
            self._check_delta(trainer)
            self._check_budget(pl_module)  # before the method's own on_fit_start (GS-WGAN pretrains its critics there)

    def on_train_start(self, trainer, pl_module):
        ledger = getattr(pl_module, "ledger", None)
        if ledger is None:
            return
        self._check_budget(pl_module)  # again: G-PATE knows its step cost from its own on_fit_start
        if self._restored:
            self._restore_snapshot(trainer, pl_module)  # resume from the checkpoint's last in-budget snapshot
            self._restored = False
        else:
            self._take_snapshot(trainer, pl_module)
        ledger.stop, self._stopped = None, False
        self._pld_plan = None if self._stopped_again(trainer, pl_module) else self._plan_fixed_pld(trainer, pl_module)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        ledger = getattr(pl_module, "ledger", None)
        if ledger is None:
            return
        plan = self._pld_plan
        if plan is not None:
            if plan["taken"] >= plan["left"]:
                self._stop(trainer, pl_module, f"budget: the next step would exceed epsilon={self.epsilon:g} "
                           f"(spent {self.spent(ledger):.6g} under {self.governing(ledger)}); stopped before it", 0)
            return
        cost = self._known_cost(pl_module)
        if cost is not None and self._over(ledger, cost):
            self._stop(trainer, pl_module, f"budget: the next step could exceed epsilon={self.epsilon:g} "
                       f"(spent {self.spent(ledger):.6g} under {self.governing(ledger)}); stopped before it", 0)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        ledger = getattr(pl_module, "ledger", None)
        if ledger is None:
            return
        if self._pld_plan is not None:
            self._pld_plan["taken"] += 1
            if self._on_plan(ledger):  # within the budget by the plan: no PLD to compute
                self._take_snapshot(trainer, pl_module)
                if self._pld_plan["taken"] % PLAN_LOG_EVERY == 1:  # the spent epsilon now and then, for the logs
                    pl_module.log("epsilon", self.spent(ledger), prog_bar=True)
                return
            self._pld_plan = None  # the step released what its cost did not announce: check it as any other
        spent = self.spent(ledger)
        if spent > self.epsilon:
            self._restore_snapshot(trainer, pl_module)
            self._stop(trainer, pl_module, f"budget: the last step reached epsilon={spent:.6g} > {self.epsilon:g} "
                       f"under {self.governing(ledger)}; generator, optimizers and ledger rolled back to the last "
                       "in-budget step", 1)
        else:
            self._take_snapshot(trainer, pl_module)
            pl_module.log("epsilon", spent, prog_bar=True)

    def check_final(self, trainer, pl_module):
        """Notes why training stopped; BudgetError when no step is left to release (refused or rolled back)."""
        ledger = getattr(pl_module, "ledger", None)
        if ledger is None:
            return
        if ledger.stop is None:
            ledger.note_stop("trainer limits reached within the budget", self._carried_discarded)
        if trainer.global_step <= ledger.stop["discarded_steps"]:
            raise BudgetError(f"no training step was released ({ledger.stop['reason']}), so no generator was written: "
                              f"a run needs a budget and step limits that allow one step ({PLAN_HINT})")

    def write_final(self, trainer, pl_module):  # privacy.json, before the evaluation callbacks
        ledger = getattr(pl_module, "ledger", None)
        if ledger is None:
            return
        folder = Path(trainer.default_root_dir)  # the run folder, beside generator.pt
        budget = {"budget": {"epsilon": self.epsilon, "delta": self.delta, "bound": self.bound,
                             "conversion": self.conversion}}
        relation = getattr(pl_module, "neighbouring", None)
        if relation is not None:
            budget["neighbouring"] = {"relation": relation, "note": NEIGHBOURING[relation]}
        if getattr(pl_module, "log_private", False):
            budget["private_logs"] = PRIVATE_LOGS
        caveats = list(getattr(pl_module, "privacy_caveats", []))
        if self.allow_large_delta:
            caveats.append("privacy.allow_large_delta=true: delta was not checked against 1/N for the N training "
                           "records; a delta near or above 1/N protects no one (docs/PRIVACY.md)")
        if caveats:  # where a method's option leaves its accounting's premise unproven
            budget["caveats"] = caveats
        dm = getattr(trainer, "datamodule", None)
        split = held_out_split(trainer)
        if split is not None:  # eval.selection=private_val: which records the generator never read
            budget["records"] = {"generator": "the training records outside the private validation split",
                                 "private_val": split}
        atomic_write_text(folder / self.filename,
                          ledger.report_json(self.delta, self.bound, extra=budget, conversion=self.conversion))

    # checkpoints

    def state_dict(self):
        return {"model": self._model_snapshot, "optimizers": self._optimizer_snapshot, "ledger": self._ledger_snapshot}

    def load_state_dict(self, state_dict):
        if "model" not in state_dict:
            raise BudgetError("this checkpoint was written by an older dpgen whose budget snapshot held the generator "
                              "only; resume it with that version, or start a new run")
        self._model_snapshot = state_dict["model"]
        self._optimizer_snapshot = state_dict["optimizers"]
        self._ledger_snapshot = state_dict["ledger"]
        self._restored = self._ledger_snapshot is not None

    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        ledger = getattr(pl_module, "ledger", None)
        checkpoint[SPLIT_KEY] = held_out_split(trainer)
        if ledger is not None:
            checkpoint[LEDGER_KEY] = ledger.state_dict()
            if self._stopped:
                checkpoint[STOP_KEY] = {"budget": self._budget(), "stop": copy.deepcopy(ledger.stop)}

    def on_load_checkpoint(self, trainer, pl_module, checkpoint):
        check_same_split(checkpoint, held_out_split(trainer))
        ledger = getattr(pl_module, "ledger", None)
        if ledger is not None and LEDGER_KEY in checkpoint:
            ledger.load_state_dict(checkpoint[LEDGER_KEY])
        self._resumed_stop = checkpoint.get(STOP_KEY)
