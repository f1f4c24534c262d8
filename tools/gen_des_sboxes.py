#!/usr/bin/env python3
"""Derive boolean circuits for the eight DES S-boxes and write them as a C header.

    python3 tools/gen_des_sboxes.py -o src/cpulab/kernels/des_sboxes_bitslice.h
    python3 tools/gen_des_sboxes.py --search 40      # half an hour: prints BINARY_ORDERS and
                                                     # RECORDED anew

The S-box tables are read from src/cpulab/kernels/des_tables.h (FIPS 46-3), the one
place they are written down.  Each S-box is four boolean functions of six inputs; a
function is handled as its 64-bit truth table (bit x = value on input x, where input
bit a1 = b1, the most significant of the six, ... a6 = b6).

Method: a decomposition on one input variable at a time, in an order searched per S-box
(all 720 orders, 25 s: the binary form's best are recorded below, BINARY_ORDERS, and
replayed; the four outputs share the order, so they share sub-functions), with
hash-consing: a sub-function whose truth table (or its complement) is already built is
reused, never built twice.

* Binary form (AND, OR, XOR, ANDN = a & ~b, NOT: what SSE2/AVX2 and plain 64-bit words
  have).  A function f splits on x into cofactors f0 = f|x=0, f1 = f|x=1 and their
  difference d = f0 ^ f1; three expansions are tried at each node and the cheapest
  (counting already-built pieces as free) is taken:
      Shannon         f = (f0 & ~x) | (f1 & x)   3 gates + f0 + f1
      positive Davio  f = f0 ^ (x & d)           2 gates + f0 + d
      negative Davio  f = f1 ^ (d & ~x)          2 gates + f1 + d
  with the one-gate special cases (d all ones: f0 ^ x; f0 = 0: x & f1; ...).  A function
  of at most two inputs is one gate (two if it needs a NOT).  Before any split, a
  function that is one gate on two values built already (any two: inputs, cofactors of
  other outputs) is made so (one_gate).
* Ternary form (AVX-512 vpternlog: any function of three vectors in one instruction).
  A function of up to three values built already (inputs or any earlier sub-function) is
  one TERN on them, or of two, one AND/ANDN/OR/XOR (one_operation); any other splits on
  x into x ? f1 : f0, f0 ^ (x & d) or f1 ^ (~x & d), each one TERN, taking the one whose
  parts are built already (up to complement, which a TERN reads for free).
  Orders are ranked by operations plus the copies the compiler must make before a TERN
  whose operands all live on.  `--search TRIALS` also tries random choices of split
  form; the circuits it found are recorded below (RECORDED) and replayed.

The script checks every circuit against its table on all 64 inputs before writing, and
tests/test_des.py compiles the emitted header and checks it again.
"""
from __future__ import annotations

import argparse
import itertools
import random
import re
import sys
from functools import lru_cache
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
TABLES = ROOT / "src" / "cpulab" / "kernels" / "des_tables.h"
FULL = (1 << 64) - 1
# VAR[i]: truth table of input a(i+1); a1 is the most significant bit of the input.
VAR = [sum(1 << x for x in range(64) if (x >> (5 - i)) & 1) for i in range(6)]
VAR_NAME = {VAR[i]: f"a{i + 1}" for i in range(6)}


def read_sboxes(path: Path = TABLES) -> list[list[int]]:
    text = path.read_text()
    m = re.search(r"des_sbox\[8\]\[64\]\s*=\s*\{(.*?)\};", text, re.S)
    if not m:
        raise SystemExit(f"{path}: des_sbox[8][64] not found")
    nums = [int(v) for v in re.findall(r"\d+", m.group(1))]
    if len(nums) != 512:
        raise SystemExit(f"{path}: des_sbox has {len(nums)} entries, want 512")
    boxes = [nums[64 * s:64 * s + 64] for s in range(8)]
    for s, box in enumerate(boxes):
        for row in range(4):
            if sorted(box[16 * row:16 * row + 16]) != list(range(16)):
                raise SystemExit(f"S{s + 1} row {row} is not a permutation of 0..15")
    return boxes


