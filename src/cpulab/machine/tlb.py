"""TLB geometry from CPUID, and what each TLB reaches (entries x page size).

Sources, best first: the raw CPUID registers (/dev/cpu/0/cpuid, the kernel's cpuid
driver: needs root and the module loaded), then AMD's "TLB size" line in /proc/cpuinfo.
AMD describes its TLBs in extended leaves 0x80000005 (L1), 0x80000006 (L2) and
0x80000019 (1 GiB pages); Intel in leaf 0x18 (one subleaf per TLB), or in the leaf 2
descriptor bytes on older cores, where descriptor 0xFE means "see leaf 0x18".
The parsers are pure functions of the register values, so fixtures test them.
"""
from __future__ import annotations

import re
from pathlib import Path

from cpulab.params import human_bytes

KIB, MIB, GIB = 1024, 1024**2, 1024**3
CPUID_DEV = Path("/dev/cpu/0/cpuid")


def tlb(level: int, kind: str, page_bytes: int, entries: int, ways: int | None, source: str) -> dict:
    name = f"L{level} {kind} TLB {human_bytes(page_bytes)} pages, {entries} entries"
    return {"level": level, "type": kind, "page_bytes": page_bytes, "entries": entries, "ways": ways,
            "reach_bytes": entries * page_bytes, "name": name, "source": source}


def _bits(v: int, hi: int, lo: int) -> int:
    return (v >> lo) & ((1 << (hi - lo + 1)) - 1)


def parse_amd(regs: dict[int, tuple[int, int, int, int]]) -> list[dict]:
    """TLBs from AMD leaves {leaf: (eax, ebx, ecx, edx)}; data and unified only (loads)."""
    out = []
    src = "cpuid 0x8000000{5,6,19}"
    if r := regs.get(0x80000005):
        # L1: 8-bit entry counts; EAX covers 2 MiB pages (4 MiB ones take two), EBX 4 KiB.
        for reg, page in ((r[1], 4 * KIB), (r[0], 2 * MIB)):
            if n := _bits(reg, 23, 16):
                out.append(tlb(1, "data", page, n, _bits(reg, 31, 24) or None, src))
    for leaf, pairs in ((0x80000006, ((1, 4 * KIB), (0, 2 * MIB))), (0x80000019, ((0, GIB), (1, GIB)))):
        if r := regs.get(leaf):
            for idx, page in pairs:
                level = 2 if leaf == 0x80000006 or idx == 1 else 1
                if n := _bits(r[idx], 27, 16):
                    out.append(tlb(level, "data", page, n, _bits(r[idx], 31, 28) or None, src))
    return sorted(out, key=lambda t: (t["level"], t["page_bytes"]))


INTEL_18_TYPES = {1: "data", 3: "unified", 4: "load", 5: "store"}  # 2 = instruction: not on a load's path
INTEL_18_PAGES = ((0, 4 * KIB), (1, 2 * MIB), (2, 4 * MIB), (3, GIB))


def parse_intel_18(subleaves: list[tuple[int, int, int, int]]) -> list[dict]:
    """TLBs from Intel leaf 0x18 subleaves [(eax, ebx, ecx, edx), ...]: EDX[4:0] type,
    EDX[7:5] level, EBX[3:0] page sizes, EBX[31:16] ways, ECX sets; entries = ways x sets."""
    out = []
    for eax, ebx, ecx, edx in subleaves:
        kind = INTEL_18_TYPES.get(_bits(edx, 4, 0))
        if not kind:
            continue
        ways, sets = _bits(ebx, 31, 16), ecx
        if edx & (1 << 8):  # fully associative: ways is the entry count
            sets = 1
        for bit, page in INTEL_18_PAGES:
            if ebx & (1 << bit) and ways * sets:
                out.append(tlb(_bits(edx, 7, 5), kind, page, ways * sets, ways, "cpuid 0x18"))
    return sorted(out, key=lambda t: (t["level"], t["page_bytes"], t["type"]))


# Leaf 2 descriptors for data and shared TLBs (Intel SDM vol. 2A, table 3-12), a subset:
# descriptor -> [(level, type, page, entries, ways)].
INTEL_2 = {
    0x03: [(1, "data", 4 * KIB, 64, 4)], 0x04: [(1, "data", 4 * MIB, 8, 4)],
    0x5A: [(1, "data", 2 * MIB, 32, 4)], 0x5B: [(1, "data", 4 * KIB, 64, None)],
    0x5C: [(1, "data", 4 * KIB, 128, None)], 0x5D: [(1, "data", 4 * KIB, 256, None)],
    0x63: [(1, "data", 2 * MIB, 32, 4), (1, "data", GIB, 4, 4)], 0x64: [(1, "data", 4 * KIB, 512, 4)],
    0xA0: [(1, "data", 4 * KIB, 32, None)], 0xB3: [(1, "data", 4 * KIB, 128, 4)],
    0xB4: [(1, "data", 4 * KIB, 256, 4)], 0xBA: [(1, "data", 4 * KIB, 64, 4)],
    0xC0: [(1, "data", 4 * KIB, 8, 4)], 0xC1: [(2, "unified", 4 * KIB, 1024, 8), (2, "unified", 2 * MIB, 1024, 8)],
    0xC2: [(1, "data", 4 * KIB, 16, 4), (1, "data", 2 * MIB, 16, 4)],
    0xC3: [(2, "unified", 4 * KIB, 1536, 6), (2, "unified", 2 * MIB, 1536, 6), (2, "unified", GIB, 16, 4)],
    0xCA: [(2, "unified", 4 * KIB, 512, 4)],
}


