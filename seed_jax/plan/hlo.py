"""Per-device work of a compiled program, read from its optimised HLO text (``compiled.as_text()``).

XLA's ``cost_analysis()`` counts the body of a ``while`` loop once, whatever its trip count, and
says nothing of collectives; a train step is loops inside loops (micro-batches, layers, LM-head
chunks), so this module walks the HLO call graph itself. Every computation gets a multiplier
``m(c) = sum over its call sites of m(caller) * f``, with ``f`` the trip count of a ``while``
(``known_trip_count`` in its backend config, else read from the loop condition
``i < N`` / ``i <= N`` and the induction variable's initial constant; a loop whose count cannot be
read counts `analyze`'s ``unknown_trips`` times and is listed in ``unknown_loops``) and ``f = 1`` for every other call. Then,
summed over the instructions of the control-flow computations (the entry, loop bodies and
conditions, called and branch computations, async wrappers; not reducers) and, for the collectives
and FLOPs, of the fusion bodies they call (nested fusions included, at the caller's ``m``):

    collective bytes[kind] = sum m * size(buffer)           size: the larger side (the gathered
                                                            result, the reduced input)
    link bytes             = sum m * size * w(kind, n)      w = (n-1)/n for all-gather,
                                                            reduce-scatter, all-to-all;
                                                            2 (n-1)/n for all-reduce; 1 for
                                                            collective-permute (n: group size)
    flops                  = sum m * 2 * |result| * K       over dot / convolution (also inside
                                                            fusions); K = contracted size (a
                                                            convolution: input features x the
                                                            window taps that meet an input
                                                            element: XLA:TPU writes batched
                                                            matmuls as dilated convolutions)
                                                            plus a kernel's (custom call's)
                                                            declared ``cost_estimate`` flops; a
                                                            Pallas kernel declaring none is
                                                            listed in ``uncosted_kernels``
    hbm bytes              = sum m * (bytes read + written) per top-level instruction; a fusion
                                                            operand only dynamic-sliced (also
                                                            inside nested fusions) counts its
                                                            slices, an in-place dynamic-update
                                                            counts the update twice

Each collective is counted once per execution. An async pair (``all-gather-start`` /
``all-gather-done``) counts at its start. XLA:TPU's async collective fusions write one collective
several times, all with one ``channel_id``: in the start fusion (root ``AsyncCollectiveStart``),
in each fusion of compute that overlaps it (``async_collective_fusion``) and in the done fusion
(``AsyncCollectiveDone``); so within one visit of a control-flow computation the collectives of
one ``(kind, channel_id, result shape)`` count once. XLA:TPU's reduce-scatter is an ``all-reduce``
inside an ``all-reduce-scatter`` fusion (the fusion slices the device's shard from it): it counts
as a reduce-scatter of the all-reduce's input.

The figures are per device (the HLO of an SPMD program is one device's program).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections import defaultdict

import numpy as np

COLLECTIVES = ("all-gather", "reduce-scatter", "all-reduce", "all-to-all", "collective-permute")

DTYPE_BYTES = {
    "pred": 1, "s4": 0.5, "u4": 0.5, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "s32": 4, "u32": 4, "s64": 8, "u64": 8,
    "f16": 2, "bf16": 2, "f32": 4, "f64": 8, "c64": 8, "c128": 16, "f8e4m3fn": 1, "f8e5m2": 1, "f8e4m3fnuz": 1,
    "f8e5m2fnuz": 1, "f8e4m3b11fnuz": 1, "f8e4m3": 1, "f8e3m4": 1, "f4e2m1fn": 0.5, "f8e8m0fnu": 1,
}
_ARRAY = re.compile(r"\b(" + "|".join(sorted(DTYPE_BYTES, key=len, reverse=True)) + r")\[([^\]]*)\]")
_HEADER = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\s*\(.*->.*\{\s*$")
_NAME = re.compile(r"%([\w.\-]+)")
_NO_TRAFFIC = {"parameter", "constant", "get-tuple-element", "tuple", "bitcast", "while", "call", "conditional",
               "after-all", "partition-id", "replica-id", "opt-barrier", "add-dependency", "domain"}


def arrays(shape: str) -> list[tuple[str, tuple[int, ...]]]:
    """``[(dtype, dims)]`` of every array in an HLO shape string (a tuple gives several)."""
    out = []
    for dt, dims in _ARRAY.findall(shape):
        ds = tuple(int(d.replace("<=", "")) for d in dims.split(",") if d.strip())
        out.append((dt, ds))
    return out


def shape_bytes(shape: str) -> int:
    """Bytes of every array in an HLO shape string (tuples summed)."""
    return int(sum(DTYPE_BYTES[dt] * math.prod(ds) for dt, ds in arrays(shape)))


@dataclasses.dataclass
class Instr:
    name: str
    shape: str
    opcode: str
    operands: list[str]
    attrs: str
    root: bool = False
    args: str = ""  # the text between the opcode's parentheses (a constant's literal)

    @property
    def const(self) -> int | None:
        """The value of an integer scalar ``constant``, else None."""
        m = re.fullmatch(r"\s*(-?\d+)\s*", self.args) if self.opcode == "constant" else None
        return int(m.group(1)) if m else None


@dataclasses.dataclass
class Computation:
    name: str
    instrs: dict[str, Instr]
    root: str | None = None


def _balanced(s: str, start: int) -> int:
    """Index just past the bracket group opening at ``s[start]`` ( '(' or '{' )."""
    pairs = {"(": ")", "{": "}", "[": "]"}
    stack = []
    for i in range(start, len(s)):
        c = s[i]
        if c in pairs:
            stack.append(pairs[c])
        elif stack and c == stack[-1]:
            stack.pop()
            if not stack:
                return i + 1
    return len(s)


def parse_instr(line: str) -> Instr | None:
    """One ``[ROOT] %name = shape opcode(operands), attrs`` line, or None."""
    m = re.match(r"^\s*(ROOT\s+)?%?([\w.\-]+)\s*=\s*", line)
    if not m:
        return None
    rest = line[m.end():]
    if rest.startswith("("):
        end = _balanced(rest, 0)
        shape, rest = rest[:end], rest[end:].lstrip()
    else:
        shape, _, rest = rest.partition(" ")
        while rest.startswith("{"):  # a layout written apart from its shape
            end = _balanced(rest, 0)
            shape, rest = shape + rest[:end], rest[end:].lstrip()
    om = re.match(r"([\w\-]+)\(", rest)
    if not om:
        return None
    close = _balanced(rest, om.end() - 1)
    args = rest[om.end():close - 1]
    return Instr(m.group(2), shape, om.group(1), _NAME.findall(args), rest[close:], bool(m.group(1)), args)


def _param_index(ins: Instr) -> int | None:
    """The index of a ``parameter(i)`` instruction."""
    return int(ins.args) if ins.opcode == "parameter" and ins.args.strip().isdigit() else None


def parse_module(text: str) -> tuple[dict[str, Computation], str | None]:
    """``({name: Computation}, entry name)`` of an HLO module's text."""
    comps: dict[str, Computation] = {}
    entry = None
    cur = None
    for line in text.splitlines():
        h = _HEADER.match(line)
        if h and not line.startswith(" "):
            cur = Computation(h.group(2), {})
            comps[cur.name] = cur
            if h.group(1):
                entry = cur.name
            continue
        if cur is None:
            continue
        if line.startswith("}"):
            cur = None
            continue
        ins = parse_instr(line)
        if ins is not None:
            cur.instrs[ins.name] = ins
            if ins.root:
                cur.root = ins.name
    return comps, entry


