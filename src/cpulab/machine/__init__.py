"""The machine: a fingerprint of what it is, and the conditions it runs under now.

The fingerprint (CPU, caches, kernel, TSC frequency, core/TSC ratio) identifies a
machine across runs; the conditions (governor, turbo, ASLR, load, isolated CPUs) are
recorded with every run because they change from one run to the next.  `tlb.py` reads the
TLBs from CPUID.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import shutil
import socket
from pathlib import Path

from cpulab.machine.tlb import known_core_tlbs, read_tlbs
from cpulab.params import cache_name
from cpulab.params import ParamError, parse_size

SYS_CPU = Path("/sys/devices/system/cpu")
SYSFS_CACHE = SYS_CPU / "cpu0" / "cache"


def _read(path: Path | str, default: str | None = "") -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return default


def os_cache_sizes(root: Path | str = SYSFS_CACHE) -> list[dict]:
    """The caches of cpu0 as the kernel reports them, smallest level first.

    Each: {"level": 1, "type": "Data"|"Instruction"|"Unified", "size_bytes": 32768,
    "ways": 8 or None, "line_bytes": 64 or None, "shared_cpus": "0-1" or None,
    "name": "L1d 32 KiB"}.  Missing or unreadable sysfs gives an empty list.
    """
    return [dict(c) for c in _os_cache_sizes(str(root))]


@functools.lru_cache(maxsize=None)  # read once a process: a plan's memory check asks at every point
def _os_cache_sizes(root: str) -> tuple[dict, ...]:
    root = Path(root)
    caches = []
    try:
        dirs = sorted(root.glob("index*"))
    except OSError:
        return ()
    for d in dirs:
        level, ctype, size = _read(d / "level", None), _read(d / "type", None), _read(d / "size", None)
        if not level or not ctype or not size or not level.isdigit():
            continue
        try:  # sysfs writes '32K', '1024K', '2M' or plain bytes: sizes as cpulab reads them
            size_bytes = parse_size(size)
        except ParamError:
            continue
        if not size_bytes:
            continue
        ways = _read(d / "ways_of_associativity", None)
        line = _read(d / "coherency_line_size", None)
        c = {"level": int(level), "type": ctype, "size_bytes": size_bytes,
             "ways": int(ways) if ways and ways.isdigit() else None,
             "line_bytes": int(line) if line and line.isdigit() else None,
             "shared_cpus": _read(d / "shared_cpu_list", None)}
        c["name"] = cache_name(c)
        caches.append(c)
    return tuple(sorted(caches, key=lambda c: (c["level"], c["type"])))


def cpuinfo() -> dict[str, str]:
    """The first processor's fields from /proc/cpuinfo."""
    info: dict[str, str] = {}
    for line in _read("/proc/cpuinfo").splitlines():
        if not line.strip():
            if info:
                break
            continue
        key, _, value = line.partition(":")
        info.setdefault(key.strip(), value.strip())
    return info


def cpu_flags() -> set[str]:
    info = cpuinfo()
    return set((info.get("flags") or info.get("Features") or "").split())


def caches() -> list[dict]:
    """Caches of CPU 0 as sysfs reports them: level, type, size, line, ways, name."""
    return os_cache_sizes()


def tlbs() -> dict:
    """TLB geometry (machine/tlb.py): {"tlbs": [...], "source": where from, or why unknown}."""
    found, source = read_tlbs(cpuinfo_text=_read("/proc/cpuinfo"))
    if not found:
        info = cpuinfo()
        try:
            known, why = known_core_tlbs(info.get("vendor_id", ""), int(info.get("cpu family", "-1")),
                                         int(info.get("model", "-1")))
        except ValueError:
            known = []
        if known:
            found, source = known, f"{why}; {source}"
    return {"tlbs": found, "source": source}


