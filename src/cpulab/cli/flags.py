"""Command-line flags made from declarations, and options handed to a command in groups.

`setting_options` makes the flags of run settings from spec/settings.py (type, range,
choices, help and spellings all come from the field), so a setting is declared once for
plans and every command.  `grouped` hands several options to a command as one value, so
that a command function takes a few values, not two dozen parameters.
"""
from __future__ import annotations

import functools
import typing
from types import SimpleNamespace
from typing import Literal

import click

from cpulab.cli.common import FiniteRange, db_option, json_option
from cpulab.plan.model import base_type, bounds
from cpulab.spec.settings import Settings, declared


def _click_type(name: str):
    field = Settings.model_fields[name]
    kind = base_type(field)
    if typing.get_origin(kind) is Literal:
        return click.Choice([str(x) for x in typing.get_args(kind)])
    if typing.get_origin(kind) is list:
        return "list"
    lo, hi, open_hi = bounds(field)
    if kind is int:
        return click.IntRange(lo, None if hi is None else hi - 1 if open_hi else hi)
    if kind is float:
        return FiniteRange(lo, hi)
    return None  # bool: a flag


def _setting_option(name: str):
    flags = declared(name)["flags"]
    kind = _click_type(name)
    help = Settings.model_fields[name].description
    if kind is None:
        return click.option(*flags, name, is_flag=True, default=None, help=help)
    if kind == "list":  # a comma list, or the flag given again
        return click.option(*flags, name, multiple=True, default=None, help=help, metavar="A,B,...",
                            callback=lambda ctx, param, v: [x.strip() for s in v for x in s.split(",") if x.strip()]
                            or None)
    return click.option(*flags, name, type=kind, default=None, help=help,
                        metavar="RUN" if name == "against" else None)


def setting_options(*names: str):
    """The flags of these run settings (default: every setting that has a flag); the
    command receives them as one dict `settings`, by name, None where not given."""
    names = names or tuple(n for n in Settings.model_fields if declared(n)["flags"])
    return grouped("settings", *names, make=dict, options=[_setting_option(n) for n in names])


def output_options(f):
    """--db and --json, passed as one value `output` (output.db, output.as_json)."""
    return grouped("output", "db", "as_json")(db_option(json_option(f)))


def grouped(into: str, *names: str, make=SimpleNamespace, options=()):
    """Options (those given here, or declared below this decorator) passed to the command
    as one value `into`, made by `make(**{name: value})`."""
    def decorate(f):
        @functools.wraps(f)
        def command(*args, **kw):
            kw[into] = make(**{n: kw.pop(n) for n in names})
            return f(*args, **kw)
        for option in reversed(options):
            command = option(command)
        return command
    return decorate
