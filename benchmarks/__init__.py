"""Benchmarks, each run from the repository root as a module (`python -m benchmarks.<name> --help`), so that they
import `steps` and `tests.tiny` as the tests do, without touching `sys.path`."""
