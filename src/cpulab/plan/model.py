"""A plan file's model: every key a plan may hold, its type and range, read by pydantic.

The run settings at the top of a plan are spec.settings's, declared there once; the tables
(`[variants.NAME]`, `[[experiment]]`, `[program.NAME]`, `[kernel.NAME]`) are declared here.
`cpulab schema` prints this model's JSON schema for editors' TOML plugins (a plan's first
line `#:schema ./cpulab-plan.schema.json`, as taplo and Even Better TOML read it).  What a
type cannot say -- a workload or variant that exists, a baseline among the variants, a
file on disk, working sets that fit -- is checked after, by plan/checks.py.
"""
from __future__ import annotations

import json
import types
import typing
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, WithJsonSchema, model_validator

from cpulab import workloads
from cpulab.params import KINDS
from cpulab.spec.settings import Budget, Processes, Samples, Settings, declared


class PlanError(Exception):
    """A plan that cannot run: one line naming the file and the key."""


def _one_or_many(v):
    return [v] if isinstance(v, str) else v


Text = Annotated[str, Field(min_length=1)]
# A list of strings; one string alone is a list of one (`variants = "O2"`), as the schema says.
Strings = Annotated[list[str], BeforeValidator(_one_or_many), WithJsonSchema(
    {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]})]
Texts = Annotated[list[Text], BeforeValidator(_one_or_many), WithJsonSchema(
    {"anyOf": [{"type": "string", "minLength": 1}, {"type": "array", "items": {"type": "string", "minLength": 1}}]})]
# TOML keys plans were written with before their words changed, and the key each now is.
OLD_KEYS = {declared(k)["old"]: k for k in Settings.model_fields if declared(k)["old"]}


def renamed(d: dict) -> dict:
    """A plan's (or an experiment's) table with its old keys read as the new ones."""
    if not isinstance(d, dict):
        return d
    out = dict(d)
    for old, new in OLD_KEYS.items():
        if old in out:
            if new in out:
                raise ValueError(f"{old!r} is the old name of {new!r}; give one of them")
            out[new] = out.pop(old)
    return out


class Table(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False, defer_build=True)


class VariantTable(Table):
    """[variants.NAME]: how one variant builds (plan/toolchain.Variant)."""
    compiler: str = "gcc"
    cflags: Strings = ["-O2"]
    ldflags: Strings = []
    abi_flags: Strings = []
    env: dict[str, str | int] = {}
    package: str = ""  # the Debian package that provides its compiler, for the "missing" note
    description: str = ""


class ExperimentTable(Table):
    """[[experiment]]: workloads under variants, compared with a baseline."""
    name: str | None = None
    title: str = ""
    intro: str = ""
    tag: str = ""
    workloads: Strings = []
    variants: Strings = []
    baseline: Strings | None = None  # in order of preference: the first this machine builds
    params: dict[str, dict[str, Any]] = {}  # workload -> parameter -> values, parsed by its declaration
    processes: Processes | None = None
    samples: Samples | None = None
    budget: Budget | None = None
    share_machine: bool = False
    instructions: bool = False

    @model_validator(mode="before")
    @classmethod
    def _old_keys(cls, d):
        return renamed(d)


class CheckTable(Table):
    exit: int = 0
    stdout_regex: str | None = None


class InputTable(Table):
    random_file: Annotated[list[str | int], BeforeValidator(lambda v: v if isinstance(v, list) else [v]), WithJsonSchema(
        {"anyOf": [{"type": ["string", "integer"]}, {"type": "array", "items": {"type": ["string", "integer"]}}]})]


class ProgramTable(Table):
    """[program.NAME]: a program of yours, built by its own build system (plan/programs.py)."""
    source: Text
    build: Strings = []
    run: Text
    check: CheckTable = CheckTable()
    inputs: dict[str, InputTable] = {}


class KernelParam(Table):
    kind: Literal[KINDS] | None = None
    default: str | int
    min: str | int | None = None
    max: str | int | None = None
    choices: list[Text] = []
    compiled: bool = False  # a choice whose code a build holds only where its experiment runs it (Param.compiled)


class KernelTable(Table):
    """[kernel.NAME]: a kernel of yours (plan/kernels.py)."""
    source: Text
    library: Texts = []  # the code being tuned, compiled under each variant beside the kernel
    include: Texts = []  # directories its includes are found in
    libs: Texts = []  # link flags
    unit: Literal[tuple(workloads.UNITS)]
    description: str | None = None
    check_tolerance: Annotated[float, Field(ge=0, lt=1)] | None = None
    params: dict[str, KernelParam] = {}


