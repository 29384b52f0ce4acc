"""Experiments: what reads the archive to answer a question, and launches more runs to answer
the next one (docs/experiments.md).

- `compare.py`: is one run really better than another (`backflip compare`);
- `diff.py`: everything that differs between two runs (`backflip diff`);
- `sweep.py`: sweeps and ablations (`backflip sweep`, `backflip ablate`);
- `plan.py`: preregistered experiments (`backflip plan`);
- `bench.py`: the benchmark battery (`backflip bench`);
- `resume.py`: unfinished seeds continued from their checkpoints (`backflip resume`).

New runs go through `backflip.launch.launch_runs`; nothing here trains by itself.
"""
