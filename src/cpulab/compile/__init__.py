"""The compile stage: a workload under a variant becomes an executable artifact, cached by a
hash of its inputs with its exact command lines (`artifacts.py`); a user's program is built
out of tree per variant (`programs.py`); a foreign-ISA artifact gets its emulator prefix
(`emulation.py`)."""
