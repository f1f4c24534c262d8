"""Named events: what `--events` and a plan's `events` may name, resolved to the codes
perf_event_open takes, as `perf list` names them.

* software events (task-clock, page-faults, context-switches, cpu-migrations, ...): open
  in every Linux guest, PMU or not;
* perf's generic hardware events (cycles, instructions, branch-misses, cache-misses, ...)
  and cache events (L1-dcache-load-misses, LLC-loads, dTLB-load-misses, ...);
* a PMU's own events as the kernel lists them in sysfs (`cpu/topdown-retiring/`, or a
  bare name such as `topdown-retiring` found in a PMU's events), and `pmu/event=0x3c,
  umask=0x1/` terms, encoded by the PMU's format files;
* raw codes, `rNNNN` (hex), on the core PMU;
* `topdown`: the core's level-1 top-down events where the kernel exposes them.

The harness and the launcher read each event around their window (native/events.h);
one the machine cannot count is named with why, once, and the run goes on.  libpfm4's
names (Google Benchmark's) are not read: the sysfs and generic names cover perf's.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

PMU_ROOT = Path("/sys/bus/event_source/devices")
# perf_event_attr.type
HARDWARE, SOFTWARE, HW_CACHE, RAW = 0, 1, 3, 4

SOFTWARE_EVENTS = {"cpu-clock": 0, "task-clock": 1, "page-faults": 2, "faults": 2, "context-switches": 3, "cs": 3,
                   "cpu-migrations": 4, "migrations": 4, "minor-faults": 5, "major-faults": 6,
                   "alignment-faults": 7, "emulation-faults": 8}
HARDWARE_EVENTS = {"cycles": 0, "cpu-cycles": 0, "instructions": 1, "cache-references": 2, "cache-misses": 3,
                   "branches": 4, "branch-instructions": 4, "branch-misses": 5, "bus-cycles": 6,
                   "stalled-cycles-frontend": 7, "idle-cycles-frontend": 7, "stalled-cycles-backend": 8,
                   "idle-cycles-backend": 8, "ref-cycles": 9}
CACHES = {"L1-dcache": 0, "L1-icache": 1, "LLC": 2, "dTLB": 3, "iTLB": 4, "branch": 5, "node": 6}
CACHE_OPS = {"loads": 0, "load": 0, "stores": 1, "store": 1, "prefetches": 2, "prefetch": 2}
# Level-1 top-down, as Intel cores since Ice Lake list it (the slots and four shares), or
# older cores (slots and the bubbles and retired slots it is worked out from).
TOPDOWN_METRICS = ("slots", "topdown-retiring", "topdown-bad-spec", "topdown-fe-bound", "topdown-be-bound")
TOPDOWN_SLOTS = ("topdown-total-slots", "topdown-slots-issued", "topdown-slots-retired", "topdown-fetch-bubbles",
                 "topdown-recovery-bubbles")
# Names software events go by in what cpulab shows, in this order (the rest as given).
SHOWN = ("task-clock", "page-faults", "context-switches", "cpu-migrations")


class EventError(ValueError):
    """A name that is no event here; one line naming it."""


@dataclass(frozen=True)
class Event:
    name: str  # as given (`topdown` is several)
    type: int
    config: int
    config1: int = 0
    config2: int = 0

    def spec(self) -> str:
        """NAME=TYPE:CONFIG:CONFIG1:CONFIG2, as the harness and the launcher read it."""
        return f"{self.name}={self.type}:{self.config:#x}:{self.config1:#x}:{self.config2:#x}"


def spec(events: list[Event]) -> str:
    return ",".join(e.spec() for e in events)


def spec_of(names: list[str]) -> str:
    """The events of these names as the harness's and the launcher's --events read them."""
    return spec(resolve(names))


def resolve(names: list[str], root: Path = PMU_ROOT) -> list[Event]:
    """The events of these names (each once, in order); EventError on the first unknown."""
    out: list[Event] = []
    for name in names:
        for e in _resolve_one(name.strip(), root):
            if e.name not in {x.name for x in out}:
                out.append(e)
    return out


def _resolve_one(name: str, root: Path) -> list[Event]:
    if not re.fullmatch(r"[A-Za-z0-9_.:/=,+-]{1,63}", name):
        raise EventError(f"event {name!r}: names are letters, digits and _ . : / = , + -, at most 63")
    if name in SOFTWARE_EVENTS:
        return [Event(name, SOFTWARE, SOFTWARE_EVENTS[name])]
    if name in HARDWARE_EVENTS:
        return [Event(name, HARDWARE, HARDWARE_EVENTS[name])]
    if cache := _cache_event(name):
        return [Event(name, HW_CACHE, cache)]
    if m := re.fullmatch(r"r([0-9a-fA-F]{1,16})", name):
        return [Event(name, RAW, int(m[1], 16))]
    if name == "topdown":
        return topdown(root)
    if m := re.fullmatch(r"([\w.-]+)/([^/]+)/", name):
        return [_pmu_event(name, m[1], m[2], root)]
    for pmu in _pmus(root):  # a bare name a PMU lists: topdown-retiring, mem-loads, ...
        if (pmu / "events" / name).is_file():
            return [_pmu_event(name, pmu.name, name, root)]
    raise EventError(f"event {name!r}: not a software, hardware, cache or raw event, and no PMU of this machine "
                     f"lists it ({_pmu_names(root)}); `cpulab doctor` lists what counts here")


def _cache_event(name: str) -> int | None:
    """L1-dcache-load-misses -> its PERF_TYPE_HW_CACHE config; None if not such a name."""
    m = re.fullmatch(r"(L1-dcache|L1-icache|LLC|dTLB|iTLB|branch|node)-(loads?|stores?|prefetch(?:es)?)(-misses)?",
                     name)
    if not m:
        return None
    return CACHES[m[1]] | CACHE_OPS[m[2]] << 8 | (1 if m[3] else 0) << 16


def _pmus(root: Path) -> list[Path]:
    """The PMUs that list events, the core's (cpu, cpu_core, cpu_atom) first."""
    try:
        pmus = [p for p in root.iterdir() if (p / "type").is_file()]
    except OSError:
        return []
    return sorted(pmus, key=lambda p: (not p.name.startswith("cpu"), p.name))


