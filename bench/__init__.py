"""capr's performance benchmarks: speed and memory, each against its alternative in one run (bench/README.md).
Run from the repository root as modules, e.g. `python -m bench.bench_bm25 --passages 5000 --queries 50`."""
