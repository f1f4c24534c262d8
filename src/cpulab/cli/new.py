"""`cpulab new kernel NAME`: a commented kernel file and a plan that build and run as they
are, the start of measuring code of your own (README: "Your own kernel"); `cpulab schema`:
the plan files' schema, for editors."""
from __future__ import annotations

import json
import re
from pathlib import Path
from string import Template

import click

from cpulab.cli.common import emit_json, fail, out, write_output
from cpulab.compile.artifacts import NATIVE_DIR
from cpulab.plan import model

STARTER = NATIVE_DIR / "starter"
# Where `new kernel` writes the plan schema, named on its plan's first line for editors.
SCHEMA_FILE = "cpulab-plan.schema.json"


@click.group()
def new():
    """Start something of your own to measure."""


@new.command("kernel")
@click.argument("name")
@click.option("--dir", "folder", default=".", type=click.Path(file_okay=False), help="Where to write (default: here).")
def kernel(name, folder):
    """Write NAME.c (a kernel: cpulab.h's functions, commented) and NAME.toml (a plan
    measuring it under O2 and O3), and compile_flags.txt for editors (clangd) to find
    cpulab.h.  Nothing is overwritten."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        fail(f"new kernel {name!r}: a name is a C identifier (letters, digits, _)")
    where = Path(folder)
    files = {where / f"{name}.c": STARTER / "kernel.c", where / f"{name}.toml": STARTER / "plan.toml"}
    if taken := [str(f) for f in files if f.exists()]:
        fail(f"new kernel {name}: {taken[0]} exists; nothing written (give another name or --dir)")
    where.mkdir(parents=True, exist_ok=True)
    for path, template in files.items():
        write_output(str(path), Template(template.read_text()).substitute(name=name))
    flags = where / "compile_flags.txt"
    if not flags.exists():
        write_output(str(flags), f"-I{NATIVE_DIR}\n")
    write_output(str(where / SCHEMA_FILE), json.dumps(model.schema(), indent=1) + "\n")  # this version's keys
    out.print(f"wrote {' and '.join(str(f) for f in files)}; run it: cpulab run {where / f'{name}.toml'}",
              soft_wrap=True)


@click.command()
@click.option("--keys", is_flag=True, help="The plan keys as a Markdown table (docs/plan.md) instead.")
def schema(keys):
    """The JSON schema of plan files, made from the same declarations that read them.
    Save it and name it on a plan's first line, `#:schema ./cpulab-plan.schema.json`:
    editors' TOML plugins (taplo, Even Better TOML) then complete keys and underline
    misspelt ones."""
    if keys:
        click.echo(model.keys_table(), nl=False)
    else:
        emit_json(model.schema())


COMMANDS = [new, schema]
