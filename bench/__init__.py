"""Benchmarks, run by hand (bench/README.md); a package only so that its modules have names of their own."""
