"""The command line: one small module per group of commands, each only parsing, calling the
stages and printing. `main.py` holds the click group and what every command shares."""
