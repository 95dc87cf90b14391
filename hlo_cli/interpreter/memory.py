"""Out of memory as its own error, and what a run can never hold.

A module that asks for more memory than the machine has is not a wrong module: `hlo run` reports
it as an HloResourceError (exit code 4) that says which instruction asked, how large its result
is (from its shape, as the interpreter stores it) and how much the failing allocation asked for
(NumPy says so).  Before a run starts, every instruction whose result alone is larger than the
memory this process can ever have (physical memory plus swap, or the container's limit if lower)
is refused at once, rather than left to swap or to the kernel's OOM killer half-way through.

The same pre-flight refuses results of more than 64 dimensions: XLA has no rank limit, but NumPy
arrays have at most 64 (NumPy 2), so `hlo run` cannot hold such a value.

Before that, the whole run is estimated from the shapes (`estimate`: the entry parameters, the
largest live set along the evaluator's schedule, the largest single value, a scratch allowance),
and `check_budget` refuses a run whose estimate is above a limit (`hlo run --max-memory SIZE`,
by default what the machine can ever hold) with an HloMemoryLimitError (exit code 5) naming the
estimate, the limit, where the peak is and how to override.  It does not replace the pre-flight:
the pre-flight still guards every run (the library's too) and names a single impossible value
with exit code 4; under the default limit check_budget leaves that case to it, so the same
module gets the same answer with or without the CLI.  `parse_size` reads the sizes users write.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from ..errors import HloEvalError, HloResourceError
from ..errors import instruction_diagnostic as _diag
from ..ir.dtypes import ELEMENT_TYPES
from ..ir.module import Instruction, Module
from ..ir.shape import NUMPY_MAX_RANK, UNBOUNDED, Shape
from ..ir.units import human
from .schedule import free_after, run_order

def result_bytes(shape: Shape | None) -> int | None:
    """Bytes the interpreter needs to hold a value of `shape` (each element at its NumPy storage
    size; bounded dynamic dimensions at their bound); None when unknown (no shape, unbounded dims)."""
    if shape is None:
        return None
    total = 0
    for leaf in shape.leaves():
        et = ELEMENT_TYPES.get(leaf.element_type)
        if et is None or et.bits == 0:
            continue                             # token, opaque: no storage
        if any(d == UNBOUNDED for d in leaf.dims):
            return None
        size = et.numpy.itemsize if et.numpy is not None else (et.bits + 7) // 8
        total += leaf.num_elements * size
    return total


def memory_limit() -> int | None:
    """The most memory this process could ever use: physical memory plus swap, or the cgroup's
    limit when that is lower; None if unknown."""
    limit = None
    try:
        limit = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("SwapTotal:"):
                    limit += int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, AttributeError):
        pass
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit() and (limit is None or int(text) < limit):
            limit = int(text)
        break
    return limit


def resource_error(inst: Instruction | None, e: BaseException | None = None, *,
                   limit: int | None = None, devices: int = 1) -> HloResourceError:
    """The out-of-memory error of `inst` (None: not known) after MemoryError `e`, or, with `limit`,
    for a result larger than `limit` bytes found before the run (on `devices` simulated devices,
    one copy each)."""
    need = result_bytes(inst.shape) if inst is not None else None
    asked = getattr(e, "_total_size", None) if e is not None else None     # NumPy's _ArrayMemoryError
    if not isinstance(asked, int):
        asked = None
    parts = []
    if inst is not None and need is not None and devices > 1:
        parts.append(f"its result {inst.shape.to_str(False)} on {devices} devices needs {human(need * devices)}")
        need *= devices
    elif inst is not None and need is not None:
        parts.append(f"its result {inst.shape.to_str(False)} needs {human(need)}")
    if limit is not None:
        parts.append(f"more than this machine can ever hold, {human(limit)}")
    elif asked is not None:
        parts.append(f"NumPy could not allocate {human(asked)}")
    detail = ", ".join(parts) if parts else str(e) if e is not None and str(e) else "an allocation failed"
    if inst is None:
        return HloResourceError(f"out of memory: {detail}", requested_bytes=asked)
    msg = f"{inst.name}: {inst.opcode}: out of memory: {detail}"
    return HloResourceError(msg, [_diag(inst, msg, "R013")], instruction=inst.name,
                            requested_bytes=asked, result_bytes=need)


def preflight(module: Module, devices: int = 1) -> None:
    """Refuse, before running, what no run of `module` on this machine could hold: a result larger
    than the memory limit (HloResourceError; on several simulated devices, the devices' copies
    together) or of more dimensions than NumPy arrays have (HloEvalError); the instruction found
    first in text order is reported.  A module that passed is not walked again for the same limit
    (the walk is not free on a large module)."""
    limit = memory_limit()
    from .per_module import module_cache
    per = module_cache(module)
    if per.get("preflight_passed", ()) == (limit, devices):
        return
    if limit is not None and devices > limit // 64:
        raise HloResourceError(f"out of memory: {devices} simulated devices need more than this machine can "
                               f"ever hold, {human(limit)}, for their bookkeeping alone")
    facts = per.get("preflight_facts")
    if facts is None or facts[1] > NUMPY_MAX_RANK or (limit is not None and facts[0] * devices > limit):
        _preflight(module, limit, devices)     # (the walk finds the first instruction to refuse)
    per["preflight_passed"] = (limit, devices)


def preflight_facts(module: Module) -> tuple[int, int]:
    """(the largest result of an instruction in bytes, the most dimensions of a leaf) of MODULE: what
    `preflight` compares with the machine, from the text alone (the pipeline keeps them in the
    on-disk cache; remember_preflight_facts hands them back)."""
    largest = rank = 0
    for comp in module.computations:
        for inst in comp.instructions:
            shape = inst.shape
            if shape is None:
                continue
            for leaf in shape.leaves():
                rank = max(rank, leaf.rank)
            need = result_bytes(shape)
            if need is not None:
                largest = max(largest, need)
    return largest, rank


def remember_preflight_facts(module: Module, facts) -> None:
    """Take FACTS (preflight_facts' answer for MODULE, computed earlier) for `preflight`: a module
    whose largest result fits and whose ranks NumPy holds passes without a walk."""
    from .per_module import module_cache
    largest, rank = facts
    module_cache(module)["preflight_facts"] = (int(largest), int(rank))


def check_rank(inst) -> None:
    """HloEvalError (R014, located at INST) when a leaf of its shape has more dimensions than NumPy
    arrays can."""
    for leaf in inst.shape.leaves():
        if leaf.rank > NUMPY_MAX_RANK:
            msg = (f"{inst.name}: {inst.opcode}: hlo run holds arrays of at most {NUMPY_MAX_RANK} "
                   f"dimensions (NumPy's limit), got {leaf.rank} in {leaf.to_str(False)[:120]}"
                   f"{'...' if len(leaf.to_str(False)) > 120 else ''}")
            raise HloEvalError(msg, [_diag(inst, msg, "R014")])


def _preflight(module: Module, limit: int | None, devices: int = 1) -> None:
    for comp in module.computations:
        for inst in comp.instructions:
            shape = inst.shape
            if shape is None:
                continue
            check_rank(inst)
            if limit is not None:
                need = result_bytes(shape)
                if need is not None and need * devices > limit:
                    raise resource_error(inst, limit=limit, devices=devices)


# ============================================================================ sizes on the command line

_UNITS = {"": 1, "b": 1,
          "k": 1000, "kb": 1000, "m": 1000 ** 2, "mb": 1000 ** 2, "g": 1000 ** 3, "gb": 1000 ** 3,
          "t": 1000 ** 4, "tb": 1000 ** 4, "p": 1000 ** 5, "pb": 1000 ** 5,
          "kib": 1024, "mib": 1024 ** 2, "gib": 1024 ** 3, "tib": 1024 ** 4, "pib": 1024 ** 5}
_SIZE_HELP = ("a size is a number of bytes with an optional unit (K/KB, M/MB, G/GB, T/TB: powers of "
              "1000; KiB, MiB, GiB, TiB: powers of 1024), e.g. 512MB, 16G, 1.5GiB, 2e9; or 'none' "
              "(no limit) or 'auto' (what this machine has)")


def parse_size(text: str):
    """A memory size as a user writes it: '16G', '16GB', '512M', '1.5GiB', '2e9', '123' -> bytes
    (K, M, G, T, P and their ..B spellings are powers of 1000, KiB, MiB, ... powers of 1024; case
    does not matter); 'none' -> None (no limit); 'auto' -> 'auto' (what the machine has).
    ValueError with a message saying what a size looks like otherwise."""
    import math
    import re
    s = str(text).strip()
    low = s.lower()
    if low in ("none", "off", "unlimited"):
        return None
    if low == "auto":
        return "auto"
    m = re.fullmatch(r"([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?|[0-9]+\.)\s*([a-z]*)", low)
    if m is None or m.group(2) not in _UNITS:
        raise ValueError(f"'{text}' is not a size: {_SIZE_HELP}")
    num, unit = m.group(1), _UNITS[m.group(2)]
    try:
        value = float(num) * unit if ("." in num or "e" in num) else int(num) * unit
    except OverflowError:
        value = math.inf
    if not math.isfinite(value) or value < 1:
        raise ValueError(f"'{text}' is not a usable size (it must be at least one byte and finite): "
                         f"{_SIZE_HELP}")
    return int(value)


# ============================================================================ the estimate before a run

@dataclass(frozen=True)
class Where:
    """An instruction named in an estimate: its name, opcode, computation, shape and position."""
    name: str
    opcode: str
    computation: str
    shape: str
    file: str
    line: int
    column: int = 0

    def text(self) -> str:
        loc = f"{self.file}:{self.line}" if self.line else self.file
        return f"{self.name} ({self.opcode} {self.shape} in {self.computation}, {loc})"

    def to_dict(self) -> dict:
        return {"instruction": self.name, "opcode": self.opcode, "computation": self.computation,
                "shape": self.shape, "file": self.file, "line": self.line, "column": self.column}


@dataclass(frozen=True)
class MemoryEstimate:
    """What a run of a module needs, from its shapes alone (nothing is allocated).

    parameters   bytes of the entry computation's parameters (held for the whole run);
    constants    bytes of the module's literals (the compiled path keeps them for the module's life);
    peak_live    bytes of the largest set of values alive at once along the interpreter's schedule,
                 the entry parameters included (one device's, see `devices`);
    peak_at      the instruction being evaluated at that peak (innermost: inside a loop body, the
                 body's instruction);
    largest      bytes of the largest single value an instruction allocates (views -- broadcast,
                 reshape, transpose, get-tuple-element... -- allocate nothing), largest_at it;
    temporaries  the largest scratch allowance of one instruction beyond its result: dot and
                 convolution (one copy of the operands, and of a result narrower than the work, at
                 4 bytes an element, 8 for integers and f64, 16 for complex; a convolution's
                 accumulator and its gather of the input under one kernel tap too: output
                 positions x input features), narrow floats (computed
                 in f32: 4 bytes an element of operands and result), other float results (one
                 more copy: XLA CPU's flush to zero of subnormals takes |x| first),
                 computations applied to whole arrays (reduce, sort, scatter, map...: one more copy
                 of the operands), sort (8 bytes an element for the permutation);
    total        the figure compared with a limit: the largest (live set + the scratch of the
                 instruction running then), times `devices`, plus the constants;
    devices      simulated devices (> 1: the SPMD walk holds one copy of every value per device:
                 an upper bound, values the devices hold alike are kept once);
    notes        what the estimate could not count (unbounded shapes, recursion)."""
    parameters: int
    constants: int
    peak_live: int
    peak_at: Where | None
    largest: int
    largest_at: Where | None
    temporaries: int
    total: int
    total_at: Where | None = None
    devices: int = 1
    notes: tuple[str, ...] = ()

    @property
    def per_device(self) -> bool:
        return self.devices > 1

    def describe(self) -> list[str]:
        """Short lines for people: what the run needs, and where."""
        per = f" per device, x {self.devices} devices" if self.devices > 1 else ""
        out = [f"estimated memory: {human(self.total)}",
               f"  parameters: {human(self.parameters)}{per}",
               f"  peak live set: {human(self.peak_live)}{per}"
               + (f" at {self.peak_at.text()}" if self.peak_at else "")]
        if self.largest_at is not None:
            out.append(f"  largest value: {human(self.largest)} at {self.largest_at.text()}")
        if self.temporaries:
            out.append(f"  temporaries (one instruction's scratch, at most): {human(self.temporaries)}")
        if self.constants:
            out.append(f"  constants: {human(self.constants)}")
        out.extend(f"  note: {n}" for n in self.notes)
        return out

    def to_dict(self) -> dict:
        return {"total_bytes": self.total, "parameters_bytes": self.parameters,
                "peak_live_bytes": self.peak_live,
                "peak_at": self.peak_at.to_dict() if self.peak_at else None,
                "largest_bytes": self.largest,
                "largest_at": self.largest_at.to_dict() if self.largest_at else None,
                "temporaries_bytes": self.temporaries, "constants_bytes": self.constants,
                "devices": self.devices, "notes": list(self.notes)}

    def to_record(self) -> dict:
        """Every field, as JSON values (from_record reads it back equal): the on-disk cache's form."""
        from dataclasses import asdict
        return asdict(self)

    @classmethod
    def from_record(cls, record: dict) -> "MemoryEstimate":
        """The estimate to_record wrote; raises TypeError/KeyError/ValueError for anything else."""
        fields = dict(record)
        for k in ("peak_at", "largest_at", "total_at"):
            if fields.get(k) is not None:
                fields[k] = Where(**fields[k])
        fields["notes"] = tuple(str(n) for n in fields.get("notes", ()))
        est = cls(**fields)
        if not all(isinstance(getattr(est, k), int) for k in ("parameters", "constants", "peak_live", "largest",
                                                               "temporaries", "total", "devices")):
            raise ValueError("not an estimate's record")
        return est


def estimate(module: Module, devices: int = 1) -> MemoryEstimate:
    """The memory a run of `module` needs (MemoryEstimate), computed statically from the shapes and
    the evaluator's own schedule and liveness (schedule.Plan: the instructions the root and the
    side effects need, in dependency order, each value freed after its last use).  Views
    (broadcast, reshape, transpose, reverse, copy, bitcast, tuple, get-tuple-element) share their
    operand's buffer; a called computation (call, fusion, while body and condition, conditional
    branches) adds its own peak to its caller's live set while it runs, computed once per
    computation (loop bodies count once; a while holds its previous state during an iteration);
    computations applied to whole arrays (reducers, comparators) count as a temporary.  Linear in
    the module and cached per module."""
    from dataclasses import replace

    from .per_module import module_cache
    per = module_cache(module)
    one = per.get("memory_estimate")
    if one is None:
        one = per["memory_estimate"] = _Estimator(module).run(1)
    devices = max(int(devices), 1)
    if devices == 1:
        return one
    return replace(one, devices=devices, total=(one.total - one.constants) * devices + one.constants)


def remember_estimate(module: Module, one: MemoryEstimate) -> None:
    """Take ONE (the one-device estimate of MODULE, computed earlier: the on-disk cache of `hlo run`)
    as `estimate`'s answer for MODULE instead of walking it."""
    from .per_module import module_cache
    if one.devices != 1:
        raise ValueError("remember_estimate takes the one-device estimate")
    module_cache(module)["memory_estimate"] = one


def check_budget(module: Module, limit, devices: int = 1, inputs_bytes: int | None = None) -> MemoryEstimate | None:
    """Refuse a run whose estimate is above `limit` (bytes; None: no check; "auto": what this machine
    can ever hold, memory_limit()) with an HloMemoryLimitError (exit code 5) that says the estimate,
    the limit, the largest contributors and how to override.  `inputs_bytes`: the bytes of inputs
    the caller already holds, when they differ from the parameters' declared sizes.

    With "auto", a module that a single value of (a parameter, one instruction's result, the
    devices' bookkeeping) could never fit on the machine is left to the checks the run makes
    itself (random inputs, preflight: exit code 4, naming that value) -- this check is about the
    whole run; with an explicit limit it refuses that too.  Returns the estimate (None: no check)."""
    if limit is None:
        return None
    auto = isinstance(limit, str)
    if auto:
        if limit != "auto":
            raise ValueError(f"limit must be bytes, None or 'auto', got {limit!r}")
        limit = memory_limit()
        if limit is None:
            return None
    est = estimate(module, devices)
    total = est.total
    if inputs_bytes is not None and inputs_bytes > est.parameters * est.devices:
        total += inputs_bytes - est.parameters * est.devices
    if total <= limit:
        return est
    if auto and (devices > limit // 64 or _single_value_too_big(module, limit, devices)):
        return est                     # the run's own checks name that value (exit code 4)
    from ..errors import HloMemoryLimitError
    what = "what this machine can ever hold (memory and swap, or the container's limit)" if auto \
        else "the limit (--max-memory)"
    lines = [f"the run needs an estimated {human(total)}, more than {what}: {human(limit)}"]
    lines += est.describe()[1:]
    if inputs_bytes is not None and inputs_bytes > est.parameters * est.devices:
        lines.append(f"  inputs as given: {human(inputs_bytes)}")
    lines.append("to run anyway: --max-memory SIZE (e.g. --max-memory 64GB) sets the limit, "
                 "--max-memory none skips this check")
    at = est.total_at or est.peak_at
    diags = []
    if at is not None:
        inst = module.computation_map.get(at.computation)
        inst = inst.by_name.get(at.name) if inst is not None else None
        if inst is not None:
            diags = [_diag(inst, "\n".join(lines), "R015")]
    raise HloMemoryLimitError("\n".join(lines), diags, estimate=est, limit=limit, total=total,
                              instruction=at.name if at else None)


def _single_value_too_big(module: Module, limit: int, devices: int) -> bool:
    for comp in module.computations:
        for inst in comp.instructions:
            need = result_bytes(inst.shape)
            if need is not None and need * devices > limit:
                return True
    return False


# -- the static walk -----------------------------------------------------------------------------

# results that share their operand's buffer (a NumPy view or the operand itself): views that cost
# nothing in this estimate (a fact of the estimate, not of the opcodes)
_FREE_VIEWS = frozenset(("copy", "opt-barrier", "domain", "transpose", "reverse", "broadcast",
                    "add-dependency"))
_FREE_PLAIN_VIEWS = frozenset(("copy", "opt-barrier", "domain", "add-dependency"))   # keep the operand's layout
_DOTS = frozenset(("dot", "convolution", "ragged-dot", "scaled-dot"))
_NARROW = frozenset(("bf16", "f16", "f8e5m2", "f8e4m3fn", "f8e4m3b11fnuz", "f8e5m2fnuz", "f8e4m3fnuz",
                     "f8e4m3", "f8e3m4", "f8e8m0fnu", "f4e2m1fn", "f6e2m3fn", "f6e3m2fn"))
# calls the walk follows into their computation (while, conditional, async-start: their own cases)
_FOLLOWED_CALLS = frozenset(("call", "fusion"))
# float results the evaluation rules flush to zero (XLA CPU's FTZ): np.abs of the result meanwhile
_FLUSHED = frozenset(("f32", "f64", "c64", "c128"))
_MAX_NESTING = 150          # computations calling computations: the walk recurses (2 frames a level)
# dots and convolutions of these types work at 8 bytes an element (f64 BLAS or int64)
_WIDE_WORK = frozenset(("f64", "s64", "u64", "s32", "u32", "s16", "u16", "s8", "u8", "s4", "u4", "s2", "u2",
                        "pred"))
# opcodes that may apply a computation to whole arrays or need scratch of their own
_SCRATCH = _DOTS | frozenset(("reduce", "reduce-window", "map", "sort", "scatter", "select-and-scatter",
                              "all-reduce", "reduce-scatter", "all-reduce-start", "custom-call", "async-start"))
# opcodes the walk treats otherwise than "a new array, no scratch"
_SPECIAL = frozenset(("parameter", "constant", "reshape", "bitcast", "tuple", "get-tuple-element", "async-done",
                      "copy-done", "call", "fusion", "async-start", "while", "conditional")) | _FREE_VIEWS | _SCRATCH


def _where(at) -> Where | None:
    """The Where of (instruction, computation name)."""
    if at is None:
        return None
    inst, comp_name = at
    shape = inst.shape.to_str(False) if inst.shape is not None else "?"
    if len(shape) > 80:
        shape = shape[:77] + "..."
    loc = inst.loc
    return Where(inst.name, inst.opcode, comp_name, shape, loc.file, loc.line, loc.column)


class _Summary:
    """One computation's walk, independent of its caller: `peak` (values) and `peak_total` (values
    + scratch) in bytes it allocates above its parameters, where they are reached ((instruction,
    computation name), innermost), and `root`: for each array leaf of its root, ("param", number,
    leaf index, strided) when the value is (a view of) a parameter's leaf, or ("new", bytes) when
    the computation allocated it (a constant's leaf: ("new", 0), counted with the constants)."""
    __slots__ = ("peak", "peak_at", "peak_total", "total_at", "root")

    def __init__(self):
        self.peak = self.peak_total = 0
        self.peak_at = self.total_at = None
        self.root: list = []


def _flat(v) -> list:
    """The array leaves (ints) of a value's structure, in order."""
    if type(v) is int:
        return [v]
    out, stack = [], [v]
    while stack:
        x = stack.pop()
        if type(x) is tuple:
            stack.extend(reversed(x))
        else:
            out.append(x)
    return out


class _Buffers:
    """The buffers of one computation's walk: `size[id]` bytes each.  A value's structure refers to
    them (see _Estimator)."""
    __slots__ = ("size", "est")

    def __init__(self, est: "_Estimator"):
        self.size: list[int] = []
        self.est = est

    def new(self, nbytes: int) -> int:
        self.size.append(nbytes)
        return (len(self.size) - 1) * 2

    def fresh(self, shape: Shape | None, external: bool = False):
        """A new value of `shape` (its buffers count 0 bytes when `external`: parameters, constants)."""
        if shape is not None and shape.tuple_shapes is not None:
            return tuple(self.fresh(t, external) for t in shape.tuple_shapes)
        b = self.est.info(shape)[0]
        if b is None:
            self.est.unknown += 1
            b = 0
        return self.new(0 if external else b)

    def nbytes_of(self, v) -> int:
        size = self.size
        if type(v) is int:
            return size[v >> 1]
        seen, total = set(), 0
        for leaf in _flat(v):
            b = leaf >> 1
            if b not in seen:
                seen.add(b)
                total += size[b]
        return total


class _Estimator:
    # A value's structure while walking: an int for an array leaf (buffer id * 2, + 1 when the leaf
    # is a strided view, which a reshape would copy), a tuple of structures for a tuple.
    def __init__(self, module: Module):
        self.module = module
        self.comps = module.computation_map
        self.summaries: dict[str, _Summary] = {}
        self.busy: set[str] = set()
        self.notes: list[str] = []
        self.unknown = 0
        self.largest, self.largest_at = 0, None
        self.scratch_max = 0
        self._shape_info: dict[int, tuple] = {}

    def info(self, shape: Shape | None):
        """(bytes or None when unknown, elements, element types) of `shape`, cached."""
        if shape is None:
            return None, 0, frozenset()
        got = self._shape_info.get(id(shape))
        if got is not None and got[0] is shape:
            return got[1]
        n, types = 0, set()
        for leaf in shape.leaves():
            types.add(leaf.element_type)
            if not any(d == UNBOUNDED for d in leaf.dims):
                n += leaf.num_elements
        r = (result_bytes(shape), n, frozenset(types))
        self._shape_info[id(shape)] = (shape, r)
        return r

    def run(self, devices: int) -> MemoryEstimate:
        m = self.module
        entry = m.entry_computation
        params = sum(result_bytes(p.shape) or 0 for p in entry.parameters)
        constants = 0
        for comp in m.computations:
            for inst in comp.instructions:
                if inst.opcode == "constant":
                    constants += result_bytes(inst.shape) or 0
        s = self._summary(entry.name)
        if self.unknown:
            self.notes.append(f"{self.unknown} value{'s' * (self.unknown != 1)} of unbounded or unknown "
                              f"shape not counted")
        return MemoryEstimate(parameters=params, constants=constants, peak_live=params + s.peak,
                              peak_at=_where(s.peak_at), largest=self.largest, largest_at=_where(self.largest_at),
                              temporaries=self.scratch_max, total=(params + s.peak_total) * devices + constants,
                              total_at=_where(s.total_at), devices=devices, notes=tuple(self.notes))

    def _summary(self, name: str) -> _Summary:
        s = self.summaries.get(name)
        if s is not None:
            return s
        comp = self.comps.get(name)
        if comp is None or name in self.busy:
            if name in self.busy:
                self.notes.append(f"computation '{name}' calls itself: counted once")
            return _Summary()
        if len(self.busy) >= _MAX_NESTING:
            note = f"computations called more than {_MAX_NESTING} deep: the deeper ones not counted"
            if note not in self.notes:
                self.notes.append(note)
            return _Summary()
        self.busy.add(name)
        try:
            s = self.summaries[name] = self._walk(comp)
        finally:
            self.busy.discard(name)
        return s

    @staticmethod
    def _schedule(comp):
        """The instructions a run of `comp` executes, in its order (schedule.run_order; None: names
        that do not resolve)."""
        try:
            order = run_order(comp)
        except KeyError:                     # an unchecked module naming what does not exist
            return None
        return [comp.instructions[k] for k in order]

    def _walk(self, comp) -> _Summary:
        """One computation's summary: its schedule walked with a live set of buffers (a value's
        buffers join it when computed and leave it after the value's last use)."""
        out = _Summary()
        sched = self._schedule(comp)
        if sched is None:
            self.notes.append(f"computation '{comp.name}' refers to undefined instructions: not counted")
            return out
        cname = comp.name
        pos = {inst.name: n for n, inst in enumerate(sched)}
        root = pos.get(comp.root, -1)
        opidx = [[pos[o] for o in inst.operands] for inst in sched]
        frees = free_after(opidx, root)
        bufs = _Buffers(self)
        size = bufs.size                     # buffer id -> bytes (0: a parameter's, or a constant's)
        origin: dict[int, tuple] = {}        # parameter buffer id -> (parameter number, leaf index)
        refs: dict[int, int] = {}            # buffer id -> live leaves referring to it
        vals: list = [None] * len(sched)
        live = peak = peak_total = 0
        peak_at = total_at = None
        info = self.info
        shape_info = self._shape_info

        def release(slots) -> int:
            """Drop the values in `slots`; the bytes of the buffers no live value refers to any more."""
            freed = 0
            for j in slots:
                x = vals[j]
                for leaf in ([x] if type(x) is int else _flat(x)):
                    b = leaf >> 1
                    c = refs[b] - 1
                    refs[b] = c
                    if c == 0:
                        freed += size[b]
                vals[j] = None
            return freed

        for n, inst in enumerate(sched):
            op = inst.opcode
            shape = inst.shape
            ops = opidx[n]
            if op not in _SPECIAL and shape is not None and shape.tuple_shapes is None \
                    and shape.element_type not in _NARROW \
                    and not any(sched[j].shape is None or sched[j].shape.element_type in _NARROW
                                or sched[j].shape.tuple_shapes is not None for j in ops):
                # the common case, quickly: an array result of its own, no scratch
                got = shape_info.get(id(shape))
                b = got[1][0] if got is not None and got[0] is shape else info(shape)[0]
                if b is None:
                    self.unknown += 1
                    b = 0
                size.append(b)
                bid = len(size) - 1
                vals[n] = bid * 2
                if b > self.largest:
                    self.largest, self.largest_at = b, (inst, cname)
                if live + b > peak or peak_at is None:
                    peak, peak_at = live + b, (inst, cname)
                scratch = b if shape.element_type in _FLUSHED else 0
                if scratch > self.scratch_max:
                    self.scratch_max = scratch
                if live + b + scratch > peak_total or total_at is None:
                    peak_total, total_at = live + b + scratch, (inst, cname)
                refs[bid] = 1
                live += b - release(frees[n])
                continue
            v, during, during_total, inner_at, inner_total_at = self._step(
                inst, [vals[j] for j in ops], bufs, origin, comp.by_name, cname)
            if live + during > peak or peak_at is None:
                peak, peak_at = live + during, inner_at or (inst, cname)
            if live + during_total > peak_total or total_at is None:
                peak_total, total_at = live + during_total, inner_total_at or (inst, cname)
            # the result joins the live set, then the values whose last use this was leave it
            vals[n] = v
            for leaf in ([v] if type(v) is int else _flat(v)):
                b = leaf >> 1
                c = refs.get(b, 0)
                if c == 0:
                    live += size[b]
                refs[b] = c + 1
            live -= release(frees[n])
        out.peak, out.peak_at, out.peak_total, out.total_at = peak, peak_at, peak_total, total_at
        if root >= 0:
            for leaf in _flat(vals[root]):
                b = leaf >> 1
                out.root.append(("param",) + origin[b] + (leaf & 1,) if b in origin else ("new", size[b]))
        return out

    def _step(self, inst, operands, bufs: "_Buffers", origin: dict, by_name, cname: str):
        """What instruction `inst` (other than the common case) adds: (its value's structure, bytes
        above the live set while it runs, the same with scratch, where the callee peaks, where its
        total peaks)."""
        op = inst.opcode
        shape = inst.shape
        fresh, nbytes_of = bufs.fresh, bufs.nbytes_of
        scratch = 0
        during_total = None              # bytes above `live` with scratch (None: during + scratch)
        inner_at = inner_total_at = None
        if op == "parameter":
            v = fresh(shape, external=True)
            for i, leaf in enumerate(_flat(v)):
                origin[leaf >> 1] = (inst.parameter_number, i)
            during = 0
        elif op == "constant":
            v = fresh(shape, external=True)          # counted once for the module (constants)
            during = 0
        elif op in _FREE_VIEWS and len(operands) == 1 and type(operands[0]) is int:
            v = operands[0] if op in _FREE_PLAIN_VIEWS else operands[0] | 1
            during = 0
        elif op in ("reshape", "bitcast") and len(operands) == 1 and type(operands[0]) is int \
                and not operands[0] & 1 and not (shape is not None and shape.is_dynamic):
            v = operands[0]                          # a view of a contiguous array
            during = 0
        elif op == "tuple":
            v = tuple(operands)
            during = 0
        elif op in ("get-tuple-element", "async-done", "copy-done") and len(operands) == 1 \
                and type(operands[0]) is tuple:
            k = inst.attrs.get("index") if op == "get-tuple-element" else 1
            if type(k) is int and 0 <= k < len(operands[0]):
                v, during = operands[0][k], 0
            else:
                v = fresh(shape)
                during = nbytes_of(v)
        elif op in _FOLLOWED_CALLS or op == "async-start" and "calls" in inst.attrs:
            callee = inst.attrs.get("to_apply") or inst.attrs.get("calls")
            s = self._summary(callee.name) if callee is not None else _Summary()
            v = self._instantiate(s, operands, shape if op != "async-start" else _element(shape, 1), bufs.new)
            if op == "async-start":
                rest = [fresh(t) for t in (shape.tuple_shapes[2:] if shape.is_tuple else ())]
                v = (tuple(operands), v, *rest)
            during, during_total = s.peak, max(s.peak_total, s.peak)
            inner_at, inner_total_at = s.peak_at, s.total_at
        elif op == "while":
            v, during, during_total, inner_at, inner_total_at = self._while(inst, operands, bufs)
        elif op == "conditional":
            v, during, during_total, inner_at, inner_total_at = self._conditional(inst, bufs)
        else:
            v = fresh(shape)
            during = nbytes_of(v)
            if during > self.largest:
                self.largest, self.largest_at = during, (inst, cname)
            # computations applied to whole arrays (reducers, comparators, combiners) count as
            # scratch; their instructions' values are not walked
            narrow = self._narrow
            if op in _SCRATCH or narrow(shape) or any(narrow(by_name[o].shape) for o in inst.operands
                                                       if o in by_name):
                scratch = self._scratch(inst, [getattr(by_name.get(o), "shape", None) for o in inst.operands])
            if scratch > self.scratch_max:
                self.scratch_max = scratch
        if during_total is None:
            during_total = during + scratch
        return v, during, during_total, inner_at, inner_total_at

    def _while(self, inst, operands, bufs: "_Buffers"):
        """A while's (value, during, during with scratch, where they peak): the larger of its body
        and condition on top of the state an iteration holds."""
        body, cond = inst.attrs.get("body"), inst.attrs.get("condition")
        sb = self._summary(body.name) if body is not None else _Summary()
        sc = self._summary(cond.name) if cond is not None else _Summary()
        v, held = self._loop_result(sb, operands[0] if operands else None, inst.shape, bufs.new)
        inner = sb if sb.peak >= sc.peak else sc
        during, inner_at = held + inner.peak, inner.peak_at
        inner = sb if sb.peak_total >= sc.peak_total else sc
        during_total, inner_total_at = max(held + inner.peak_total, during), inner.total_at
        return v, during, during_total, inner_at, inner_total_at

    def _conditional(self, inst, bufs: "_Buffers"):
        """A conditional's (value, during, during with scratch, where they peak): its largest branch."""
        names = [c.name for c in (inst.attrs.get("branch_computations") or ())]
        for a in ("true_computation", "false_computation"):
            if inst.attrs.get(a) is not None:
                names.append(inst.attrs[a].name)
        v = bufs.fresh(inst.shape)
        during = during_total = bufs.nbytes_of(v)
        inner_at = inner_total_at = None
        for nm in names:
            s = self._summary(nm)
            if s.peak > during:
                during, inner_at = s.peak, s.peak_at
            if s.peak_total > during_total:
                during_total, inner_total_at = s.peak_total, s.total_at
        return v, during, max(during_total, during), inner_at, inner_total_at

    def _narrow(self, shape) -> bool:
        return shape is not None and (shape.element_type in _NARROW or shape.tuple_shapes is not None
                                      and bool(self.info(shape)[2] & _NARROW))

    @staticmethod
    def _instantiate(s: _Summary, operands, shape, new):
        """The caller's value of a call's result: the callee's root leaves that are its parameters'
        are the caller's operands' buffers, the others new buffers of their bytes."""
        flat = [_flat(o) if o is not None else [] for o in operands]
        leaves = []
        for r in s.root:
            if r[0] == "param" and r[1] is not None and 0 <= r[1] < len(flat) and r[2] < len(flat[r[1]]):
                leaves.append(flat[r[1]][r[2]] | r[3])
            else:
                leaves.append(new(r[1] if r[0] == "new" else 0))
        return _shaped(shape, leaves)

    def _loop_result(self, sb: _Summary, state, shape, new):
        """A while's result (leaves its body passes through unchanged are its operand's buffers) and
        the bytes of the state an iteration holds while the next one runs."""
        flat = _flat(state) if state is not None else []
        leaves, held = [], 0
        shapes = list(shape.leaves()) if shape is not None else []
        for i, r in enumerate(sb.root):
            if r[0] == "param" and r[1] == 0 and r[2] == i and i < len(flat):
                leaves.append(flat[i] | r[3])
            else:
                b = self.info(shapes[i])[0] if i < len(shapes) else None
                b = (r[1] if r[0] == "new" else 0) if b is None else b
                held += b
                leaves.append(new(b))
        return _shaped(shape, leaves), held

    def _scratch(self, inst, operand_shapes) -> int:
        """The allowance for what `inst` allocates beyond its result while it runs (see
        MemoryEstimate.temporaries)."""
        op = inst.opcode
        infos = [self.info(s) for s in operand_shapes]
        res = self.info(inst.shape)
        types = res[2].union(*(i[2] for i in infos)) if infos else res[2]
        elems = res[1] + sum(i[1] for i in infos)
        if op in _DOTS:
            # one copy of the operands (transposed into place, or converted: at least 4 bytes an
            # element), and the result computed at 4 bytes an element when it is narrower
            wide = 16 if types & {"c64", "c128"} else 8 if types & _WIDE_WORK else 4
            out = sum(i[1] for i in infos) * wide
            if op == "convolution" or res[0] is not None and res[0] < res[1] * wide:
                out += res[1] * wide                 # a convolution sums into an accumulator
            dn = inst.attrs.get("dim_labels") if op == "convolution" else None
            if dn is not None and len(operand_shapes) == 2 and operand_shapes[1] is not None:
                # a convolution also gathers the input under one kernel tap at a time: every
                # output position times the input features of a group
                window = inst.attrs.get("window")
                taps = 1
                for w in (getattr(window, "dimensions", None) or ()):
                    taps *= max(int(getattr(w, "size", 1) or 1), 1)
                try:
                    o = max(int(operand_shapes[1].dims[dn.kernel_output_feature_dimension]), 1)
                except (IndexError, AttributeError, TypeError):
                    o = 1
                out += wide * (res[1] // o) * (infos[1][1] // o // taps)
            return out
        extra = 0
        if inst.called_computations:       # applied to whole arrays: reducers, comparators...
            extra += sum(i[0] or 0 for i in infos)
        if op == "sort":
            extra += 8 * (infos[0][1] if infos else res[1])
        if types & _NARROW:
            extra += 4 * elems
        elif res[2] & _FLUSHED:
            extra += res[0] or 0
        return extra


def _element(shape: Shape | None, k: int):
    if shape is None or not shape.is_tuple or k >= len(shape.tuple_shapes):
        return None
    return shape.tuple_shapes[k]


def _shaped(shape: Shape | None, leaves: list):
    """`leaves` (ints) arranged as `shape`'s tuple structure (a flat tuple when it does not fit)."""
    it = iter(leaves)
    if shape is None or sum(1 for _ in shape.leaves()) != len(leaves):
        return tuple(leaves) if len(leaves) != 1 else leaves[0]

    def build(s):
        if s.tuple_shapes is None:
            return next(it)
        return tuple(build(t) for t in s.tuple_shapes)
    return build(shape)
