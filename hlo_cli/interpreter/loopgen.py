"""While loops of small arrays as one generated Python function: the whole loop, not one call per
iteration (compiler.run_while hands a loop over once it has run LOOPGEN_AFTER iterations, at once
when it was generated before; short loops such as threefry's five rounds stay as they are).

A scan or a recurrent cell runs thousands of iterations of a body of a few dozen instructions on
arrays of a few dozen elements.  There every NumPy call has a fixed cost whatever it does,
and the per-step machinery of generated code (a call per step, a result check per step, a setting of
the processor's flags and a NaN check per run of float steps) costs as much again.  Here the
condition and the body (with its inlined callees: the steps of compiler.Compiled) become the
inside of one ``while`` of one function, with the loop state's elements as local variables:

* **the processor's FTZ/DAZ flags stay set** for the whole loop (cleared around the few steps that
  need them clear), so the float arithmetic of the body is bare NumPy calls, as XLA CPU runs it
  (f32 exp, tanh, rsqrt computed in f64 and NumPy's negative give the same bits with the flags set
  wherever the fast path keeps its result: ``flags_neutral`` probes it once);
* **loop-invariant work is done once**: a step whose operands do not change across iterations
  (state elements the body passes through unchanged, constants, and steps of those: the bias
  broadcasts of a cell, the f64 copies its small f32 products read of its weights) runs before the
  first iteration (and only if there is one); a step that would write into such a value's buffer
  (compiler._in_place) makes a new array instead;
* **a buffer the loop owns is updated in place**: a dynamic-update-slice of a state element into
  the same element (a scan's stacked outputs), when nothing else in the body reads that element, is
  written into the loop's own copy of the buffer (made once at the start) instead of copying the
  whole buffer every iteration; a dynamic slice whose readers all make new arrays is a view;
* **fewer NumPy calls**: broadcasts feeding float arithmetic are left to NumPy's broadcasting, the
  f64 copy of an operand read by several small products is made once, a small f32 product of
  C-contiguous operands is np.dot of the matrices (the gemm call matmul makes for its batch of one);
* **one check per iteration instead of one per step**: the result of each step is what the step's
  fast path (the rules' prepare stages, registry.prepare) computes whenever that fast path would not hand the step to its
  evaluation rule.  Where a fast path checks its result (exp, tanh, small products, max-reduces:
  zeros, subnormals, NaN), the same check runs here and, when it fails, that step is computed by the
  fast path itself with the flags clear.  NaN, whose sign only the rules decide, propagates through
  the body's arithmetic: the values leaving the iteration (and those read by steps that would not
  propagate a NaN) are checked, all at once and only those whose NaNs would not show in another
  checked value, and an iteration that made a NaN is run again from its start by the body's
  generated code (compiler.Compiled.fn), which gives the rules' NaN signs; after GIVE_UP such
  iterations (in more than a quarter of them) the rest of the loop runs as before.  The iteration's
  results are committed (state updated, in-place writes done) only after that check.  As an
  iteration may run twice, a body with a step that is not a pure function of its operands (rng, io,
  collectives, custom calls) is not generated.

This module decides which loops and analyses them (`LoopPlan`: the body's values by name, what is
invariant, which buffers the loop owns); the code is written by the one code generator's loop
mode (codegen.loop_function), whose emission strategies are the written-out forms above.
Same bits as the body's generated code and the rules: tests/interpreter/test_loopgen.py.  Errors
are reported by the body's own code: an iteration that raises is run again there.
``HLO_LOOPGEN=0`` turns this off.
"""
from __future__ import annotations

import os

from .codegen import Unsupported, flags_neutral, loop_function
from .fpenv import hardware
from .kernels import ELEMENT, FOLDED, PURE, REGION, SAME, TUPLE, WITH_EC, capabilities
from .values import conforms

__all__ = ["FastLoop", "LoopPlan", "fast_loop", "known_loop", "enabled", "flags_neutral",
           "LOOPGEN_AFTER", "GIVE_UP", "SMALL"]

# bodies whose computed values are all at most this many elements (state buffers written in place
# and arrays only sliced may be larger)
SMALL = 1 << 14
# an iteration run again this many times, and in more than a quarter of the iterations: the rest
# of the loop runs as before
GIVE_UP = 8

# a loop is handed over once it has run this many iterations (short loops, such as the five rounds
# of a threefry random draw, are not worth generating code for)
LOOPGEN_AFTER = 16