def _editors_schema(schema: dict) -> None:
    """The schema as a plan file meets it: no key a plan may not give, the old keys marked
    deprecated, and the declarations' own words (flags, plan, old, words) left out."""
    props = schema["properties"]
    for name in Settings.model_fields:
        if not declared(name)["plan"]:
            del props[name]
        for k in ("flags", "plan", "old", "words"):
            props.get(name, {}).pop(k, None)
    for old, new in OLD_KEYS.items():
        props[old] = {**props[new], "deprecated": True, "description": f"The old name of {new!r}."}


class PlanFile(Settings):
    """A plan file: its run settings, then its tables."""
    model_config = ConfigDict(title="cpulab plan", frozen=False, json_schema_extra=_editors_schema, defer_build=True)
    name: str | None = None
    probe_tables: Strings = []
    variants: dict[str, VariantTable] = {}
    experiment: list[ExperimentTable] = []
    program: dict[str, ProgramTable] = {}
    kernel: dict[str, KernelTable] = {}

    @model_validator(mode="before")
    @classmethod
    def _keys(cls, d):
        d = renamed(d)
        if isinstance(d, dict):
            for key in d:
                if key in Settings.model_fields and not declared(key)["plan"]:
                    raise ValueError(f"{key}: not a plan key; give it on the command line "
                                     f"({declared(key)['flags'][0]})")
        return d

    def settings(self) -> Settings:
        return Settings.model_validate({k: getattr(self, k) for k in Settings.model_fields})


def read(d: dict, where: str) -> PlanFile:
    """A plan's TOML document as its model, or PlanError naming the first fault in one line."""
    try:
        return PlanFile.model_validate(d)
    except ValidationError as e:
        raise PlanError(f"{where}: {one_line(e, d)}") from None


def one_line(e: ValidationError, doc) -> str:
    """The first fault of a document, as 'key.path: what is wrong, got value'."""
    err = e.errors()[0]
    loc = list(err["loc"])
    kind, got = err["type"], err.get("input")
    if kind == "string_type" and loc and isinstance(loc[-1], int):  # a list of strings holds something else
        return f"{_path(loc[:-1], doc)}: expected a list of strings, got {got!r}"
    field = _field(PlanFile, loc)
    extra = getattr(field, "json_schema_extra", None)  # a run setting's declaration says what its values are
    words = extra.get("words", "") if isinstance(extra, dict) else ""
    at = _path(loc, doc)
    if kind == "extra_forbidden":
        known = _known_keys(PlanFile, loc[:-1])
        return f"{_path(loc[:-1], doc) or 'plan'}: unknown key {loc[-1]!r} (known: {', '.join(known)})"
    if kind in ("int_type", "int_from_float", "float_type", "finite_number", "int_parsing", "float_parsing"):
        what = words or ("a whole number" if kind.startswith("int") else "a number")
        return f"{at}: expected {what}, got {got!r}"
    if kind in ("greater_than_equal", "less_than_equal", "greater_than", "less_than"):
        lo, hi, _ = bounds(field)
        return f"{at}: must be {'' if lo is None else lo}..{'' if hi is None else hi}, got {got!r}"
    if kind == "bool_type":
        return f"{at}: expected true or false, got {got!r}"
    if kind == "string_type":
        return f"{at}: expected a string, got {got!r}"
    if kind == "literal_error":
        return f"{at}: expected one of {', '.join(_choices(field))}, got {got!r}"
    if kind in ("dict_type", "model_type"):
        return f"{at}: expected a table, got {got!r}"
    if kind == "list_type":
        return f"{at}: expected a list, got {got!r}"
    if kind == "missing":
        return f"{at}: required"
    return f"{at + ': ' if at else ''}{err['msg'].removeprefix('Value error, ')}"


def _path(loc: list, doc) -> str:
    """('experiment', 0, 'processes') -> "experiment 'x': processes"; ('variants', 'v',
    'cflags') -> 'variants.v.cflags'."""
    out = ""
    for i, k in enumerate(loc):
        if loc[:i] == ["experiment"] and isinstance(k, int):
            name = _at(doc, ["experiment", k, "name"])
            out += f" {name!r}:" if isinstance(name, str) else f"[{k}]:"
        elif isinstance(k, int):
            out += f"[{k}]"
        else:
            out += ("" if not out or out.endswith(":") else ".") + (" " if out.endswith(":") else "") + str(k)
    return out.rstrip(":")


def _at(doc, loc: list):
    for k in loc:
        try:
            doc = doc[k]
        except (KeyError, IndexError, TypeError):
            return None
    return doc


