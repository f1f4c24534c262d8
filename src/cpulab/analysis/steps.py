"""Why each memlat step is where it is.  Each step of the 4 KiB line chase is one of:

* `capacity`: a reported cache's size lies in the step.  A gradual one says where its
  climb begins, as a share of the cache: with pages placed arbitrarily some of its sets
  fill before the cache does (seed 003's gradual step);
* `capacity, then effective capacity`: a cache's step whose climb runs on to memory: the
  last cache's share (as below) ran out on the way, too near the first for a level between,
  at about where the climb rises most steeply past the first cache's reach;
* `effective capacity`: a sharp step to memory (the last, or followed only by steps that
  huge pages remove) that stays with huge pages, well below the last cache the machine
  reports: the cache is shared (other tenants, other cores), and the size measured is
  what this process gets;
* `TLB`: a TLB's reach lies in the step and huge pages remove or move it;
* `unexplained`, said so with the nearest candidates.
The last plateau beyond every cache is memory (analysis.cache_levels).

Evidence, from the curves of one memlat run or several (analysis.memory.memlat_curves):
* the line chase with 4 KiB pages (mode=random pages=4k): the steps to explain;
* the same with huge pages (pages=thp or huge): a step that is gone there was the TLB's
  (a 2 MiB page covers 512 times the address range), one that stays is a cache's --
  where huge pages widen a TLB's reach.  Under a hypervisor that maps the guest's memory
  in 4 KiB pages they do not: a TLB entry holds the guest-virtual to host-physical
  translation, so it covers the smaller of the two pages (Xeon model 167's guest: the
  page-stride chase steps at 90 pages, 362 KiB, with 4 KiB pages and with huge pages);
* the page-stride chase (mode=pagestride pages=4k): one load per page touches size/4096
  pages but only size/64 bytes of cache, so its steps below 64 x L1 are TLB reaches,
  measured, and a step at 64 x a cache size is that cache's.  A measured reach explains
  a step whatever the huge-page curve says;
* the TLB geometry from CPUID (machine/tlb.py), when the machine reports it.
A candidate explains a step when it lies within AGREE_FACTOR of the step's edge, or
inside a gradual step's ramp (from the last size at the lower latency to the first at
the higher one).
"""
from __future__ import annotations

import math

from cpulab.analysis.cache_levels import AGREE_FACTOR, human_bytes, near_step
from cpulab.params import data_caches

LINE = 64
PAGE = 4096


def _series(curves: list[dict], mode: str, pages: tuple[str, ...]) -> dict | None:
    for c in curves:
        kv = dict(p.split("=", 1) for p in c["series"].split() if "=" in p)
        if kv.get("mode", "random") == mode and kv.get("pages", "4k") in pages:
            return c
    return None


def _closed(levels: list[dict]) -> list[dict]:
    return [lv for lv in levels if not lv["open"]]


def pagestride_reaches(levels: list[dict], os_caches: list[dict]) -> tuple[list[dict], list[dict]]:
    """Split the page-stride chase's steps into measured TLB reaches and cache steps
    (a cache of C bytes holds the chase's lines up to a span of C x 4096 / 64)."""
    caches = data_caches(os_caches)
    tlbs, cache_steps = [], []
    for lv, after in zip(levels, levels[1:]):  # each closed level and the one it steps to
        footprint = lv["size_bytes"] * LINE / PAGE
        near = [c for c in caches if abs(math.log(footprint / c["size_bytes"])) <= math.log(AGREE_FACTOR)]
        if near:
            cache_steps.append({**lv, "cache": near[0]["name"]})
        else:
            pages = lv["size_bytes"] // PAGE
            tlbs.append({"name": f"TLB reach measured by the page-stride chase ({pages} pages = "
                                 f"{human_bytes(lv['size_bytes'])})", "reach_bytes": lv["size_bytes"],
                         "entries": pages, "page_bytes": PAGE, "measured": True,
                         "rise": _latency(after) - _latency(lv)})
    return tlbs, cache_steps