def sbox_value(box: list[int], x: int) -> int:
    """S-box output for the 6-bit input x = b1..b6 (row b1b6, column b2..b5)."""
    return box[16 * (((x >> 4) & 2) | (x & 1)) + ((x >> 1) & 15)]


def output_tt(box: list[int], o: int) -> int:
    """Truth table of output bit o (0 = the most significant of the four)."""
    return sum(1 << x for x in range(64) if (sbox_value(box, x) >> (3 - o)) & 1)


def cofactor(f: int, i: int, v: int) -> int:
    """f with input i fixed to v, as a truth table over all 64 inputs."""
    shift = 1 << (5 - i)
    if v:
        sel = f & VAR[i]
        return sel | (sel >> shift)
    sel = f & ~VAR[i] & FULL
    return sel | (sel << shift)


@lru_cache(maxsize=None)
def support(f: int) -> tuple[int, ...]:
    return tuple(i for i in range(6) if cofactor(f, i, 0) != cofactor(f, i, 1))


BINOPS = {
    "AND": lambda a, b: a & b,
    "OR": lambda a, b: a | b,
    "XOR": lambda a, b: a ^ b,
    "ANDN": lambda a, b: a & ~b & FULL,
}


class Circuit:
    """Straight-line binary code with hash-consing on truth tables."""

    def __init__(self):
        self.name = dict(VAR_NAME)
        self.lines: list[str] = []
        self.ops = 0

    def have(self, f: int) -> str | None:
        return self.name.get(f)

    def emit(self, f: int, expr: str) -> str:
        n = f"t{self.ops}"
        self.ops += 1
        self.lines.append(f"DES_V {n} = {expr};")
        self.name[f] = n
        return n

    def op(self, kind: str, a: int, b: int) -> str:
        f = BINOPS[kind](a, b)
        return self.have(f) or self.emit(f, f"DES_{kind}({self.get(a)}, {self.get(b)})")

    def get(self, f: int) -> str:
        n = self.have(f)
        if n is None:
            raise AssertionError("operand not built")
        return n


# ---- binary form ----------------------------------------------------------------------

def leaf2(f: int) -> list[tuple[str, int, int, bool]]:
    """Ways to make a function of <= 2 inputs: (op, a, b, then NOT)."""
    sup = support(f)
    cands = [VAR[i] for i in sup]
    ways = []
    for kind, fn in BINOPS.items():
        for a, b in itertools.permutations(cands, 2):
            if fn(a, b) == f:
                ways.append((kind, a, b, False))
            if fn(a, b) ^ FULL == f:
                ways.append((kind, a, b, True))
    return ways


def binary_cost(f: int, order: tuple[int, ...], built) -> int:
    """Gates to build f with nothing shared except what `built` already holds."""
    if f in built:
        return 0
    if f ^ FULL in built:
        return 1
    return _binary_cost(f, order)


@lru_cache(maxsize=None)
def _binary_cost(f: int, order: tuple[int, ...]) -> int:
    if f in VAR_NAME or f in (0, FULL):
        return 0
    if f ^ FULL in VAR_NAME:
        return 1
    sup = support(f)
    if len(sup) <= 2:
        return min(1 + w[3] for w in leaf2(f))
    return min(c for c, _ in binary_options(f, order, lambda g: _binary_cost(g, order)))