# opcodes of steps that may run before the loop when their operands do not change
_HOISTABLE = frozenset("""add subtract multiply divide negate exponential tanh rsqrt dot reduce
reshape broadcast transpose bitcast copy slice concatenate convert compare select and or xor not
maximum minimum""".split())
# opcodes whose steps (fast path or rule) return new arrays, never their operands or views of them
_COPYING = frozenset("""add subtract multiply divide negate exponential tanh rsqrt sqrt dot reduce
concatenate slice dynamic-slice dynamic-update-slice compare select convert maximum minimum""".split())


def _raw_reduce(kernel) -> bool:
    """A reduce whose kernel the loop writes out as one flat sum or one min/max ufunc reduction (the
    forms hoisting may move out of the loop when its operands do not change)."""
    caps = capabilities(kernel)
    return caps.raw_sum is not None or caps.raw_minmax is not None


def enabled() -> bool:
    return os.environ.get("HLO_LOOPGEN", "1") != "0" and hardware() is not None


class FastLoop:
    """A while loop of `cond` and `body` (compiler.Compiled, both with generated code) as one
    generated function; `run` is called by compiler.run_while."""

    def __init__(self, fn, code, n_state, owned, cond, body):
        self.fn, self.code, self.n_state, self.owned = fn, code, n_state, owned
        self.cond, self.body = cond, body

    def run(self, ec, state, n, limit, name):
        """(state, iterations done, conditions run, bodies run, finished): unfinished when the loop
        gave up (too many iterations run again, or a state of another form); the caller goes on."""
        shape = self.body.comp.parameters[0].shape
        if conforms(state, shape) is not None:
            return state, n, 0, 0, False
        return self.fn(ec, state, n, limit, name)


def known_loop(cond, body) -> bool:
    """True when fast_loop was asked about this loop before (it is then taken at once)."""
    return body.loops is not None and id(cond) in body.loops


def fast_loop(cond, body, module=None):
    """The FastLoop of a while loop of `cond` and `body` (generated code both) of `module`, or None
    when its body is not one of small arrays, or has a step that is not a pure function of its
    operands (rng, io, collectives, custom calls: an iteration may run twice).  Cached on the body."""
    loops = body.loops
    if loops is None:
        loops = body.loops = {}
    key = id(cond)
    got = loops.get(key)
    if got is None:
        got = None
        try:
            if enabled():
                plan = LoopPlan(cond, body, module)
                fn, _text = loop_function(plan)
                got = FastLoop(fn, fn.__code__, plan.n_state, plan.owned, cond, body)
        except Unsupported:
            got = None
        except Exception:                   # noqa: BLE001 -- a body this generator gets wrong
            if os.environ.get("HLO_LOOPGEN") == "strict":       # (tests)
                raise
            got = None                      # runs as before
        loops[key] = (cond, got if got is not None else False)
        return got
    return got[1] or None