def leaf2_descriptors(regs: tuple[int, int, int, int]) -> list[int]:
    """The descriptor bytes of leaf 2: AL is a count, a register with bit 31 set holds none."""
    out = []
    for i, r in enumerate(regs):
        if r & (1 << 31):
            continue
        out += [b for k, b in enumerate(r.to_bytes(4, "little")) if b and not (i == 0 and k == 0)]
    return out


def parse_intel_2(regs: tuple[int, int, int, int]) -> tuple[list[dict], bool]:
    """TLBs from leaf 2, and whether it defers to leaf 0x18 (descriptor 0xFE)."""
    descs = leaf2_descriptors(regs)
    out = [tlb(*t, source="cpuid 2") for d in descs for t in INTEL_2.get(d, [])]
    return sorted(out, key=lambda t: (t["level"], t["page_bytes"])), 0xFE in descs


def parse_cpuinfo_tlb(text: str) -> list[dict]:
    """AMD's /proc/cpuinfo 'TLB size : 3072 4K pages' (the L2 TLB, all page sizes)."""
    m = re.search(r"^TLB size\s*:\s*(\d+)\s+4K pages", text, re.M)
    return [tlb(2, "unified", 4 * KIB, int(m.group(1)), None, "/proc/cpuinfo")] if m else []


def _read_cpuid(dev: Path, leaf: int, sub: int = 0) -> tuple[int, int, int, int]:
    with open(dev, "rb") as f:
        f.seek(leaf | (sub << 32))
        b = f.read(16)
    return tuple(int.from_bytes(b[i:i + 4], "little") for i in range(0, 16, 4))  # type: ignore[return-value]


def read_tlbs(dev: Path = CPUID_DEV, cpuinfo_text: str = "") -> tuple[list[dict], str]:
    """(TLBs, a sentence on where they came from or why none are known)."""
    try:
        vendor = _read_cpuid(dev, 0)
    except OSError as e:
        found = parse_cpuinfo_tlb(cpuinfo_text)
        return found, ("from /proc/cpuinfo" if found else
                       f"TLB geometry unknown: cannot read {dev} ({e.strerror}; needs root and the cpuid module)")
    name = b"".join(r.to_bytes(4, "little") for r in (vendor[1], vendor[3], vendor[2])).decode(errors="replace")
    if name in ("AuthenticAMD", "HygonGenuine"):
        top = _read_cpuid(dev, 0x80000000)[0]
        found = parse_amd({leaf: _read_cpuid(dev, leaf) for leaf in (0x80000005, 0x80000006, 0x80000019)
                           if leaf <= top})
        return found, "from CPUID leaves 0x80000005/6/19" if found else "CPUID reports no TLBs"
    found: list[dict] = []
    via18 = vendor[0] >= 0x18
    if vendor[0] >= 2:
        found, via18 = parse_intel_2(_read_cpuid(dev, 2))
    if via18 and vendor[0] >= 0x18:
        subs = [_read_cpuid(dev, 0x18, 0)]
        subs += [_read_cpuid(dev, 0x18, s) for s in range(1, min(subs[0][0], 31) + 1)]
        found = parse_intel_18(subs) or found
        if not found:
            return [], ("CPUID reports no TLBs (leaf 2 defers to leaf 0x18, which is empty: "
                        "a hypervisor hides it); the page-stride chase measures the reach instead")
    return found, ("from CPUID leaf 0x18" if via18 else "from CPUID leaf 2") if found else "CPUID reports no TLBs"


# Data TLBs of known cores, for guests whose CPUID hides them (vendors' optimisation
# manuals; the Zen 3 and Zen 4 rows agree with what their guests' CPUID leaves report):
# (vendor, family, first model, last model) -> (name, L1 dTLB 4 KiB entries, L2 TLB 4 KiB entries)
KNOWN_CORES = [
    ("AuthenticAMD", 0x17, 0x30, 0x7F, "Zen 2", 64, 2048),
    ("AuthenticAMD", 0x19, 0x00, 0x0F, "Zen 3", 64, 2048),
    ("AuthenticAMD", 0x19, 0x20, 0x5F, "Zen 3", 64, 2048),
    ("AuthenticAMD", 0x19, 0x10, 0x1F, "Zen 4", 72, 3072),
    ("AuthenticAMD", 0x19, 0x60, 0xAF, "Zen 4", 72, 3072),
    ("GenuineIntel", 6, 0x55, 0x55, "Skylake-SP", 64, 1536),
    ("GenuineIntel", 6, 0x6A, 0x6C, "Ice Lake-SP", 64, 2048),
    ("GenuineIntel", 6, 0x8F, 0x8F, "Sapphire Rapids", 64, 2048),
]


def known_core_tlbs(vendor: str, family: int, model: int) -> tuple[list[dict], str]:
    """The 4 KiB data TLBs of a known core, labelled as coming from this table."""
    for v, fam, lo, hi, name, l1, l2 in KNOWN_CORES:
        if (v, fam) == (vendor, family) and lo <= model <= hi:
            source = f"from the table of known cores ({name}), not from this machine's CPUID"
            return [tlb(1, "data", 4096, l1, None, source), tlb(2, "data", 4096, l2, None, source)], source
    return [], ""