def _model_of(annotation):
    """The model a field's annotation holds (through Optional, list and dict), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for a in typing.get_args(annotation):
        m = _model_of(a)
        if m is not None:
            return m
    return None


def _field(model, loc: list):
    """The FieldInfo at a location (list positions and dict keys skipped), if it is one."""
    field = None
    for k in loc:
        if model is None:
            return None
        if isinstance(k, str) and k in model.model_fields:
            field = model.model_fields[k]
            model = _model_of(field.annotation)
        elif field is None or isinstance(k, str) and not _model_of(field.annotation):
            return field if isinstance(k, int) else None
    return field


def _known_keys(model, loc: list) -> list[str]:
    field = _field(model, loc) if loc else None
    m = _model_of(field.annotation) if field is not None else model
    return sorted(m.model_fields) if m is not None else []


def _constraints(field):
    for m in [*field.metadata, *(x for a in typing.get_args(field.annotation) for x in getattr(a, "__metadata__", ())),
              *getattr(field.annotation, "__metadata__", ())]:
        yield from getattr(m, "metadata", [m])


def bounds(field) -> tuple:
    """A number field's (lowest, highest, whether the highest is excluded); None: no bound."""
    lo = hi = None
    open_hi = False
    for c in _constraints(field) if field is not None else ():
        lo = getattr(c, "ge", getattr(c, "gt", lo))
        if hasattr(c, "le") or hasattr(c, "lt"):
            hi, open_hi = getattr(c, "le", getattr(c, "lt", None)), hasattr(c, "lt")
    return lo, hi, open_hi


def _choices(field) -> list[str]:
    ann = base_type(field) if field is not None else None
    return [str(x) for x in typing.get_args(ann)] if typing.get_origin(ann) is Literal else []


def base_type(field):
    """A field's type with `| None` and Annotated's limits peeled off (int, float, bool, str,
    a Literal, list[...], a model); typing.Any for a union of several types."""
    ann = field.annotation
    if typing.get_origin(ann) in (typing.Union, types.UnionType):  # X | None: X
        some = [a for a in typing.get_args(ann) if a is not type(None)]
        ann = some[0] if len(some) == 1 else typing.Any
    if typing.get_origin(ann) is Annotated:
        ann = typing.get_args(ann)[0]
    return ann


def schema() -> dict:
    """The plan file's JSON schema."""
    return PlanFile.model_json_schema()


def _kind(field) -> str:
    """A field's values in words: 'quick, full', 'whole number 1..10000', 'true or false'."""
    ann = base_type(field)
    if typing.get_origin(ann) is Literal:
        return ", ".join(map(str, typing.get_args(ann)))
    origin = typing.get_origin(ann)
    words = {bool: "true or false", str: "string", int: "whole number", float: "number"}.get(ann) or \
        ("tables" if origin is list and _model_of(ann) else "list of strings" if origin is list else
         "table" if origin is dict or _model_of(ann) else "string or number")
    lo, hi, open_hi = bounds(field)
    if lo is None and hi is None:
        return words
    return f"{words} {'' if lo is None else lo}..{'' if hi is None else hi - 1 if open_hi and words != 'number' else hi}"


def _default(field) -> str:
    v = field.default
    return "" if v is None or field.is_required() or isinstance(v, BaseModel) else json.dumps(v)


def keys_table() -> str:
    """The plan's keys as Markdown: the run settings (their flags beside them), then each
    table's keys; docs/plan.md holds it (`cpulab schema --keys`)."""
    lines = ["| key | values | default | flag | what it sets |", "|---|---|---|---|---|"]
    for name, f in Settings.model_fields.items():
        d = declared(name)
        key = f"`{name}`" if d["plan"] else f"({name}: command line only)"
        old = f" (`{d['old']}`: its old name)" if d["old"] else ""
        lines.append(f"| {key}{old} | {_kind(f)} | {_default(f)} | {', '.join(f'`{x}`' for x in d['flags'])} | "
                     f"{f.description} |")
    for title, m in (("plan", PlanFile), ("[variants.NAME]", VariantTable), ("[[experiment]]", ExperimentTable),
                     ("[program.NAME]", ProgramTable), ("[kernel.NAME]", KernelTable),
                     ("[kernel.NAME.params] entries", KernelParam)):
        own = [(k, f) for k, f in m.model_fields.items() if m is not PlanFile or k not in Settings.model_fields]
        lines += ["", f"**{title}**: " + "; ".join(
            f"`{k}` ({_kind(f)}{', required' if f.is_required() else ''}"
            f"{', default ' + _default(f) if _default(f) else ''})" for k, f in own)]
    return "\n".join(lines) + "\n"
