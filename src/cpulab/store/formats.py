"""The tools whose result files `cpulab import` reads, by name: what its `--format`
offers without loading the parsers (foreign.py, harnesses.py) and their pydantic models:
0.17 s of every command's start."""
JSON_TOOLS = ("hyperfine", "gbench", "pyperf")  # foreign.py
TOOLS = (*JSON_TOOLS, "criterion", "gotest", "jmh", "bdn")  # harnesses.py: the others
