"""One-off dev sweeps (each chose a constant in src: experiments/README.md), run analyses and checks, and the
reproduction scripts (experiments/reproduce/). Run from the repository root as modules, e.g.
`python -m experiments.default_dev --help`."""
