"""dpgen: differentially private data generators (G-PATE and baselines) as one Lightning + Hydra application."""
