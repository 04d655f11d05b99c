"""Lightning callbacks: they call privacy/ and evaluation/, and hold no accounting or evaluation logic."""

from .privacy_budget import PrivacyBudget

__all__ = ["PrivacyBudget"]