class LoopPlan:
    """What the loop mode of the code generator (codegen.LoopWriter) needs to know of a while loop
    of `cond` and `body`: the body's steps that compute, by name (`work`: the state's elements are
    ``s<j>``, the body's values ``b<slot>``, the condition's ``c<slot>``), the names of its root's
    elements (`out`), the invariant names (`inv`), the dynamic-update-slices written in place
    (`inplace`) into the state buffers the loop owns (`owned`), the condition's parts
    (`cond_parts`).  Raises codegen.Unsupported for a loop that is not for that mode."""

    def __init__(self, cond, body, module):
        if module is None:
            raise Unsupported
        from .hoist import Hoister
        self.pure = Hoister(module).pure_inst
        self.cond, self.body = cond, body
        self.give_up = GIVE_UP
        pshape = body.comp.parameters[0].shape if len(body.params) == 1 else None
        if pshape is None or not pshape.is_tuple or len(cond.params) != 1:
            raise Unsupported
        self.n_state = len(pshape.tuple_shapes)
        self.state_shapes = pshape.tuple_shapes
        self.work, self.out = self._analyse()
        self.inv = self._invariants(self.work)
        self.by_name = {name: st for st, name in self.work}
        self.inplace = self._in_place_writes(self.out, self.by_name, self.inv)
        self.owned = sorted({j for j, _ in self.inplace.values()})
        self.cond_parts = self._resolve(cond, "c")

    def _resolve(self, c, prefix):
        """Aliases of `c`'s slots (SAME steps, elements of tuples built in the computation, elements
        of the state), as names; the steps that compute."""
        (_, pslot), = c.params
        names: dict[int, str] = {}
        members: dict[int, list] = {pslot: [f"s{j}" for j in range(self.n_state)]}
        shapes: dict[str, object] = {f"s{j}": s for j, s in enumerate(self.state_shapes)}
        work = []
        for st in c.steps:
            kind, pay, ops, k, inst = st.kind, st.payload, st.operands, st.slot, st.inst
            if kind == REGION:
                raise Unsupported
            if kind == SAME:
                j = ops[0]
                if j in members:
                    members[k] = members[j]
                else:
                    names[k] = names[j]
                continue
            if kind == ELEMENT and ops[0] in members:
                m = members[ops[0]][pay]
                if isinstance(m, list):
                    members[k] = m
                else:
                    names[k] = m
                continue
            if kind == TUPLE:
                members[k] = [members[j] if j in members else names[j] for j in ops]
                continue
            if kind != FOLDED and not self.pure(inst):
                raise Unsupported                   # (an iteration run again would repeat it)
            name = f"{prefix}{k}"
            names[k] = name
            shapes[name] = inst.shape
            work.append((st, name))
        return names, members, shapes, work

    def _analyse(self):
        """The body's steps that compute (with their names) and the names of its root's elements;
        what the writer needs to know of the names: shapes, readers, uses, the loop's outputs."""
        names, members, shapes, work = self._resolve(self.body, "b")
        if self.body.root not in members:
            raise Unsupported
        out = members[self.body.root]
        if any(isinstance(m, list) for m in out) or len(out) != self.n_state:
            raise Unsupported
        self.names, self.shapes = names, shapes
        self.passthrough = {f"s{j}" for j in range(self.n_state) if out[j] == f"s{j}"}
        for name, shape in shapes.items():            # small arrays only
            if name.startswith("b") and not shape.is_tuple and shape.num_elements > SMALL:
                raise Unsupported
        # uses of each name by the steps and the root
        uses: dict[str, int] = {}
        for st, _name in work:
            for a in self.opnames(st):
                if a is None:
                    raise Unsupported                   # a tuple operand: not for this generator
                uses[a] = uses.get(a, 0) + 1
        for m in out:
            uses[m] = uses.get(m, 0) + 1
        self.uses = uses
        self.readers: dict[str, list] = {}          # name -> the opcodes and names of its readers
        for st, name in work:
            for a in self.opnames(st):
                self.readers.setdefault(a, []).append((st.inst.opcode if st.kind != ELEMENT else None, name))
        self.outputs = set(out)
        return work, out

    def opnames(self, st):
        """The names of a body step's operands (None: a tuple)."""
        names = self.names
        return [names[j] if j in names else None for j in st.operands]

    def _invariants(self, work) -> set:
        """The names whose values do not change across iterations: state elements passed through,
        folded constants, and the hoistable steps of those."""
        inv = set(self.passthrough)
        for st, name in work:
            kind, pay = st.kind, st.payload
            if kind == FOLDED:
                inv.add(name)
            elif st.inst.opcode in _HOISTABLE and kind in (PURE, WITH_EC) and \
                    all(a in inv for a in self.opnames(st)) and (kind == PURE or _raw_reduce(pay)):
                inv.add(name)
        return inv

    def _in_place_writes(self, out, by_name, inv) -> dict:
        """{DUS name: (state index, operand names)}: the dynamic-update-slices written in place into
        a buffer the loop owns."""
        inplace: dict[str, tuple] = {}
        uses = self.uses
        for j, m in enumerate(out):
            st = by_name.get(m)
            if st is None or st.kind != PURE or capabilities(st.payload).where is None or m in inv or \
                    st.inst.opcode != "dynamic-update-slice":
                continue
            ops = self.opnames(st)
            if ops[0] != f"s{j}" or uses.get(ops[0]) != 1 or uses.get(m) != 1 or ops[0] in ops[1:]:
                continue
            inplace[m] = (j, ops)
        return inplace

    def parts(self, m):
        """The values a NaN check of `m` looks at: a dynamic-update-slice's update and operand."""
        st = self.by_name.get(m)
        if st is not None and st.kind == PURE and st.inst.opcode == "dynamic-update-slice" and \
                capabilities(st.payload).where is not None:
            ops = self.opnames(st)
            return self.parts(ops[0]) + [ops[1]]
        return [m]

    def viewable(self, name, depth=0) -> bool:
        """True when every reader of `name` (through reshapes, bitcasts, transposes, broadcasts)
        makes a new array of it, so a view in place of a copy is never kept or written."""
        if name in self.outputs or depth > 8:
            return False
        for opcode, user in self.readers.get(name, ()):
            if opcode in _COPYING:
                continue
            if opcode in ("reshape", "bitcast", "transpose", "broadcast"):
                if self.viewable(user, depth + 1):
                    continue
            return False
        return True

    def dims(self, name):
        """The dims of a value of the body, or None."""
        s = self.shapes.get(name)
        if s is None and name.startswith("s") and name[1:].isdigit():
            s = self.state_shapes[int(name[1:])]
        if s is None or s.is_tuple or s.is_dynamic:
            return None
        return tuple(s.dims)