def fingerprint(timing: dict | None = None) -> dict:
    """What this machine is.  `timing` is a harness --calibrate-only result."""
    info = cpuinfo()
    timing = timing or {}
    fp = {
        "hostname": socket.gethostname(),
        "arch": platform.machine(),
        "cpu_model": info.get("model name") or info.get("Model") or info.get("CPU part", "unknown"),
        "cpu_family": info.get("cpu family", ""),
        "cpu_model_id": info.get("model", ""),
        "cpus": os.cpu_count(),
        "flags_hash": hashlib.sha256(" ".join(sorted(cpu_flags())).encode()).hexdigest()[:16],
        "caches": caches(),
        "tlbs": tlbs(),
        "kernel": platform.release(),
        "os": _read("/etc/os-release").partition('PRETTY_NAME="')[2].partition('"')[0],
        "memory_bytes": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
        "hypervisor": "hypervisor" in cpu_flags(),
        "tsc_hz": timing.get("tsc_hz"),
        "core_per_tsc": timing.get("core_per_tsc"),
        "timer": timing.get("timer"),
        "perf_error": timing.get("perf_error", ""),
    }
    return fp


def mem_available() -> int | None:
    """Bytes the kernel says can be allocated now without swapping (MemAvailable), or
    None where /proc/meminfo does not say."""
    for line in _read("/proc/meminfo").splitlines():
        key, _, value = line.partition(":")
        if key == "MemAvailable" and value.split()[1:] == ["kB"]:
            return int(value.split()[0]) * 1024
    return None


def disk_free(path: Path) -> int:
    """Free bytes for an unprivileged writer on the file system `path` is (or would be
    made) on: the nearest existing directory above it decides."""
    for d in [path, *path.parents]:
        if d.exists():
            return shutil.disk_usage(d).free
    return shutil.disk_usage("/").free


def fingerprint_id(fp: dict) -> str:
    """A stable id of the machine: what it is, not how it measured today."""
    stable = {k: fp.get(k) for k in ("hostname", "arch", "cpu_model", "cpus", "flags_hash", "caches",
                                      "kernel", "memory_bytes")}
    return hashlib.sha256(json.dumps(stable, sort_keys=True).encode()).hexdigest()[:16]


def conditions() -> dict:
    """The state that can make this run noisy, read now."""
    gov = _read(SYS_CPU / "cpu0" / "cpufreq" / "scaling_governor", "unknown")
    boost = _read(SYS_CPU / "cpufreq" / "boost", "")
    no_turbo = _read(SYS_CPU / "intel_pstate" / "no_turbo", "")
    turbo = "on" if boost == "1" or no_turbo == "0" else "off" if boost == "0" or no_turbo == "1" else "unknown"
    try:
        load = list(os.getloadavg())
    except OSError:
        load = []
    return {
        "governor": gov,
        "turbo": turbo,
        "aslr": _read("/proc/sys/kernel/randomize_va_space", "unknown"),
        "loadavg": load,
        "isolated_cpus": _read(SYS_CPU / "isolated"),
        "thp": _read("/sys/kernel/mm/transparent_hugepage/enabled", "unknown"),
        "nr_hugepages": _read("/proc/sys/vm/nr_hugepages", "0"),
        "perf_event_paranoid": _read("/proc/sys/kernel/perf_event_paranoid", "unknown"),
    }


def warnings(cond: dict, fp: dict) -> list[str]:
    """Plain-language reasons the results may be noisy or not comparable."""
    out = []
    if cond["governor"] not in ("performance", "unknown"):
        out.append(f"CPU frequency governor is {cond['governor']!r}: set 'performance' for stable clocks")
    if cond["turbo"] == "on":
        out.append("turbo/boost is on: clocks vary with temperature and load")
    if cond["loadavg"] and cond["loadavg"][0] > 0.5 * (fp.get("cpus") or 1):
        out.append(f"load average {cond['loadavg'][0]:.2f} on {fp.get('cpus')} CPUs: other work competes")
    if cond["aslr"] not in ("0", "unknown"):
        out.append("ASLR is on: layout varies between runs (cpulab randomises layout anyway and reports the spread)")
    if not cond["isolated_cpus"]:
        out.append("no isolated CPUs: the measured CPU also runs other tasks")
    if fp.get("hypervisor"):
        out.append("running under a hypervisor: steal time and virtual timers add noise")
    if fp.get("timer") and fp["timer"] != "perf":
        out.append(f"no hardware counters ({fp.get('perf_error')}): core cycles come from the calibrated TSC")
    return out