def binary_options(f: int, order, cost):
    """(cost, recipe) for each expansion of f on its first split variable in `order`."""
    x = next(i for i in order if i in support(f))
    f0, f1 = cofactor(f, x, 0), cofactor(f, x, 1)
    d = f0 ^ f1
    X = VAR[x]
    opts = []
    if d == FULL:
        opts.append((1 + cost(f0), ("XOR", f0, X)))
    if f0 == 0:
        opts.append((1 + cost(f1), ("AND", X, f1)))
    if f1 == 0:
        opts.append((1 + cost(f0), ("ANDN", f0, X)))
    if f1 == FULL:
        opts.append((1 + cost(f0), ("OR", X, f0)))
    if f0 == FULL:  # f = ~x | f1 = ~(x & ~f1)
        opts.append((2 + cost(f1), ("ORNOT", f1, X)))
    if opts:  # a cofactor is constant or d is all ones: the one-gate form is best
        return opts
    opts.append((3 + cost(f0) + cost(f1), ("SHANNON", f0, f1, X)))
    opts.append((2 + cost(f0) + cost(d), ("PDAVIO", f0, d, X)))
    opts.append((2 + cost(f1) + cost(d), ("NDAVIO", f1, d, X)))
    return opts


def one_gate(c: Circuit, f: int) -> tuple[str, int, int] | None:
    """(kind, a, b): f is one binary operation on two values already built, or None; of
    each kind the first pair in build order (a first, then b).  Only values that can take
    part are paired: a & b = f needs both to cover f, a | b = f both inside it, a & ~b = f
    an a that covers f and a b outside it, and a ^ b = f the one b = a ^ f (a few of ~100
    values: the search makes 460k calls)."""
    covers, inside, outside, xor = [], [], [], None
    for v in c.name:
        if v & f == f:
            covers.append(v)
        if v | f == f:
            inside.append(v)
        if v & f == 0:
            outside.append(v)
        if xor is None and v ^ f in c.name:
            xor = v
    pairs = {"AND": (covers, covers), "OR": (inside, inside), "ANDN": (covers, outside)}
    for kind, fn in BINOPS.items():  # in this order: another would change the circuits
        if kind == "XOR":
            if xor is not None:
                return kind, xor, xor ^ f
            continue
        rows, cols = pairs[kind]
        for a in rows:
            for b in cols:
                if fn(a, b) == f:
                    return kind, a, b
    return None


def binary_build(c: Circuit, f: int, order) -> str:
    n = c.have(f)
    if n:
        return n
    if (gate := one_gate(c, f)) is not None:
        return c.op(*gate)
    if f ^ FULL in c.name:
        return c.emit(f, f"DES_NOT({c.name[f ^ FULL]})")
    if f == 0 or f == FULL:
        raise AssertionError("constant S-box sub-function")
    if len(support(f)) <= 2:
        kind, a, b, neg = min(leaf2(f), key=lambda w: w[3])
        g = c.op(kind, a, b)
        return c.emit(f, f"DES_NOT({g})") if neg else g
    _, r = min(binary_options(f, order, lambda g: binary_cost(g, order, c.name)), key=lambda o: o[0])
    kind = r[0]
    for g in r[1:2] if kind == "ORNOT" else r[1:3]:  # the recipe's parts (an input is built)
        binary_build(c, g, order)
    # A part's parts may have made f, or something f is one gate of.
    if (n := c.have(f)) or (gate := one_gate(c, f)) is not None:
        return n or c.op(*gate)
    if kind in BINOPS:
        return c.op(kind, r[1], r[2])
    if kind == "ORNOT":
        _, f1, X = r
        return c.emit(f, f"DES_NOT({c.op('ANDN', X, f1)})")
    if kind == "SHANNON":
        _, f0, f1, X = r
        c.op("ANDN", f0, X)
        c.op("AND", f1, X)
        return c.op("OR", f0 & ~X & FULL, f1 & X)
    if kind == "PDAVIO":
        _, f0, d, X = r
        c.op("AND", X, d)
        return c.op("XOR", f0, X & d)
    _, f1, d, X = r  # NDAVIO
    c.op("ANDN", d, X)
    return c.op("XOR", f1, d & ~X & FULL)


# ---- ternary form ---------------------------------------------------------------------
#
# vpternlog computes any function of three vectors, so a consumer can read any of its
# operands complemented for free (the immediate absorbs it): sub-functions are shared up
# to complement.  But it overwrites its first operand, and when all three are still needed
# afterwards the compiler copies one first; on Zen 4 that zmm copy takes a vector pipe
# like the operation itself (bench/kernel_bounds.py measures it).  So the search counts
# operations plus copies, and what depends on two values only is a non-destructive AND,
# ANDN, OR or XOR.

