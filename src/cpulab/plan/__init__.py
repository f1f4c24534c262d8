"""The plan stage: a TOML file or command-line flags become a validated `plan.Plan` of
experiments (workloads x variants x parameter grids), with the variant catalogue
(`toolchain.py`), a plan's own `[program.NAME]` tables (`programs.py`) and the flags that
override a plan (`overrides.py`). Nothing is built or run here; a bad key is one line."""