def _attr_names(attrs: str, key: str) -> list[str]:
    """Computation names of attribute ``key`` (``calls=%a`` or ``branch_computations={%a, %b}``)."""
    m = re.search(rf"\b{key}=(\{{[^}}]*\}}|%?[\w.\-]+)", attrs)
    if not m:
        return []
    v = m.group(1)
    return _NAME.findall(v) if v.startswith("{") else [v.lstrip("%")]


def trip_count(comps: dict[str, Computation], caller: Computation, w: Instr) -> int | None:
    """Iterations of the ``while`` instruction ``w`` (module docstring), or None when unreadable."""
    m = re.search(r'"known_trip_count"\s*:\s*\{\s*"n"\s*:\s*"?(\d+)', w.attrs)
    if m:
        return int(m.group(1))
    cond = comps.get((_attr_names(w.attrs, "condition") or [None])[0])
    if cond is None or cond.root is None:
        return None
    root = cond.instrs[cond.root]
    if root.opcode != "compare" or len(root.operands) != 2:
        return None
    d = re.search(r"direction=(\w+)", root.attrs)
    direction = d.group(1) if d else ""
    a, b = (cond.instrs.get(o) for o in root.operands)
    if a is None or b is None:
        return None
    if direction in ("GT", "GE"):  # N > i  is  i < N
        a, b = b, a
        direction = {"GT": "LT", "GE": "LE"}[direction]
    if direction not in ("LT", "LE") or b.opcode != "constant" or a.opcode != "get-tuple-element":
        return None
    n = b.const
    idx = re.search(r"index=(\d+)", a.attrs)
    if n is None or idx is None:
        return None
    init = 0
    tup = caller.instrs.get(w.operands[0]) if w.operands else None
    if tup is not None and tup.opcode == "tuple" and int(idx.group(1)) < len(tup.operands):
        src = caller.instrs.get(tup.operands[int(idx.group(1))])
        while src is not None and src.opcode in ("copy", "bitcast") and src.operands:
            src = caller.instrs.get(src.operands[0])
        if src is not None and src.opcode == "constant" and src.const is not None:
            init = src.const
    return max(0, n - init + (1 if direction == "LE" else 0))


