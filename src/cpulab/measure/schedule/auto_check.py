"""The automatic check of a kernel that has no k_verify of its own (a user's: cpulab.h).

Its first process in a run prints the checksum of one k_run call on a fresh context
("check", harness.c), before any sample.  The variants of one point run in one group
(the round's turns), their baseline with them: a variant whose checksum differs from the
baseline's (as doubles: by more than the kernel's relative tolerance) is verify-failed,
and nothing it timed is kept.  The outcome is said in each result's notes ("check").
"""
from __future__ import annotations

import dataclasses
import math
import struct

from cpulab import workloads
from cpulab.measure.execute.jobs import Outcome
from cpulab.model import Status


def _as_double(hex_bits: str) -> float:
    return struct.unpack("<d", int(hex_bits, 16).to_bytes(8, "little"))[0]


def _agree(a: str, b: str, tolerance: float | None) -> bool:
    if tolerance is None:
        return a == b
    x, y = _as_double(a), _as_double(b)
    return x == y or math.isclose(x, y, rel_tol=tolerance)


def checked(baseline: str, variants: list[str], workload: str, outs: list[Outcome]) -> list[Outcome]:
    """One group's outcomes (its members' variants in order) with the automatic check
    applied: unchanged where no member printed a checksum (a kernel with its own
    k_verify, or a later round)."""
    checks = {v: o.data.get("check") for v, o in zip(variants, outs) if o.status == Status.OK}
    if not any(checks.values()):
        return outs
    w = workloads.registry().get(workload)
    tolerance = w.check_tolerance if w else None
    within = "" if tolerance is None else f" within {tolerance:g}"
    base = checks.get(baseline)
    out = []
    for v, o in zip(variants, outs):
        mine = checks.get(v)
        if mine is None:
            out.append(o)
        elif v == baseline:
            out.append(_noted(o, f"automatic: one k_run call's checksum {mine}, which every variant's must equal{within}"))
        elif base is None:
            out.append(_noted(o, f"automatic, unchecked: the baseline {baseline} gave no checksum in this round"))
        elif _agree(mine, base, tolerance):
            out.append(_noted(o, f"automatic: one k_run call's checksum equals the baseline's{within}"))
        else:
            out.append(Outcome(Status.VERIFY_FAILED, f"automatic check: one k_run call returned {mine}, "
                                                     f"the baseline {baseline}'s {base}{within}"))
    return out


def _noted(o: Outcome, how: str) -> Outcome:
    return dataclasses.replace(o, data={**o.data, "notes": {**o.data.get("notes", {}), "check": how}})