def candidates(os_caches: list[dict], tlbs: list[dict], measured_tlbs: list[dict]) -> list[dict]:
    out = [{"kind": "cache", "name": c["name"], "bytes": c["size_bytes"]} for c in data_caches(os_caches)]
    out += [{"kind": "TLB", "name": t["name"], "bytes": t["reach_bytes"], "rise": t.get("rise")}
            for t in tlbs + measured_tlbs if t["page_bytes"] == PAGE]
    return out


# What the huge-page curve rises across a step, against the 4 KiB curve's rise there: at
# least KEEPS of it and the step stays with huge pages; at most GONE of it and it is gone.
# Between them the two curves do not say (a noisy run's huge-page curve; Intel model 207's
# two runs minutes apart rose 0% and 100% of the 4 KiB step at 362 KiB).
KEEPS, GONE = 0.5, 0.25


def _latency(lv: dict) -> float:
    """A level's latency, in core cycles where measured (the host moves the clock)."""
    return lv["ns"] if math.isnan(lv.get("cycles", math.nan)) else lv["cycles"]


def _latency_at(levels: list[dict], size: float, above: bool) -> float:
    """The curve's latency at `size`: the level holding it, else (in a step) the level
    before it, or with `above` the one after it."""
    for k, lv in enumerate(levels):
        if lv["first_bytes"] <= size <= lv["size_bytes"]:
            return _latency(lv)
        if size < lv["first_bytes"]:
            return _latency(lv if above or k == 0 else levels[k - 1])
    return _latency(levels[-1])


def _huge_keeps(edge: float, upper: float | None, rise: float, huge_levels: list[dict] | None) -> bool | None:
    """True if the huge-page curve rises across this step by at least KEEPS of the 4 KiB
    curve's `rise` (a log ratio), False if by at most GONE of it, None if it does not say
    or was not measured."""
    if not huge_levels or rise <= 0:
        return None
    # Read from AGREE_FACTOR below the edge to AGREE_FACTOR above the step's end: the
    # huge-page curve's own step may sit a point or two off (model 207: at 6.7 MiB where
    # the 4 KiB curve stepped at 5.7 MiB), as near_step allows a cache's size to.
    huge_rise = math.log(_latency_at(huge_levels, (upper or edge * 2) * AGREE_FACTOR, True)
                         / _latency_at(huge_levels, edge / AGREE_FACTOR, False))
    return True if huge_rise >= KEEPS * rise else False if huge_rise <= GONE * rise else None


# A reach the page-stride chase measured explains a step of the line chase when a miss
# there cost the page-stride chase at least this share of the step's rise (Xeon model
# 167: 7 of 7 cycles at 362 KiB; 48 of 496 at 5.7 MiB, where the L3 runs out too).
TLB_SHARE = 0.5

GRADUAL = 2.0  # a step whose ramp spans more than this factor of sizes is gradual


def _gradual(edge: float, upper: float | None) -> bool:
    """A gradual step is a cache's capacity whatever share of the cache its climb begins
    at, not "conflicts" below it: that share is a grid point's noise.  Where the L2's climb
    began moved by a grid point between runs of one host (the Zen 3 guest: 215 and 256 KiB
    of 512 KiB; Intel model 207's: 1.0, 1.2 and 1.4 MiB of 2 MiB, one point 57 cycles among
    23-29), and no share splits the two hosts' runs.  The share is said, with its cause."""
    return upper is not None and upper > GRADUAL * edge


CAPACITY_THEN_SHARE = "capacity, then effective capacity"
# A level this slow is memory's, whatever the sweep's end: DRAM load-to-use is 60 ns or more,
# and no cache hit on the hosts seen is near it (their last-level caches: the Zen 3 and Zen 4
# guests' 15-17 ns, model 207's 31-36 ns; memory there 145, 149-160 and 135 ns).
MEMORY_NS = 60.0