def group_size(attrs: str, num_devices: int) -> int:
    """Devices per replica group of a collective (``replica_groups`` in any of its spellings)."""
    m = re.search(r"replica_groups=\[(\d+),(\d+)\]<=", attrs)
    if m:
        return int(m.group(2))
    m = re.search(r"replica_groups=mesh\[([^\]]*)\]\s*\{([^}]*)\}", attrs)
    if m:
        sizes = dict(re.findall(r"'([^']+)'=(\d+)", m.group(1)))
        names = re.findall(r"'([^']+)'", m.group(2))
        return math.prod(int(sizes.get(n, 1)) for n in names) if names else num_devices
    m = re.search(r"replica_groups=\{\{([^}]*)\}", attrs)
    if m:
        return len([x for x in m.group(1).split(",") if x.strip()])
    return num_devices


@dataclasses.dataclass
class HloStats:
    """Per-device totals of one program (module docstring), loop trip counts applied."""

    flops: float = 0.0
    hbm_bytes: float = 0.0
    collective_bytes: dict[str, float] = dataclasses.field(default_factory=lambda: dict.fromkeys(COLLECTIVES, 0.0))
    link_bytes: float = 0.0
    loops: list[tuple[str, int | None]] = dataclasses.field(default_factory=list)
    uncosted_kernels: list[str] = dataclasses.field(default_factory=list)  # their FLOPs are not counted

    @property
    def unknown_loops(self) -> list[str]:
        return [name for name, n in self.loops if n is None]


_COST_FLOPS = re.compile(r'cost_estimate\\?"\s*:\s*\{\s*\\?"flops\\?"\s*:\s*\\?"?([0-9.eE+]+)')


def declared_flops(attrs: str) -> float | None:
    """The ``flops`` of a custom call's ``cost_estimate`` (Pallas kernels may declare one in
    their backend config), or None."""
    m = _COST_FLOPS.search(attrs)
    return float(m.group(1)) if m else None


