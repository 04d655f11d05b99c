"""Shared test set-up."""
import torch

# Small tensors: one thread avoids OpenMP spin-waiting when the two cores are shared (measured 10x+ faster).
torch.set_num_threads(1)
