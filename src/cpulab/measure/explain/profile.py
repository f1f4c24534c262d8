"""Where the time goes: the program counter sampled while a build runs (the harness's own
timer signal, or for a whole program an LD_PRELOADed sampler), attributed to functions
and loops of its disassembly (explain.code).
"""
from __future__ import annotations

import tempfile
import time
from collections import Counter
from pathlib import Path

from elftools.elf.elffile import ELFFile

from cpulab.measure.explain.code import Function
from cpulab.compile.artifacts import build_tool
from cpulab.measure.execute.executor import Executor, HarnessJob, default_executor
from cpulab.measure.execute.processes import ProcessJob, launcher
from cpulab.measure.symbols import symbols
from cpulab.model import Status

PROFILE_SECONDS = 1.0  # ~10,000 addresses on a quiet host; a loaded KVM host delivered the 97 us timer at ~1 kHz


def symbol_address(executable: str, name: str) -> int | None:
    return next((s.value for s in symbols(executable) if s.name == name), None)


def profile(artifact_path: str, params: dict[str, str] | None = None, seconds: float = PROFILE_SECONDS,
            executor: Executor | None = None, verified: bool = False) -> dict:
    """Sample where an artifact's kernel spends its time -> {"pcs": {link-time address:
    count}, "ticks", "cycles_per_unit", "timer"}.  Addresses are moved from run time to the
    executable's own by main's offset (a PIE loads anywhere).  verified: the executable
    passed its known-answer test at `params` already (a run's build): not again."""
    job = HarnessJob(artifact_path, dict(params or {}), samples=3, timeout=60 + 10 * seconds, profile_code=seconds,
                     verified=verified)
    out = (executor or default_executor()).execute(job)
    if out.status != Status.OK:
        raise RuntimeError(f"profiling {artifact_path}: {out.status}: {out.error}")
    prof = out.data["profile"]
    shift = int(prof["main"], 16) - (symbol_address(artifact_path, "main") or 0)
    # The fastest sample: other tenants of the core only ever add time.
    cyc = [c / out.data["work"] for c in out.data["cycles"] if c is not None]
    return {"pcs": {int(a, 16) - shift: n for a, n in prof["pcs"]}, "ticks": prof["ticks"],
            "period_us": prof["period_us"], "timer": out.data["timer"],
            "cycles_per_unit": min(cyc) if cyc else None, "unit": out.data["unit"]}


def attribute(funcs: dict[str, Function], pcs: dict[int, int]) -> Counter:
    """Put each sampled address on its instruction (an interrupted address is an
    instruction boundary); returns samples per function.  Addresses outside the kernel
    (harness, libc) count under '(outside the kernel)'."""
    where = {i.address: (name, i) for name, f in funcs.items() for i in f.instructions}
    per_func: Counter = Counter()
    for f in funcs.values():
        for i in f.instructions:
            i.samples = 0
    for addr, n in pcs.items():
        hit = where.get(addr)
        if hit:
            hit[1].samples += n
            per_func[hit[0]] += n
        else:
            per_func["(outside the kernel)"] += n
    return per_func


PRELOAD_SOURCE = Path(__file__).resolve().parents[2] / "native" / "profile_preload.c"


def file_offset_to_address(executable: str, offset: int) -> int | None:
    """The link-time address of a byte of the file, through its PT_LOAD segments."""
    with open(executable, "rb") as f:
        for seg in ELFFile(f).iter_segments():
            if seg["p_type"] == "PT_LOAD" and seg["p_offset"] <= offset < seg["p_offset"] + seg["p_filesz"]:
                return offset - seg["p_offset"] + seg["p_vaddr"]
    return None


def read_program_profile(text: str, executable: str) -> dict[int, int] | None:
    """A preload profile file -> {link-time address in `executable`: samples}, or None if
    this process did not map the executable (the launcher, a shell in between)."""
    real = str(Path(executable).resolve())
    maps, pcs = [], Counter()
    for line in text.splitlines():
        kind, _, rest = line.partition(" ")
        if kind == "pc":
            pcs[int(rest, 16)] += 1
        elif kind == "map":
            f = rest.split(maxsplit=5)
            if len(f) == 6 and f[5].strip() == real:
                lo, hi = (int(x, 16) for x in f[0].split("-"))
                maps.append((lo, hi, int(f[2], 16)))
    if not maps:
        return None
    out: Counter = Counter()
    for pc, n in pcs.items():
        for lo, hi, off in maps:
            if lo <= pc < hi and (addr := file_offset_to_address(executable, pc - lo + off)) is not None:
                out[addr] += n
                break
    return dict(out)


def profile_program(executable: str, argv: list[str], env: dict[str, str] | None = None, timeout: float = 300,
                    executor: Executor | None = None, seconds: float = PROFILE_SECONDS) -> dict:
    """Run a built program with the sampling preload library, again while `seconds` of wall
    time have not passed (a 100 ms program gives a few ticks a run in its own code) -> a
    profile of the addresses in its own binary (CPU time, 1 ms ticks), summed over runs."""
    lib = build_tool(PRELOAD_SOURCE, ("-O2", "-shared", "-fPIC"), headers=(PRELOAD_SOURCE.parent / "profile.h",))
    pcs: Counter = Counter()
    runs, start = 0, time.monotonic()
    while runs == 0 or time.monotonic() - start < seconds:
        found = profile_program_once(executable, argv, lib, env, timeout, executor)
        if not found:
            raise RuntimeError(f"profiling {argv[0]}: no profile of {executable} came back "
                               "(it is not the program run, or it left by _exit or a signal)")
        pcs.update(found[0])
        runs += 1
    if not pcs:
        raise RuntimeError(f"profiling {argv[0]}: in {runs} runs ({time.monotonic() - start:.1f} s) it used less "
                           "than one tick (1 ms) of CPU time in its own code: nothing to sample; give it more work")
    return {"pcs": dict(pcs), "ticks": sum(pcs.values()), "period_us": 1000, "timer": "itimer-prof",
            "cycles_per_unit": None, "unit": "runs", "runs": runs}


def profile_program_once(executable: str, argv: list[str], lib: Path, env: dict[str, str] | None, timeout: float,
                         executor: Executor | None) -> list[dict]:
    """One run under the preload library -> the profiles of its processes that mapped
    `executable`."""
    with tempfile.TemporaryDirectory(prefix="cpulab-profile-") as d:
        job = ProcessJob(argv, launcher(), check=None, timeout=timeout,
                         env={**(env or {}), "LD_PRELOAD": str(lib), "CPULAB_PROFILE_OUT": f"{d}/profile"})
        out = (executor or default_executor()).execute(job)
        if out.status != Status.OK:
            raise RuntimeError(f"profiling {argv[0]}: {out.status}: {out.error}")
        return [p for f in sorted(Path(d).iterdir())
                if (p := read_program_profile(f.read_text(), executable)) is not None]