def _collective_kind(opcode: str) -> str | None:
    base = opcode[:-6] if opcode.endswith("-start") else opcode
    return base if base in COLLECTIVES else None


def _dot_flops(comp: Computation, ins: Instr) -> float:
    out = sum(math.prod(ds) for _, ds in arrays(ins.shape)[:1])
    lhs = comp.instrs.get(ins.operands[0]) if ins.operands else None
    rhs = comp.instrs.get(ins.operands[1]) if len(ins.operands) > 1 else None
    if ins.opcode == "dot":
        m = re.search(r"lhs_contracting_dims=\{([\d,]*)\}", ins.attrs)
        if lhs is None or not m:
            return 0.0
        dims = arrays(lhs.shape)[0][1]
        k = math.prod(dims[int(i)] for i in m.group(1).split(",") if i)
        return 2.0 * out * k
    m = re.search(r"dim_labels=(\w+)_(\w+)->(\w+)", ins.attrs)
    if rhs is None or lhs is None or not m:
        return 0.0
    lhs_dims, rhs_dims, out_dims = arrays(lhs.shape)[0][1], arrays(rhs.shape)[0][1], arrays(ins.shape)[0][1]
    lhs_lab, rhs_lab, out_lab = m.groups()
    k = math.prod(d for d, lab in zip(rhs_dims, rhs_lab) if lab == "i")
    win = _window(ins.attrs)
    per_out = 1.0  # window taps that meet an input element, per output position (module docstring)
    for i in range(sum(c.isdigit() for c in rhs_lab)):
        n, o = lhs_dims[lhs_lab.index(str(i))], out_dims[out_lab.index(str(i))]
        size = rhs_dims[rhs_lab.index(str(i))]
        at = {key: (win[key][i] if key in win else d) for key, d in
              (("pad", (0, 0)), ("stride", 1), ("lhs_dilate", 1), ("rhs_dilate", 1))}
        per_out *= _taps(n, o, size, at["stride"], at["pad"][0], at["lhs_dilate"], at["rhs_dilate"]) / max(o, 1)
    return 2.0 * out * k * per_out


def _window(attrs: str) -> dict[str, list]:
    """``window={size=2x8 stride=1x7 pad=1_1x7_7 lhs_dilate=1x7 ...}`` -> ``{key: [per dim]}``."""
    m = re.search(r"window=\{([^}]*)\}", attrs)
    out: dict[str, list] = {}
    for item in (m.group(1).split() if m else []):
        key, _, val = item.partition("=")
        parts = val.split("x")
        out[key] = [tuple(int(v) for v in p.split("_")) for p in parts] if key == "pad" else \
            [int(p) if p.lstrip("-").isdigit() else p for p in parts]
    return out