def _steepest(ramp: list[list[float]], above: float) -> tuple[float, float]:
    """Where a climb rises most steeply (latency per octave of size) on its way past
    `above` (among the rises that end beyond it, if any do): the sizes either side.  Past
    the first cache's reach (its size times AGREE_FACTOR, as for any step it explains),
    what rises is the next cache's share running out (model 207, the L2's climb to memory
    with no L3 shelf: 140 -> 299 cycles from 4.8 to 5.8 MiB, where the shelf ended on other
    days).  Not past its size alone: the L2's own climb runs on beyond it (model 167: 66 ->
    104 cycles from 2 to 2.4 MiB, as steep as that run's L3 cliff at 5.7-6.7 MiB).  The
    rise that crosses `above` counts: a climb can reach memory soon after it (model 207:
    178 -> 287 cycles from 2.9 to 3.4 MiB, the climb's last rise; steeper but the L2's, 65
    -> 128 from 1.4 to 1.7 MiB)."""
    rises = [(math.log(b[1] / a[1]) / math.log(b[0] / a[0]), a[0], b[0]) for a, b in zip(ramp, ramp[1:])]
    past = [r for r in rises if r[2] > above]
    return max(past or rises)[1:]


def classify(edge: float, upper: float | None, matched: list[dict], keeps: bool | None, os_caches: list[dict],
             to_memory: bool, at_memory: bool) -> tuple[str, list[dict]]:
    """The cause of one step (see the module's docstring) and the candidates that say so."""
    caches = [c for c in matched if c["kind"] == "cache"]
    tlbs = [c for c in matched if c["kind"] == "TLB"]
    if not caches and (measured := [t for t in tlbs if t["rise"] is not None]):
        return "TLB", measured  # the page-stride chase ran out of it here: huge pages keeping the step do not undo that
    if tlbs and (keeps is False or not caches):
        if keeps is not True:
            return "TLB", tlbs
        tlbs = []  # huge pages keep the step: it is no TLB's
    if caches and tlbs and keeps is None:
        return "capacity or TLB", caches + tlbs  # no huge-page curve to tell them apart
    if keeps is False:
        return "TLB", caches
    # A step to memory's latency has run out of every cache: one reported beyond the step's
    # end is shared, and this process gets less of it than its size.
    larger = [c for c in data_caches(os_caches) if c["size_bytes"] > (upper or edge) * AGREE_FACTOR]
    last = [{"kind": "cache", "name": larger[-1]["name"], "bytes": larger[-1]["size_bytes"]}] if to_memory and larger else []
    if caches:
        # A cache's climb that runs on to memory's latency (at_memory: the level it reaches
        # is no cache's, not merely the sweep's last): the last cache's share ran out on the
        # way (model 207 on a busy day: the L2's climb from 1.2 MiB to 8 MiB, its L3 shelf
        # too short to be a level, the cliff to memory at 4.8-5.8 MiB inside the climb).
        return (CAPACITY_THEN_SHARE, caches + last) if last and at_memory else ("capacity", caches)
    return ("effective capacity", last) if last else ("unexplained", [])


