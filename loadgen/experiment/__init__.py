"""``loadgen experiment``: competing backends and configurations, the same load on each, ranked
at the SLA. ``run.py`` is the entry point (plan, start, resume, run); the other modules are its
parts: the file (spec.py), the cells and their order (cells.py), a server's lifecycle (serve.py,
reaper.py), one cell (cell.py) and experiment.json (state.py). It sits above the runner: each
cell is an ordinary run."""