def canon(f: int) -> int:
    """One key for a function and its complement."""
    return min(f, f ^ FULL)


def imm_of(f: int, operands: list[int]) -> int:
    """The vpternlog immediate that makes f of three operands' truth tables."""
    imm, seen = 0, {}
    for x in range(64):
        k = sum(((v >> x) & 1) << (2 - j) for j, v in enumerate(operands))
        bit = (f >> x) & 1
        if seen.setdefault(k, bit) != bit:
            raise AssertionError("f is not a function of these operands")
        imm |= bit << k
    return imm


class TernaryCircuit:
    """Straight-line code of TERN and binary operations, shared up to complement: `have`
    maps canon(f) to the name and the function (f or its complement) already built."""

    def __init__(self):
        self.have = {canon(v): (f"a{i + 1}", v) for i, v in enumerate(VAR)}
        self.lines: list[str] = []
        self.ops = 0

    def node(self, f: int, operands: list[tuple[str, int]]) -> str:
        """f (or its complement) from up to three built operands."""
        if canon(f) in self.have:
            return self.have[canon(f)][0]
        operands = [o for o in dict.fromkeys(operands) if o[1] not in (0, FULL)]
        name = f"t{self.ops}"
        if len(operands) == 2:
            (na, a), (nb, b) = operands
            kind, x, y, value = next((k, x, y, fn(vx, vy)) for k, fn in BINOPS.items()
                                     for (x, vx), (y, vy) in (((na, a), (nb, b)), ((nb, b), (na, a)))
                                     if canon(fn(vx, vy)) == canon(f))
            expr = f"DES_{kind}({x}, {y})"
        else:
            assert len(operands) == 3, "a function of one value is that value or its complement"
            value = f
            expr = f"DES_TERN({', '.join(n for n, _ in operands)}, 0x{imm_of(f, [v for _, v in operands]):02x})"
        self.ops += 1
        self.lines.append(f"DES_V {name} = {expr};")
        self.have[canon(f)] = (name, value)
        return name

    def operand(self, f: int) -> tuple[str, int]:
        return self.have[canon(f)]


def bits(v: int) -> np.ndarray:
    """A truth table as 64 bits, input 0 first."""
    return (np.uint64(v) >> np.arange(64, dtype=np.uint64)) & np.uint64(1)


def one_operation(c: TernaryCircuit, f: int) -> list[tuple[str, int]] | None:
    """Two or three values already built (inputs included) of which f is a function, so
    f is one operation on them; pairs are tried first, then triples, in the order they
    were built; None if there are none.  f is a function of u, v, w when no combination
    of their bits occurs both where f is 1 and where it is 0."""
    built = list(c.have.values())
    table = np.array([bits(v) for _, v in built], dtype=np.uint16)  # value x input
    ones = bits(f).astype(bool)
    for k in (2, 3):
        sets = np.array(list(itertools.combinations(range(len(built)), k)))
        code = np.zeros((len(sets), 64), dtype=np.uint16)
        for j in range(k):
            code = code << 1 | table[sets[:, j]]
        seen = np.uint16(1) << code  # each input's combination, one bit of 8
        at_one = np.bitwise_or.reduce(np.where(ones, seen, 0), axis=1)
        at_zero = np.bitwise_or.reduce(np.where(ones, 0, seen), axis=1)
        fits = np.flatnonzero((at_one & at_zero) == 0)
        if len(fits):
            return [built[i] for i in sets[fits[0]]]
    return None