def explain_steps(line_levels: list[dict], os_caches: list[dict], tlbs: list[dict] = (),
                  huge_levels: list[dict] | None = None, stride_levels: list[dict] | None = None) -> list[dict]:
    """One entry per step of the 4 KiB line chase: where, how much, what explains it."""
    measured, _ = pagestride_reaches(stride_levels or [], os_caches)
    cands = candidates(os_caches, list(tlbs), measured)
    tried = (("the page-stride chase measured no TLB reach here" if not measured else
              "the page-stride chase's reaches (" + ", ".join(human_bytes(t["reach_bytes"]) for t in measured)
              + ") lie elsewhere") if stride_levels is not None
             else "no page-stride chase was measured (cpulab memlat measures one unless --mode says otherwise)")

    def explaining(lv: dict, after: dict) -> list[dict]:
        return [c for c in cands if near_step(lv["size_bytes"], lv["next_bytes"], c["bytes"])
                and (c.get("rise") is None or c["rise"] >= TLB_SHARE * (_latency(after) - _latency(lv)))]

    # (the level the step leaves, the level it reaches, the candidates): one cache runs
    # out once, so steps in a row that only that cache explains are one gradual step whose
    # ramp paused on the way (Zen 4 guest: its L2's ramp from 512 KiB to 1.4 MiB held at
    # 40 cycles from 724 KiB to 1.2 MiB in one run of ten): the first step's level, left
    # where the last step reaches its next level.
    spans: list[tuple[dict, dict, list[dict]]] = []
    for lv in _closed(line_levels):
        after = line_levels[line_levels.index(lv) + 1]
        matched = explaining(lv, after)
        if spans and len(matched) == 1 and matched[0]["kind"] == "cache" and spans[-1][2] == matched:
            first = spans[-1][0]
            spans[-1] = ({**first, "next_bytes": lv["next_bytes"], "ramp": first["ramp"] + lv["ramp"]}, after, matched)
        else:
            spans.append((lv, after, matched))
    kept = [_huge_keeps(lv["size_bytes"], lv["next_bytes"], math.log(_latency(after) / _latency(lv)), huge_levels)
            for lv, after, _ in spans]
    out = []
    for i, (lv, after, matched) in enumerate(spans):
        edge, upper, keeps = lv["size_bytes"], lv["next_bytes"], kept[i]
        # The step to memory: the last one, or one followed only by steps that huge pages
        # remove (a TLB's reach past the cache that ran out: the Zen 4 guest's 3,072-entry
        # L2 TLB at 12 MiB, a step of its own in one run of five, its L3 share 5.7 MiB)
        to_memory = all(k is False for k in kept[i + 1:])
        at_memory = after.get("matches") == "memory" or after["ns"] >= MEMORY_NS
        cause, matched = classify(edge, upper, matched, keeps, os_caches, to_memory, at_memory)
        nearest = sorted(cands, key=lambda c: abs(math.log(edge / c["bytes"])))[:2]
        begins = edge / matched[0]["bytes"] if _gradual(edge, upper) and cause in ("capacity", CAPACITY_THEN_SHARE) \
            else None
        share = _steepest(lv["ramp"], matched[0]["bytes"] * AGREE_FACTOR) if cause == CAPACITY_THEN_SHARE else \
            (edge, upper) if cause == "effective capacity" else None
        out.append({"edge_bytes": edge, "next_bytes": upper, "from_ns": lv["ns"], "to_ns": after["ns"],
                    "from_cycles": lv["cycles"], "to_cycles": after["cycles"], "cause": cause,
                    "matches": [c["name"] for c in matched], "nearest": [c["name"] for c in nearest],
                    "huge_pages_keep_it": keeps, "tried": tried, "begins_at_share": begins,
                    "share_bytes": share and share[0], "share_to_bytes": share and share[1]})
    return out


CAUSE_WORDS = {
    "capacity": "capacity of {matches}.",
    CAPACITY_THEN_SHARE: "capacity of {first}, then effective capacity: the climb ends at memory's latency, so this "
                         "process ran out of the {last} reported too, at about {share}, where the climb rises most "
                         "steeply past the {first}'s reach ({share} to {share_to}): a cache shared with other tenants or cores.",
    "effective capacity": "effective capacity: this process gets about {edge} of the {matches} reported "
                          "(a cache shared with other tenants or cores).",
    "TLB": "TLB reach ({matches}).",
    "capacity or TLB": "capacity or TLB reach ({matches}): a huge-page curve would tell which.",
    "unexplained": "unexplained; nearest candidates {nearest}; {tried}.",
}


# What a step that stays with huge pages says, where that does not rule a TLB out.
HUGE_KEEPS = {
    "TLB": " With huge pages the step stays: they do not widen this TLB's reach here (under a hypervisor that "
           "maps the guest's memory in 4 KiB pages, every TLB entry covers 4 KiB).",
    "unexplained": " With huge pages the step stays: no TLB's, unless huge pages do not widen the reach here "
                   "(under a hypervisor that maps the guest's memory in 4 KiB pages they do not).",
}


BLIND = (" With huge pages the step stays, as the TLB's step at {tlb} does: they widen no TLB's reach here, "
         "so that rules no TLB out.")


# Core clocks (cycles over ns) on either side of a step that differ by more than this are
# said: the host moved the clock between the levels, so their ns do not compare.  A few
# percent is the clock's spread between processes (the stored Zen 3 and model 207 runs:
# 3-4%); the fall under a stalling chase on Xeon model 167 is 14%.
CLOCK_MOVED = 1.10