def _taps(n: int, o: int, size: int, stride: int, lo: int, lhs_dilate: int, rhs_dilate: int) -> int:
    """Pairs (output position, window tap) of one spatial dimension whose input position holds an
    element: ``p = o * stride + j * rhs_dilate - lo`` with ``p % lhs_dilate == 0`` and
    ``0 <= p / lhs_dilate < n`` (padding and dilation holes hold none)."""
    pos = np.arange(o)[:, None] * stride + np.arange(size)[None, :] * rhs_dilate - lo
    ok = (pos >= 0) & (pos % lhs_dilate == 0) & (pos // lhs_dilate < n)
    return int(ok.sum())


class _Walker:
    def __init__(self, text: str, num_devices: int, unknown_trips: int = 1):
        self.comps, self.entry = parse_module(text)
        self.unknown_trips = unknown_trips
        self.num_devices = num_devices
        self.stats = HloStats()
        self._fused_flops: dict[str, float] = {}

    def fused_flops(self, name: str) -> float:
        """Dot / convolution FLOPs inside a fusion body (nested fusions included)."""
        if name in self._fused_flops:
            return self._fused_flops[name]
        self._fused_flops[name] = 0.0
        comp = self.comps.get(name)
        total = 0.0
        if comp is not None:
            for ins in comp.instrs.values():
                if ins.opcode in ("dot", "convolution"):
                    total += _dot_flops(comp, ins)
                for callee in _attr_names(ins.attrs, "calls"):
                    total += self.fused_flops(callee)
        self._fused_flops[name] = total
        return total

    def fusion_bytes(self, comp: Computation, ins: Instr) -> float:
        """Bytes read and written by one fusion (module docstring: slices and in-place updates)."""
        body = self.comps.get((_attr_names(ins.attrs, "calls") or [None])[0])
        out = shape_bytes(ins.shape)
        if body is None:
            return out + sum(shape_bytes(comp.instrs[o].shape) for o in ins.operands if o in comp.instrs)
        users = defaultdict(list)
        for b in body.instrs.values():
            for o in b.operands:
                users[o].append(b)
        params = {b.name: b for b in body.instrs.values() if b.opcode == "parameter"}
        root = body.instrs.get(body.root) if body.root else None
        total = 0.0
        in_place = None
        if root is not None and root.opcode == "dynamic-update-slice" and root.operands:
            in_place = root.operands[0]
            upd = body.instrs.get(root.operands[1]) if len(root.operands) > 1 else None
            total += 2 * (shape_bytes(upd.shape) if upd is not None else 0)
            out = 0
        for pname, p in params.items():
            if pname == in_place:
                continue
            read = self.sliced_read(body, pname, users)
            total += shape_bytes(p.shape) if read is None else read
        return total + out

    def sliced_read(self, body: Computation, pname: str, users, depth: int = 0) -> float | None:
        """Bytes a fusion body reads of its parameter ``pname`` when every use only slices it
        (dynamic-slice / slice / gather of it, directly or inside nested fusions): the slices'
        sizes; None when some use reads it whole."""
        us = users.get(pname, [])
        if not us or depth > 8:
            return None
        total = 0.0
        for u in us:
            if u.opcode in ("dynamic-slice", "slice", "gather") and u.operands[0] == pname:
                total += shape_bytes(u.shape)
                continue
            inner = self.comps.get((_attr_names(u.attrs, "calls") or [None])[0]) if u.opcode == "fusion" else None
            if inner is None:
                return None
            inner_params = [b for b in inner.instrs.values() if b.opcode == "parameter"]
            inner_users = defaultdict(list)
            for b in inner.instrs.values():
                for o in b.operands:
                    inner_users[o].append(b)
            for i, o in enumerate(u.operands):
                if o != pname:
                    continue
                match = [b for b in inner_params if _param_index(b) == i]
                read = self.sliced_read(inner, match[0].name, inner_users, depth + 1) if match else None
                if read is None:
                    return None
                total += read
        return total

    def instr_bytes(self, comp: Computation, ins: Instr) -> float:
        if ins.opcode in _NO_TRAFFIC or ins.opcode.endswith("-done"):
            return 0.0
        if ins.opcode == "fusion":
            return self.fusion_bytes(comp, ins)
        if ins.opcode in ("dynamic-slice", "slice"):
            return 2.0 * shape_bytes(ins.shape)
        if ins.opcode == "dynamic-update-slice" and len(ins.operands) > 1 and ins.operands[1] in comp.instrs:
            return 2.0 * shape_bytes(comp.instrs[ins.operands[1]].shape)
        ops = sum(shape_bytes(comp.instrs[o].shape) for o in ins.operands if o in comp.instrs)
        return ops + shape_bytes(ins.shape)

    def fused_collectives(self, name: str, depth: int = 0) -> list[tuple[Computation, Instr, str]]:
        """``(body, instruction, kind)`` of every collective inside fusion body ``name`` (nested
        fusions included); an all-reduce of an ``all-reduce-scatter`` fusion is a reduce-scatter
        (module docstring)."""
        comp = self.comps.get(name)
        if comp is None or depth > 16:
            return []
        out = []
        for ins in comp.instrs.values():
            kind = _collective_kind(ins.opcode)
            if kind is not None:
                if kind == "all-reduce" and name.startswith("all-reduce-scatter"):
                    kind = "reduce-scatter"
                out.append((comp, ins, kind))
            if ins.opcode == "fusion":
                for callee in _attr_names(ins.attrs, "calls"):
                    out.extend(self.fused_collectives(callee, depth + 1))
        return out

    def collective(self, comp: Computation, ins: Instr, kind: str, m: float) -> None:
        ops = sum(shape_bytes(comp.instrs[o].shape) for o in ins.operands if o in comp.instrs)
        res = shape_bytes(ins.shape)
        size = max(ops, res - ops) if ins.opcode.endswith("-start") else max(ops, res)
        n = self.num_devices if kind == "collective-permute" else group_size(ins.attrs, self.num_devices)
        if kind == "collective-permute":
            w = 1.0
        elif n <= 1:
            w = 0.0
        else:
            w = (2.0 if kind == "all-reduce" else 1.0) * (n - 1) / n
        self.stats.collective_bytes[kind] += m * size
        self.stats.link_bytes += m * size * w

    def walk(self, name: str, m: float, depth: int = 0) -> None:
        comp = self.comps.get(name)
        if comp is None or depth > 64:
            return
        seen: set[tuple] = set()  # (kind, channel_id, result arrays): one collective, written several times

        def count(body: Computation, ins: Instr, kind: str) -> None:
            channel = re.search(r"\bchannel_id=(\d+)", ins.attrs)
            if channel is not None:
                key = (kind, channel.group(1), tuple(arrays(ins.shape)))
                if key in seen:
                    return
                seen.add(key)
            self.collective(body, ins, kind, m)

        for ins in comp.instrs.values():
            kind = _collective_kind(ins.opcode)
            if kind is not None:
                count(comp, ins, kind)
            if ins.opcode in ("dot", "convolution"):
                self.stats.flops += m * _dot_flops(comp, ins)
            elif ins.opcode == "fusion":
                for callee in _attr_names(ins.attrs, "calls"):
                    self.stats.flops += m * self.fused_flops(callee)
                    for body, inner, inner_kind in self.fused_collectives(callee):
                        count(body, inner, inner_kind)
            elif ins.opcode == "custom-call":
                declared = declared_flops(ins.attrs)
                if declared is not None:
                    self.stats.flops += m * declared
                elif 'custom_call_target="tpu_custom_call"' in ins.attrs:
                    self.stats.uncosted_kernels.append(ins.name)
            self.stats.hbm_bytes += m * self.instr_bytes(comp, ins)
            if ins.opcode == "while":
                n = trip_count(self.comps, comp, ins)
                self.stats.loops.append((ins.name, n))
                f = self.unknown_trips if n is None else n
                for callee in _attr_names(ins.attrs, "body"):
                    self.walk(callee, m * f, depth + 1)
                for callee in _attr_names(ins.attrs, "condition"):
                    self.walk(callee, m * (f + 1), depth + 1)
            elif ins.opcode in ("call", "conditional", "async-start") or ins.opcode.endswith("-start"):
                for key in ("calls", "to_apply", "branch_computations", "true_computation", "false_computation"):
                    if ins.opcode.endswith("-start") and ins.opcode != "async-start" and key == "to_apply":
                        continue  # an all-reduce-start's reducer
                    for callee in _attr_names(ins.attrs, key):
                        self.walk(callee, m, depth + 1)


def analyze(text: str, num_devices: int, unknown_trips: int = 1) -> HloStats:
    """`HloStats` of one compiled module's HLO text (module docstring); a loop whose trip count
    cannot be read counts ``unknown_trips`` times (e.g. a decode chunk's length)."""
    w = _Walker(text, num_devices, unknown_trips)
    if w.entry is None:
        raise ValueError("no ENTRY computation in the HLO text")
    w.walk(w.entry, 1.0)
    return w.stats
