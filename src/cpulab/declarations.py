"""Registries of declarations: each module of a package lists what it declares in a
module-level list (workloads/: WORKLOADS, probes/: PROBES); adding a module adds them."""
from __future__ import annotations

import importlib
import pkgutil


def collect(package: str, path, attr: str, kind: str) -> dict:
    """name -> declaration over every module of `package` (its `__path__` is `path`),
    sorted by name; a name declared twice is an error."""
    found: dict = {}
    for mod in pkgutil.iter_modules(path):
        for d in getattr(importlib.import_module(f"{package}.{mod.name}"), attr, []):
            if d.name in found:
                raise ValueError(f"{kind} {d.name!r} declared twice")
            found[d.name] = d
    return dict(sorted(found.items()))


def lookup(table: dict, name: str, kind: str):
    """table[name], or a KeyError that lists the known names."""
    try:
        return table[name]
    except KeyError:
        raise KeyError(f"unknown {kind} {name!r} (known: {', '.join(table)})") from None