def ternary_build(c: TernaryCircuit, f: int, order, pick) -> str:
    """f as one operation on values already built if it can be (one_operation), else by
    splitting on the first input of `order` it depends on, as a multiplexer of its
    cofactors (f0, f1) or as f0 ^ (x & d) or f1 ^ (~x & d), d = f0 ^ f1: pick(c, options)
    says which (fewest_new, or a recorded search's choice)."""
    if canon(f) in c.have:
        return c.have[canon(f)][0]
    if (operands := one_operation(c, f)) is not None:  # always, for f of <= 3 inputs
        return c.node(f, operands)
    x = next(i for i in order if i in support(f))
    f0, f1 = cofactor(f, x, 0), cofactor(f, x, 1)
    options = [(f0, f1), (f0, f0 ^ f1), (f1, f0 ^ f1)]
    parts = options[pick(c, options)]
    for g in parts:
        if g not in (0, FULL):
            ternary_build(c, g, order, pick)
    return c.node(f, [c.operand(VAR[x])] + [c.operand(g) if g not in (0, FULL) else ("", g) for g in parts])


def fewest_new(c: TernaryCircuit, options) -> int:
    """The option whose parts are built already, or else are the smallest."""
    return min(range(len(options)), key=lambda k: sum(0 if g in (0, FULL) or canon(g) in c.have
                                                      else len(support(g)) for g in options[k]))


def ternary_circuit(box: list[int], order, build_order=(0, 1, 2, 3), pick=fewest_new):
    """The S-box's four outputs in one circuit, built in build_order; each output is
    (name, complemented)."""
    c = TernaryCircuit()
    for o in build_order:
        ternary_build(c, output_tt(box, o), order, pick)
    return pruned(c, [(c.operand(output_tt(box, o))[0], c.operand(output_tt(box, o))[1] != output_tt(box, o))
                      for o in range(4)])


def replay(choices: str):
    """A pick that makes a recorded search's choices, in order."""
    it = iter(choices)
    return lambda c, options: int(next(it))


def search(box: list[int], trials: int, seed: int, orders: int = 60, eps: float = 0.3):
    """Random choices of split form (each pick at random with probability eps, else
    fewest_new) over the `orders` best split orders, `trials` circuits each in a random
    build order: the cheapest circuit's (cost, order, build order, choices), and the cost
    of the greedy circuit of the best order."""
    rng = random.Random(seed)
    ranked = ranked_orders(box, True)
    best = None
    for _, order, _, _ in ranked[:orders]:
        for _ in range(trials):
            made: list[str] = []

            def pick(c, options):
                k = rng.randrange(len(options)) if rng.random() < eps else fewest_new(c, options)
                made.append(str(k))
                return k
            build_order = tuple(rng.sample(range(4), 4))
            k = cost(*ternary_circuit(box, order, build_order, pick), True)
            if best is None or k < best[0]:
                best = (k, order, build_order, "".join(made))
    return best, ranked[0][0]


def copies(lines: list[str], outs: list[str]) -> int:
    """TERN operations whose first operand is read again later (the compiler copies it)."""
    last = last_uses(lines, outs)
    return sum(1 for i, line in enumerate(lines)
               if (m := re.search(r"DES_TERN\((\w+),", line)) and last[m.group(1)] > i)


def last_uses(lines: list[str], outs: list[str]) -> dict[str, int]:
    last: dict[str, int] = {o: len(lines) for o in outs}  # outputs are read after the body
    for i, line in enumerate(lines):
        for name in re.findall(r"\b(?:a[1-6]|t\d+)\b", line.split("=", 1)[1]):
            last[name] = max(last.get(name, i), i)
    return last


# ---- search, check, emit --------------------------------------------------------------

