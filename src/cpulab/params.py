"""Kernel parameters: what each one accepts, and the one canonical text of a value.

Every value a user gives (a --param flag, a plan's [experiment.params.W] table) is
parsed here once, against the parameter's declaration, and from then on only its
canonical text is used: passed to the harness, stored with the result, shown in
reports.  Integers and sizes become plain decimal digits ("16K" -> "16384").

Nothing is guessed.  Integers are decimal with no leading zeros ("010" is refused,
not read as 8 or 10), no exponents ("1e6"), no fractions ("1.5K"), no hex ("0x10").
Sizes are such an integer, optionally followed by K, M, G or T (powers of 1024;
KiB, MiB, GiB, TiB mean the same; case does not matter).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

INT64_MAX = 2**63 - 1  # what the harness's k_param_int can hold
SIZE_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}
KINDS = ("int", "size", "choice", "text")

_INT = re.compile(r"-?(?:0|[1-9][0-9]*)")
_SIZE = re.compile(r"(0|[1-9][0-9]*)(?:([KMGT])(?:iB)?)?", re.IGNORECASE)


class ParamError(ValueError):
    """A value a parameter does not accept; the message says why, not which key."""


def parse_int(text: str) -> int:
    """'4096' -> 4096; decimal digits only, an optional minus sign, no leading zeros."""
    t = text.strip()
    if not _INT.fullmatch(t):
        raise ParamError(f"{text!r} is not a decimal integer (digits only, no leading zeros, "
                         f"no exponent or fraction)")
    return int(t)


def human_bytes(n: float) -> str:
    """1024 -> '1 KiB', 1572864 -> '1.5 MiB'."""
    for unit, div in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= div:
            v = n / div
            return f"{v:.0f} {unit}" if abs(v - round(v)) < 0.05 else f"{v:.1f} {unit}"
    return f"{n:.0f} B"


def parse_size(text: str) -> int:
    """'4096', '64K', '64KiB', '1M', '1G', '1T' (powers of 1024) -> bytes."""
    m = _SIZE.fullmatch(text.strip())
    if not m:
        raise ParamError(f"{text!r} is not a size: want a whole number of bytes, optionally with "
                         f"K, M, G or T (powers of 1024), e.g. 4096, 64K, 1M; no leading zeros or fractions")
    return int(m[1]) * SIZE_UNITS[(m[2] or "").upper()]


@dataclass(frozen=True)
class Param:
    """One kernel parameter.

    default: its value when not given, already canonical.
    kind: "int" (decimal integer), "size" (bytes, with K/M/G/T suffixes), "choice"
        (one of `choices`) or "text" (any string, e.g. a path; never split at commas).
    min, max: the accepted range of an int or size, inclusive.
    compiled: a choice whose code a build holds only where its points run it: the build
        of an experiment whose points run some of the choices, not all, is compiled with
        -DCPULAB_<NAME>_<CHOICE> for each of them (Workload.held), and one given none
        holds every choice.
    """

    default: str
    kind: str = "int"
    min: int = 0
    max: int = INT64_MAX
    choices: tuple[str, ...] = ()
    compiled: bool = False

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"parameter kind {self.kind!r} is not one of {', '.join(KINDS)}")
        if (self.kind == "choice") != bool(self.choices):
            raise ValueError("a choice parameter, and only one, lists its choices")
        if self.compiled and self.kind != "choice":
            raise ValueError("only a choice parameter is compiled")
        if self.parse(self.default) != self.default:
            raise ValueError(f"default {self.default!r} is not canonical")

    def describe(self) -> str:
        """What it accepts, for `cpulab list`: 'portable|simd', 'size 1..1073741824'."""
        if self.kind == "choice":
            return "|".join(self.choices)
        if self.kind == "text":
            return "text"
        return f"{self.kind} {self.min}..{self.max}" if self.max != INT64_MAX else f"{self.kind} >= {self.min}"

    def parse(self, value) -> str:
        """One value (a string, or a TOML integer) -> its canonical text."""
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise ParamError(f"{value!r} is a {type(value).__name__}: give a string"
                             + (" or a whole number" if self.kind in ("int", "size") else ""))
        text = str(value)
        if self.kind == "text":
            return text
        if self.kind == "choice":
            if text.strip() not in self.choices:
                raise ParamError(f"{text!r} is not one of {', '.join(self.choices)}")
            return text.strip()
        return str(self._number(text))

    def _number(self, text: str) -> int:
        n = parse_size(text) if self.kind == "size" else parse_int(text)
        if not self.min <= n <= self.max:
            raise ParamError(f"{text!r} is out of range {self.min}..{self.max}")
        return n

    def values(self, spec) -> list[str]:
        """A sweep -> canonical values, none twice.  spec is a list of single values, a
        number, or a string: 'a', 'a,b,c' or 'lo..hi' (lo, 2 lo, 4 lo, ... up to hi;
        ints and sizes only).  A text parameter's string is one value, commas and all."""
        if isinstance(spec, list):
            out = [self.parse(v) for v in spec]
        elif isinstance(spec, str) and self.kind != "text":
            out = []
            for item in spec.split(","):
                if not item.strip():
                    raise ParamError(f"{spec!r} has an empty value")
                out += self._doubling(item) if ".." in item else [self.parse(item)]
        else:
            out = [self.parse(spec)]
        if not out:
            raise ParamError("no values")
        for i, v in enumerate(out):
            if v in out[:i]:
                raise ParamError(f"{v} is listed twice" + (f" (as {spec!r})" if isinstance(spec, str) else ""))
        return out

    def _doubling(self, item: str) -> list[str]:
        if self.kind not in ("int", "size"):
            raise ParamError(f"range {item.strip()!r}: only numbers and sizes have ranges")
        lo_s, hi_s = item.split("..", 1)
        lo, hi = self._number(lo_s), self._number(hi_s)
        if lo < 1 or hi < lo:
            raise ParamError(f"range {item.strip()!r}: want 1 <= low <= high")
        out = []
        while lo <= hi:
            out.append(str(lo))
            lo *= 2
        return out


# A machine's caches as its fingerprint stores them (machine.os_caches): {level, type, size_bytes, name}.

def data_caches(os_caches) -> list[dict]:
    """The caches loads go through (Data and Unified), smallest first."""
    return sorted((c for c in os_caches if c.get("type") in ("Data", "Unified")),
                  key=lambda c: (c["level"], c["size_bytes"]))


def cache_name(c: dict) -> str:
    suffix = {"Data": "d", "Instruction": "i"}.get(c.get("type", ""), "")
    return f"L{c['level']}{suffix} {human_bytes(c['size_bytes'])}"


def cache_label(c: dict) -> str:
    return c.get("name") or cache_name(c)
