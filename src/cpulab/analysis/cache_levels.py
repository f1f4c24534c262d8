"""Cache levels from a memory-latency curve, and the operating system's view of the caches.

A memlat sweep gives, per working-set size, the latency of one dependent load.  Plotted
as log(latency) against log(size) it is a staircase: a plateau per cache level, a step
where the working set outgrows that level.  Real curves are less tidy: a step can be a
gradual ramp (seed 003: with low associativity and arbitrary physical page placement, a
2 MB L2 starts missing from 128 KB on), a TLB running out of reach adds a step of its
own with 4 KiB pages, and a shared machine adds noise.

``detect_levels`` therefore works in two stages:

1. change points: PELT with a least-squares cost (pelt.py) splits log(latency) into
   segments of constant mean; the penalty is a BIC-like ``3 sigma^2 log n`` with the
   noise sigma estimated robustly from the point-to-point differences;
2. plateau or ramp: a segment whose own least-squares slope is below
   ``FLAT_SLOPE`` (latency rising less than ~35 % per doubling of the working set) and
   that spans most of an octave is a plateau; anything steeper or shorter is part of a
   step.  A plateau less than ``MIN_STEP`` above the previous one continues it (noise, or
   a TLB step inside a cache level); transition points at the end of a plateau are
   trimmed.

Each plateau is a level: its upper edge is the largest working set still at that
latency.  The edge is compared with the caches the OS reports (sysfs); an edge more than
a factor ``AGREE_FACTOR`` from every one of them is flagged as disagreeing.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from cpulab.analysis.pelt import pelt_ends
from cpulab.params import data_caches
from cpulab.params import human_bytes

FLAT_SLOPE = math.log(1.35)      # per octave: a plateau rises less than 35 % per doubling
MIN_STEP = math.log(1.4)         # plateaus closer than 40 % in latency are one level (a
                                 # TLB reach step inside a cache level is ~10-30 %; steps
                                 # between cache levels are 2-10x)
AGREE_FACTOR = 1.5               # an edge within this factor of an OS cache size agrees
MIN_SIGMA = 0.01                 # noise floor (1 %) so clean synthetic curves stay sane


def near_step(edge: float, upper: float | None, size: float) -> bool:
    """A size explains a step that leaves its plateau at `edge` and reaches the next at
    `upper` when it lies in that ramp, give or take AGREE_FACTOR (the one rule for the
    levels of a curve and the steps explained from them)."""
    return edge / AGREE_FACTOR <= size <= (upper or edge) * AGREE_FACTOR


def label_by_level(size_bytes: float, os_caches: Sequence[dict]) -> str:
    """'L1', 'L2', 'L3' ... for the smallest data cache the working set fits in, else 'memory'."""
    for c in data_caches(os_caches):
        if size_bytes <= c["size_bytes"]:
            return f"L{c['level']}"
    return "memory"


# ---- levels from a latency curve --------------------------------------------------------

def _noise_sigma(y: np.ndarray) -> float:
    """Robust noise of y: MAD of first differences (steps are rare, so they are outliers)."""
    if len(y) < 3:
        return MIN_SIGMA
    d = np.diff(y)
    mad = float(np.median(np.abs(d - np.median(d))))
    return max(MIN_SIGMA, 1.4826 * mad / math.sqrt(2))


def _median3(y: np.ndarray) -> np.ndarray:
    if len(y) < 3:
        return y.copy()
    out = y.copy()
    out[1:-1] = np.median(np.stack([y[:-2], y[1:-1], y[2:]]), axis=0)
    return out


def _segments(y: np.ndarray, sigma: float, min_size: int) -> list[tuple[int, int]]:
    """[start, end) index ranges of constant mean, by PELT on a least-squares cost."""
    n = len(y)
    if n < 2 * min_size:
        return [(0, n)]
    ends = pelt_ends(y, 3.0 * sigma**2 * math.log(n), min_size)
    starts = [0] + ends[:-1]
    return list(zip(starts, ends))


def _slope(x: np.ndarray, y: np.ndarray) -> float:
    """Theil-Sen slope (median of pairwise slopes): a transition point that ended up at
    the end of a plateau segment does not tilt it."""
    if len(x) < 2 or x[-1] == x[0]:
        return 0.0
    i, j = np.triu_indices(len(x), 1)
    ok = x[j] != x[i]
    return float(np.median((y[j][ok] - y[i][ok]) / (x[j][ok] - x[i][ok])))


def _off_trend(x: np.ndarray, y: np.ndarray, idx: Sequence[int], k: int) -> float:
    """How far point k lies from the robust trend line of the points idx: a plateau may
    rise up to FLAT_SLOPE, so its next point is judged against its line, not its median."""
    b = _slope(x[idx], y[idx])
    return float(y[k] - (np.median(y[idx] - b * x[idx]) + b * x[k]))


def detect_levels(points: Sequence[tuple[float, float, float | None]], os_caches: Sequence[dict] = (),
                  min_segment: int = 2) -> list[dict]:
    """Cache levels of a latency curve.

    points: (size_bytes, ns_per_load, cycles_per_load), any order (sorted here); cycles
    may be None or NaN (not measured).  os_caches: as from os_cache_sizes().

    Returns one dict per level, smallest first:
      size_bytes   upper edge: the largest working set still at this latency (for the
                   last level, the largest size measured)
      first_bytes  the smallest working set at this latency
      next_bytes   where the next level's plateau starts (None for the last level); far
                   above size_bytes means a gradual step
      ns, cycles   median latency per load over the plateau
      points       how many sizes the plateau holds
      open         True for the last level (its edge is the end of the sweep, not a step)
      matches      name of the OS cache the edge matches ("L1d 32 KiB"), "memory" for
                   the last level when it lies beyond every cache, else None
      agrees       False when a closed level's edge is more than AGREE_FACTOR from every
                   OS data cache size
      ramp         (closed levels) the step's points, [size_bytes, latency] from the edge
                   to the next level's first size, latency smoothed as the levels were
                   found (cycles where every point has them, else ns)
    """
    pts = sorted((float(s), float(n), math.nan if c is None else float(c)) for s, n, c in points if s > 0 and n > 0)
    if not pts:
        return []
    size = np.array([p[0] for p in pts])
    ns = np.array([p[1] for p in pts])
    cyc = np.array([p[2] for p in pts])
    x = np.log2(size)
    # Steps are found in core cycles where every point has them: the host moves the core
    # clock between processes, which nanoseconds carry and cycles do not (Intel model 207:
    # a point-to-point noise of 2.4-4.7% in ns, 1.0-3.2% in cycles).
    latency = cyc if not np.isnan(cyc).any() else ns
    # A running median of three: removes a lone outlier (a sample disturbed by another
    # process on a shared machine) and leaves monotone steps exactly where they are.
    sigma = _noise_sigma(np.log(latency))
    y = _median3(np.log(latency))

    # 1. change points; 2. plateau or ramp.  A plateau must span most of an octave
    # (so a noisy point or two inside a step is not a level), and a plateau that is not
    # clearly above the previous one continues it, swallowing whatever lies between.
    span = x[-1] - x[0]
    per_octave = (len(x) - 1) / span if span > 0 else 1.0
    min_points = max(2, math.ceil(0.9 * per_octave))
    def flat(a: int, b: int) -> bool:
        return abs(_slope(x[a:b], y[a:b])) < FLAT_SLOPE

    # Neighbouring segments at nearly the same latency that are flat together are one
    # candidate: PELT with small segments cuts a plateau into pieces at a bump of one or
    # two points (a 5-point L2 plateau at 23 cycles with one point at 25 was split into
    # pieces too short to count in one run and kept whole in the next).  A segment's first
    # points within `tol` of the group's trend line join that group: PELT may put a short
    # plateau's last point with the step (Zen 4 guest: of an L3 shelf of 4 points at
    # 1.7-2.9 MiB, the last went with the 3.4 MiB point, leaving too few for a level; model
    # 207: a shelf rising 91, 100, 104, 112 cycles lost its 112, 12% above its median and
    # under 1% off its line).  The same line and `tol` trim a step's ramp off a plateau's end.
    tol = max(3 * sigma, math.log(1.1))
    groups: list[list[int]] = []  # [start, end) pairs
    for a, b in _segments(y, sigma, min_segment):
        if groups and abs(np.median(y[a:b]) - np.median(y[groups[-1][0]:groups[-1][1]])) < MIN_STEP \
                and flat(groups[-1][0], b):
            groups[-1][1] = b
            continue
        start = a
        while groups and a < b and abs(_off_trend(x, y, range(*groups[-1]), a)) <= tol \
                and flat(groups[-1][0], a + 1):
            a = groups[-1][1] = a + 1
        # ... and the other way: a group's last points that sit at this segment's level, not
        # at the rest of their group's, go with it.  Over a steep ramp PELT cuts pairs, and a
        # pair may join the ramp's top to the first point of the shelf after it (model 207,
        # one seeds run of five: 2.4 and 2.8 MiB at 78 and 98 cycles, the L3 shelf at 98-107
        # to 4.8 MiB then too short to count, and its step taken for the L2's).
        while a == start and groups and groups[-1][1] - groups[-1][0] > 1 and a < b:
            g0, last = groups[-1][0], groups[-1][1] - 1
            to_next, to_own = abs(y[last] - np.median(y[a:b])), abs(y[last] - np.median(y[g0:last]))
            if not (to_next <= tol and to_next < to_own and flat(last, b)):
                break
            start = a = groups[-1][1] = last
        if a < b:
            groups.append([a, b])

    plateaus: list[list[int]] = []  # index lists
    for a, b in groups:
        if b - a < min_points or not flat(a, b):
            continue  # part of a step
        if plateaus and np.median(y[a:b]) - np.median(y[plateaus[-1]]) < max(MIN_STEP, 4 * sigma):
            plateaus[-1].extend(range(plateaus[-1][-1] + 1, b))  # same level
        else:
            plateaus.append(list(range(a, b)))

    if not plateaus:  # all ramp: report the whole curve as one open level
        plateaus = [list(range(len(pts)))]

    # Trim transition points off the end of each closed plateau: points well above the
    # plateau's own (robust) trend line already belong to the step.
    for idx in plateaus[:-1]:
        while len(idx) > 2 and _off_trend(x, y, idx, idx[-1]) > tol:
            idx.pop()

    caches = data_caches(os_caches)
    largest = max((c["size_bytes"] for c in caches), default=None)
    levels = []
    for k, idx in enumerate(plateaus):
        is_last = k == len(plateaus) - 1
        edge = float(size[idx[-1]])
        c_med = cyc[idx][~np.isnan(cyc[idx])]
        level = {
            "size_bytes": int(size[len(pts) - 1] if is_last else edge),
            "first_bytes": int(size[idx[0]]),
            "next_bytes": None if is_last else int(size[plateaus[k + 1][0]]),
            "ns": float(np.median(ns[idx])),
            "cycles": float(np.median(c_med)) if len(c_med) else float("nan"),
            "points": len(idx),
            "open": is_last,
            "matches": None,
            "agrees": True,
        }
        if not is_last:
            level["ramp"] = [[int(size[i]), float(np.exp(y[i]))] for i in range(idx[-1], plateaus[k + 1][0] + 1)]
        if is_last:
            # The end of the sweep is no cache edge; beyond every cache it is memory.
            if largest is not None and size[idx[0]] > largest / AGREE_FACTOR and len(plateaus) > 1:
                level["matches"] = "memory"
        elif caches:
            best = min(caches, key=lambda c: abs(math.log(edge / c["size_bytes"])))
            if near_step(edge, level["next_bytes"], best["size_bytes"]):
                level["matches"] = best["name"]
            else:
                level["agrees"] = False
            level["nearest"] = best["name"]
        levels.append(level)
    return levels


def describe_levels(levels: Sequence[dict], os_caches: Sequence[dict] = ()) -> str:
    """A few plain sentences about the levels found (and OS caches nobody matched)."""
    if not levels:
        return "No latency points to analyse."
    lines = []
    for i, lv in enumerate(levels, 1):
        cyc = f", {lv['cycles']:.1f} cycles" if not math.isnan(lv["cycles"]) else ""
        lat = f"{lv['ns']:.1f} ns{cyc} per load"
        if lv["open"]:
            s = f"Level {i}: {lat} from {human_bytes(lv['first_bytes'])} to the largest size measured ({human_bytes(lv['size_bytes'])})"
            s += ": main memory." if lv["matches"] == "memory" else "."
        else:
            s = f"Level {i}: {lat} up to {human_bytes(lv['size_bytes'])}"
            if lv["matches"]:
                s += f", matching the OS's {lv['matches']}."
            else:
                s += (f"; no cache the OS reports is within a factor {AGREE_FACTOR:g} of that "
                      f"(nearest: {lv.get('nearest', 'none')}). A TLB running out of reach "
                      f"(compare pages=thp), conflict misses, or a cache shared with other "
                      f"cores or virtual machines can make such a step.")
            if lv["next_bytes"] and lv["next_bytes"] > 2 * lv["size_bytes"]:
                s += (f" The step is gradual: latency climbs from {human_bytes(lv['size_bytes'])} "
                      f"to {human_bytes(lv['next_bytes'])} (low associativity with arbitrary "
                      f"physical page placement does this).")
        lines.append(s)
    matched = {lv["matches"] for lv in levels}
    for c in data_caches(os_caches):
        if c["name"] not in matched:
            ramp = [lv for lv in levels if not lv["open"] and lv["next_bytes"]
                    and abs(math.log(lv["next_bytes"] / c["size_bytes"])) <= math.log(AGREE_FACTOR)]
            if ramp and not ramp[0]["matches"]:
                lines.append(f"No sharp step at the OS's {c['name']}: the gradual climb ends near it.")
            else:
                lines.append(f"No step found near the OS's {c['name']}.")
    return "\n".join(lines)
