"""Benchmarks run by `make bench` (`python -m benchmarks [--quick] [names...]`): every module here with a
`main(quick: bool)` function. `rates.py` holds what they share: best-of-n timing, this process's peak rates
(matrix products, memory copy) and the FLOP / byte counts of kernels."""
