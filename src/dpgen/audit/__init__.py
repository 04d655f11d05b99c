"""Empirical privacy audits (`python -m dpgen.audit`): canaries inserted into a real training run and scored from
what the run releases (canaries.py), and the epsilon lower bound of one run (bound.py)."""
