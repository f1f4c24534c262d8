"""Why one build is faster: the generated code read back from the executable (`code.py`),
where the time goes by sampling the program counter (`profile.py`), and the two builds
lined up side by side (`compare.py`); the analysis stage words them as why (analysis/why.py)."""