def _pmu_names(root: Path) -> str:
    return "PMUs: " + (", ".join(p.name for p in _pmus(root)) or "none")


def _pmu_event(name: str, pmu: str, terms: str, root: Path) -> Event:
    """pmu/terms/ (terms: an event the PMU lists, or field=value,... of its format) as an
    Event: each field's value placed in the config bits its format file names."""
    d = root / pmu
    try:
        type_ = int((d / "type").read_text())
    except (OSError, ValueError):
        raise EventError(f"event {name!r}: no PMU {pmu!r} here ({_pmu_names(root)})") from None
    listed = d / "events" / terms
    if listed.is_file():
        terms = listed.read_text().strip()
    config = [0, 0, 0]
    for term in filter(None, terms.split(",")):
        field, _, value = term.partition("=")
        try:
            fmt = (d / "format" / field).read_text().strip()
            number = int(value, 0) if value else 1
        except (OSError, ValueError):
            raise EventError(f"event {name!r}: {term!r} is not a field of {pmu}'s format "
                             f"({', '.join(sorted(p.name for p in (d / 'format').glob('*')))})") from None
        word, _, ranges = fmt.partition(":")
        index = {"config": 0, "config1": 1, "config2": 2}.get(word)
        if index is None:
            raise EventError(f"event {name!r}: {pmu}'s field {field} is in {word!r}, which cpulab does not set")
        for lo, hi in _bit_ranges(ranges):
            width = hi - lo + 1
            config[index] |= (number & ((1 << width) - 1)) << lo
            number >>= width
    return Event(name, type_, *config)


def _bit_ranges(text: str) -> list[tuple[int, int]]:
    """'0-7,32-35' -> [(0, 7), (32, 35)]; '21' -> [(21, 21)]."""
    out = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.append((int(lo), int(hi or lo)))
    return out


def topdown(root: Path = PMU_ROOT) -> list[Event]:
    """The core's level-1 top-down events, or EventError saying why there are none."""
    for pmu in _pmus(root):
        listed = {p.name for p in (pmu / "events").glob("*")} if (pmu / "events").is_dir() else set()
        for names in (TOPDOWN_METRICS, TOPDOWN_SLOTS):
            if set(names) <= listed:
                return [_pmu_event(n, pmu.name, n, root) for n in names]
    raise EventError("topdown: not available here: no PMU lists the level-1 top-down events (Intel cores list "
                     f"them in {root}/cpu/events; {_pmu_names(root)})")


def level1(per_unit: dict[str, float]) -> dict[str, float] | None:
    """Level-1 top-down shares (retiring, bad speculation, frontend and backend bound, of
    the issue slots) from the top-down events' counts; None without them."""
    if all(k in per_unit for k in TOPDOWN_METRICS) and per_unit["slots"]:
        s = per_unit["slots"]
        return {"retiring": per_unit["topdown-retiring"] / s, "bad speculation": per_unit["topdown-bad-spec"] / s,
                "frontend bound": per_unit["topdown-fe-bound"] / s, "backend bound": per_unit["topdown-be-bound"] / s}
    if all(k in per_unit for k in TOPDOWN_SLOTS) and per_unit["topdown-total-slots"]:
        s = per_unit["topdown-total-slots"]
        fe = per_unit["topdown-fetch-bubbles"] / s
        bad = (per_unit["topdown-slots-issued"] - per_unit["topdown-slots-retired"]
               + per_unit["topdown-recovery-bubbles"]) / s
        ret = per_unit["topdown-slots-retired"] / s
        return {"retiring": ret, "bad speculation": bad, "frontend bound": fe, "backend bound": 1 - fe - bad - ret}
    return None