# The binary form's cheapest split order per S-box, of all 720 (ties: the first in the
# order of itertools.permutations); `--search` finds them anew.
BINARY_ORDERS: dict[int, tuple[int, ...]] = {
    1: (3, 1, 2, 4, 0, 5), 2: (2, 3, 1, 0, 4, 5), 3: (0, 2, 3, 1, 4, 5), 4: (5, 3, 1, 4, 0, 2),
    5: (0, 3, 2, 5, 1, 4), 6: (4, 2, 1, 0, 3, 5), 7: (2, 0, 5, 4, 1, 3), 8: (5, 0, 1, 2, 3, 4),
}
# Ternary S-boxes from a recorded search (--search 40, 2026-11-26): S-box number ->
# (split order, build order of the outputs, the split form picked at each choice: an
# index into ternary_build's options).  Replayed, they give the same circuit without the
# minutes of search; an S-box not listed takes the greedy circuit of its best order.
RECORDED: dict[int, tuple[tuple[int, ...], tuple[int, ...], str]] = {
    1: ((0, 1, 3, 5, 4, 2), (0, 1, 3, 2), "01001000001000110"),  # 45, greedy 49
    2: ((5, 1, 0, 3, 2, 4), (0, 3, 2, 1), "00111100200010201"),  # 40, greedy 42
    3: ((0, 2, 3, 1, 5, 4), (2, 1, 3, 0), "2201000002010100"),  # 40, greedy 44
    4: ((5, 0, 4, 2, 1, 3), (1, 0, 2, 3), "00110102102"),  # 30, greedy 36
    5: ((3, 1, 5, 0, 2, 4), (1, 0, 3, 2), "011212020002011000"),  # 44, greedy 48
    6: ((3, 2, 4, 1, 0, 5), (0, 1, 2, 3), "002021000211210"),  # 40, greedy 44
    7: ((0, 5, 4, 3, 2, 1), (1, 2, 3, 0), "0011010011021100"),  # 40, greedy 44
    8: ((5, 0, 4, 2, 3, 1), (1, 3, 2, 0), "001102022200000"),  # 37, greedy 42
}


def circuit_for(box: list[int], ternary: bool, order):
    """The S-box's four outputs in one circuit; each output is (name, complemented)."""
    if ternary:
        return ternary_circuit(box, order)
    c = Circuit()
    return pruned(c, [(binary_build(c, output_tt(box, o), order), False) for o in range(4)])


def pruned(c, outs: list[tuple[str, bool]]):
    """The circuit without the operations nothing reads (a part built for a split that
    one_gate or one_operation then made without it), renumbered t0, t1, ..."""
    lines = c.lines
    while True:
        read = last_uses(lines, [n for n, _ in outs])
        kept = [line for line in lines if line.split()[1] in read]
        if len(kept) == len(lines):
            break
        lines = kept
    new = {line.split()[1]: f"t{i}" for i, line in enumerate(lines)}
    c.lines = [re.sub(r"\bt\d+\b", lambda m: new[m.group(0)], line) for line in lines]
    c.ops = len(lines)
    return c, [(new.get(n, n), neg) for n, neg in outs]


def cost(c, outs, ternary: bool) -> int:
    return c.ops + (copies(dead_first(c.lines, [n for n, _ in outs]), [n for n, _ in outs]) if ternary else 0)


def best_circuit(box: list[int], ternary: bool, recorded=None):
    """The circuit a recorded search found (binary: its split order; ternary: order,
    build order and choices), or else the cheapest over every split order."""
    if ternary and recorded:
        order, build_order, choices = recorded
        return (*ternary_circuit(box, order, build_order, replay(choices)), order)
    if recorded:
        return (*circuit_for(box, False, recorded), recorded)
    _, order, c, outs = ranked_orders(box, ternary)[0]
    return c, outs, order


def ranked_orders(box: list[int], ternary: bool) -> list[tuple]:
    """Every split order with its circuit, (cost, order, circuit, outputs), cheapest first
    (ties in the order of itertools.permutations)."""
    circuits = ((order, *circuit_for(box, ternary, order)) for order in itertools.permutations(range(6)))
    return sorted(((cost(c, outs, ternary), order, c, outs) for order, c, outs in circuits), key=lambda t: t[0])