def _clock_moved(step: dict) -> str:
    """A sentence when the core ran at another clock on each side of the step.  On Xeon
    model 167's guest the clock fell from 4.09 to 3.59 GHz about 10 ms into a chase of
    L2 hits (the host lowers the clock of a core that mostly stalls) but not in one that
    also misses the L1 TLB: across that step 4.5 -> 5.7 ns (+26%) was 16 -> 23 cycles (+44%)."""
    before, after = step["from_cycles"] / step["from_ns"], step["to_cycles"] / step["to_ns"]
    if max(before, after) <= CLOCK_MOVED * min(before, after):
        return ""
    return (f" The core ran at {before:.2f} GHz before the step and {after:.2f} after (the host moved the clock "
            "between the levels): compare them in cycles, not ns.")


def describe_steps(steps: list[dict], tlb_note: str = "") -> str:
    """The steps in words, each with its evidence."""
    if not steps:
        return "No steps found in the 4 KiB line chase."
    lines = [tlb_note] if tlb_note else []
    # A measured TLB step that huge pages keep shows they widen no reach on this machine:
    # then a step they keep is no evidence against a TLB (model 207's guest: its L1d, L2
    # and L3 steps each read "not a TLB's" beside the TLB step they had kept too).
    blind = next((human_bytes(s["edge_bytes"]) for s in steps if s["cause"] == "TLB" and s["huge_pages_keep_it"]), "")
    for s in steps:
        where = human_bytes(s["edge_bytes"])
        if _gradual(s["edge_bytes"], s["next_bytes"]):
            where += f" (gradual, to {human_bytes(s['next_bytes'])})"
        lat, clock = f"{s['from_ns']:.1f} -> {s['to_ns']:.1f} ns", ""
        if not (math.isnan(s["from_cycles"]) or math.isnan(s["to_cycles"])):
            lat += f" ({s['from_cycles']:.0f} -> {s['to_cycles']:.0f} cycles)"
            clock = _clock_moved(s)
        text = f"Step at {where}, {lat}: "
        text += CAUSE_WORDS[s["cause"]].format(matches=", ".join(s["matches"]) or "no size candidate",
                                               nearest=", ".join(s["nearest"]), edge=where,
                                               tried=s.get("tried", ""), first=(s["matches"] or [""])[0],
                                               last=(s["matches"] or [""])[-1],
                                               share=human_bytes(s.get("share_bytes") or s["edge_bytes"]),
                                               share_to=human_bytes(s.get("share_to_bytes") or s["edge_bytes"]))
        if s.get("begins_at_share") and s["begins_at_share"] < 1:
            text += (f" The climb begins at {s['begins_at_share']:.2f} of the {s['matches'][0]}: with pages placed arbitrarily,"
                     " some of its sets fill before the cache does.")
        if s["huge_pages_keep_it"] is True:
            text += HUGE_KEEPS.get(s["cause"], BLIND.format(tlb=blind) if blind else
                                  " With huge pages the step stays: not a TLB's.")
        elif s["huge_pages_keep_it"] is False:
            text += " With huge pages it is gone: the TLB's."
        text += clock
        lines.append(text)
    return "\n".join(lines)


def explain_curves(curves: list[dict], os_caches: list[dict], tlbs: list[dict], tlb_note: str = "") -> dict | None:
    """explain_steps over the curves of a memlat run (None without a 4 KiB line chase)."""
    line = _series(curves, "random", ("4k",))
    if not line:
        return None
    huge = _series(curves, "random", ("thp", "huge"))
    stride = _series(curves, "pagestride", ("4k",))
    steps = explain_steps(line["levels"], os_caches, tlbs, huge["levels"] if huge else None,
                          stride["levels"] if stride else None)
    measured, cache_steps = pagestride_reaches(stride["levels"] if stride else [], os_caches)
    return {"steps": steps, "tlbs": tlbs, "measured_tlbs": measured, "pagestride_cache_steps": cache_steps,
            "description": describe_steps(steps, tlb_note)}
