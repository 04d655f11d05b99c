"""Empirical privacy audits: canaries inserted into a real training run, scored from what the run releases, and
an epsilon lower bound from one run (`python -m dpgen.audit`; the bound itself is dpgen.privacy.audit)."""