def dead_first(lines: list[str], outs: list[str]) -> list[str]:
    """vpternlog writes its first operand: where that operand is used again and another
    one is not, the compiler must copy it first.  So each TERN takes an operand at its
    last use first, its immediate permuted to match."""
    last = last_uses(lines, outs)
    out = []
    for i, line in enumerate(lines):
        m = re.fullmatch(r"DES_V (t\d+) = DES_TERN\((\w+), (\w+), (\w+), 0x([0-9a-f]+)\);", line)
        if m and last[m.group(2)] > i:
            args, imm = list(m.group(2, 3, 4)), int(m.group(5), 16)
            dead = next((k for k in (1, 2) if last[args[k]] == i), None)
            if dead is not None:
                perm = [dead] + [k for k in range(3) if k != dead]  # new position j holds old operand perm[j]
                new = 0
                for x in range(8):  # x: the new operands' bits, (new0 << 2 | new1 << 1 | new2)
                    bits = [(x >> (2 - j)) & 1 for j in range(3)]
                    old = [0, 0, 0]
                    for j in range(3):
                        old[perm[j]] = bits[j]
                    if (imm >> (old[0] << 2 | old[1] << 1 | old[2])) & 1:
                        new |= 1 << x
                line = f"DES_V {m.group(1)} = DES_TERN({', '.join(args[k] for k in perm)}, 0x{new:02x});"
        out.append(line)
    return out


def evaluate(lines: list[str], outs: list[tuple[str, bool]]) -> list[int]:
    """Run the emitted statements on the 64 inputs at once (64-bit truth tables)."""
    env = {f"a{i + 1}": VAR[i] for i in range(6)}
    ops = {
        "DES_AND": lambda a, b: a & b, "DES_OR": lambda a, b: a | b,
        "DES_XOR": lambda a, b: a ^ b, "DES_ANDN": lambda a, b: a & ~b & FULL,
        "DES_NOT": lambda a: a ^ FULL,
        "DES_TERN": lambda a, b, cc, imm: sum(
            ((imm >> ((((a >> x) & 1) << 2) | (((b >> x) & 1) << 1) | ((cc >> x) & 1))) & 1) << x
            for x in range(64)),
    }
    for line in lines:
        m = re.fullmatch(r"DES_V (t\d+) = (\w+)\((.*)\);", line)
        args = [a.strip() for a in m.group(3).split(",")]
        vals = [int(a, 16) if a.startswith("0x") else env[a] for a in args]
        env[m.group(1)] = ops[m.group(2)](*vals)
    return [env[n] ^ (FULL if neg else 0) for n, neg in outs]


def emit_function(s: int, c, outs: list[tuple[str, bool]], order, copied: int | None) -> str:
    body = "\n".join(f"    {line}" for line in c.lines)
    used = set(re.findall(r"\ba[1-6]\b", body))
    unused = "".join(f"    (void)a{i};\n" for i in range(1, 7) if f"a{i}" not in used)
    # an output built complemented: *o ^ ~n, the vpternlog of (*o, n, n) with imm 0xc3
    stores = "\n".join(f"    *o{o + 1} = DES_TERN(*o{o + 1}, {n}, {n}, 0xc3);" if neg else
                       f"    *o{o + 1} = DES_XOR(*o{o + 1}, {n});" for o, (n, neg) in enumerate(outs))
    copies_note = f" ({copied} with a copy)" if copied is not None else ""
    return (f"/* S{s + 1}: {c.ops} operations{copies_note}; split order "
            f"{' '.join(f'a{i + 1}' for i in order)} */\n"
            f"DES_INLINE void DES_SB(s{s + 1})(DES_V a1, DES_V a2, DES_V a3, DES_V a4, DES_V a5, DES_V a6,\n"
            f"    DES_V *o1, DES_V *o2, DES_V *o3, DES_V *o4)\n{{\n{unused}{body}\n{stores}\n}}\n")


