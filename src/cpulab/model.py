"""The words every stage shares: the status of a result and the verdict of a comparison.

Both are string enums, so they compare equal to (and are stored and exported as) their
plain values: `Status.OK == "ok"`.
"""
from __future__ import annotations

from enum import StrEnum


class Status(StrEnum):
    PENDING = "pending"  # planned, not (fully) measured yet
    OK = "ok"  # measured
    IDENTICAL = "identical"  # same code and environment as another variant: measured once, as that one
    SKIPPED = "skipped"  # this machine lacks a toolchain, library or instruction set
    BUILD_FAILED = "build-failed"
    SETUP_FAILED = "setup-failed"  # the kernel could not set up (a parameter it cannot take, no memory)
    VERIFY_FAILED = "verify-failed"  # wrong known answer: never timed
    CRASH = "crash"  # killed by a signal
    TIMEOUT = "timeout"
    ERROR = "error"  # anything else: no result could be read
    LOST = "lost"  # its cluster worker died in the middle of it, twice, or left: never stored as complete

    @property
    def measured(self) -> bool:
        """Has samples to estimate from (its own or, for identical, its twin's)."""
        return self in (Status.OK, Status.IDENTICAL)


class Verdict(StrEnum):
    FASTER = "faster"
    SLOWER = "slower"
    SAME = "same"
    INCONCLUSIVE = "inconclusive"  # too few processes for any difference to be significant
    IDENTICAL_CODE = "identical code"
    NO_BASELINE = "no baseline"
