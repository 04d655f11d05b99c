"""Benchmarks run by `make bench` (`python -m benchmarks [--quick] [names...]`): every module here with a
`main(quick: bool)` function."""