HEADER = """\
/* des_sboxes_bitslice.h - GENERATED by tools/gen_des_sboxes.py from des_tables.h.
 * Do not edit; regenerate with:
 *
 *     python3 tools/gen_des_sboxes.py -o src/cpulab/kernels/des_sboxes_bitslice.h
 *
 * The eight DES S-boxes as straight-line boolean code on bitslice words: DES_SB(sN)(a1..a6,
 * o1..o4) computes S-box N of the six input words (a1 = b1, the most significant input
 * bit) and XORs its four output bits into *o1..*o4 (o1 = the most significant output bit),
 * for every bit position of the words at once.
 *
 * No include guard: the includer defines DES_V (the word type), DES_INLINE, DES_SB(name)
 * (the function name for this instantiation) and the operations, then includes this file
 * once per word type:
 *   binary form (default):     DES_AND(a,b) DES_OR(a,b) DES_XOR(a,b) DES_ANDN(a,b) = a & ~b,
 *                              DES_NOT(a)
 *   ternary form (define DES_SB_TERNARY): DES_TERN(a,b,c,imm), AVX-512 vpternlog semantics
 *                              (result bit = imm bit (a<<2 | b<<1 | c)), DES_AND, DES_ANDN,
 *                              DES_OR and DES_XOR.
 *
 * Operation counts (without the output XORs): binary %(bin_counts)s (total %(bin_total)d),
 * ternary %(ter_counts)s (total %(ter_total)d).
 */
"""


def generate() -> str:
    boxes = read_sboxes()
    forms = {}
    for ternary in (False, True):
        funcs = []
        for s, box in enumerate(boxes):
            c, outs, order = best_circuit(box, ternary, (RECORDED if ternary else BINARY_ORDERS).get(s + 1))
            copied = None
            if ternary:
                c.lines = dead_first(c.lines, [n for n, _ in outs])
                copied = copies(c.lines, [n for n, _ in outs])
            got = evaluate(c.lines, outs)
            want = [output_tt(box, o) for o in range(4)]
            if got != want:
                raise SystemExit(f"S{s + 1} ({'ternary' if ternary else 'binary'}): circuit does not match the table")
            funcs.append((c.ops, emit_function(s, c, outs, order, copied)))
            print(f"S{s + 1} {'ternary' if ternary else 'binary '}: {c.ops} ops", file=sys.stderr)
        forms[ternary] = funcs
    counts = {t: [n for n, _ in forms[t]] for t in forms}
    out = HEADER % {
        "bin_counts": "/".join(map(str, counts[False])), "bin_total": sum(counts[False]),
        "ter_counts": "/".join(map(str, counts[True])), "ter_total": sum(counts[True]),
    }
    out += "\n#ifndef DES_SB_TERNARY\n\n" + "\n".join(f for _, f in forms[False])
    out += "\n#else /* DES_SB_TERNARY */\n\n" + "\n".join(f for _, f in forms[True])
    out += "\n#endif /* DES_SB_TERNARY */\n"
    return out


def search_all(trials: int) -> str:
    """BINARY_ORDERS and RECORDED as Python text: each S-box's cheapest binary split order,
    and its cheapest of `trials` random ternary circuits per order, where that beats the
    greedy circuit of every order."""
    lines = ["BINARY_ORDERS = {"]
    lines += [f"    {s + 1}: {ranked_orders(box, False)[0][1]}," for s, box in enumerate(read_sboxes())]
    lines += ["}", "RECORDED = {"]
    for s, box in enumerate(read_sboxes()):
        found, greedy = search(box, trials, seed=s + 1)
        print(f"S{s + 1}: greedy {greedy}, search {found[0]}", file=sys.stderr)
        if found[0] < greedy:
            lines.append(f"    {s + 1}: ({found[1]}, {found[2]}, \"{found[3]}\"),  # {found[0]}, greedy {greedy}")
    return "\n".join(lines + ["}"]) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-o", "--output", help="write the header here (default: stdout)")
    ap.add_argument("--search", type=int, metavar="TRIALS",
                    help="search the split orders and ternary circuits anew (TRIALS random circuits per "
                         "order) and print BINARY_ORDERS and RECORDED to paste into this file, instead of "
                         "writing the header")
    args = ap.parse_args()
    if args.search:
        sys.stdout.write(search_all(args.search))
        return
    text = generate()
    if args.output:
        Path(args.output).write_text(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
