"""The store: every run, variant, artifact, result, raw sample and analysis in one SQLite
file (`db.py`, numbered migrations), and a run as one portable file (`exchange.py`). It sits
below the stages: measure writes into it, analysis and the CLI read from it, and it imports
nothing but the shared values."""
