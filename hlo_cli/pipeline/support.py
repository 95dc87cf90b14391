"""What of a module hlo can run, asked before it runs.

An instruction hlo cannot run is a custom call whose target the custom-call registry does not run
(asked of its table, interpreter/custom_call_targets.py, which the registry keeps true, so that
asking loads no handler) and the device layer does not run either (the shard_map markers,
devices/spmd.py).  Every such target is found before a run, with every instruction that calls it,
so one message names them all with their locations and says what to do instead
(HloUnsupportedError, exit code 7: hlo cannot run the module, which does not make the module
wrong).

    uses = custom_calls(module)          # every target: count, runnable, what it is, its call sites
    check_runnable(module)               # raises HloUnsupportedError naming every unrunnable target
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import Diagnostic, HloUnsupportedError

UNSUPPORTED_CODE = "R020"          # the diagnostics of a module hlo cannot run (one per target)


@dataclass(frozen=True)
class CustomCallUse:
    """One custom-call target of a module: the instructions calling it (module order) and whether hlo
    runs it (`reason`: why not, None when it runs)."""
    target: str
    sites: tuple                      # (computation name, Instruction)
    what: str | None                  # what a target hlo cannot run is (custom_call_known.describe), when known
    reason: str | None = None
    registered: bool = False          # the registry has a handler (which may refuse a configuration)

    @property
    def runnable(self) -> bool:
        return self.reason is None

    @property
    def count(self) -> int:
        return len(self.sites)

    @property
    def first(self):
        return self.sites[0][1]

    def locations(self) -> list[str]:
        return [f"{i.loc.file}:{i.loc.line}:{i.loc.column}" for _, i in self.sites]

    def to_dict(self) -> dict:
        return {"target": self.target, "count": self.count, "runnable": self.runnable, "what": self.what,
                "registered": self.registered,
                "reason": self.reason, "instructions": [i.name for _, i in self.sites],
                "locations": self.locations()}


def reachable_computations(module) -> list:
    """The computations the entry computation runs or calls (transitively), in module order."""
    comps = module.computation_map
    seen = {module.entry}
    stack = [module.entry]
    while stack:
        c = comps.get(stack.pop())
        if c is None:
            continue
        for inst in c.instructions:
            for callee in inst.called_computations:
                if callee not in seen:
                    seen.add(callee)
                    stack.append(callee)
    return [c for c in module.computations if c.name in seen]


def custom_calls(module) -> list[CustomCallUse]:
    """Every custom-call target the module's reachable computations call, in order of first call,
    each asked of the custom-call registry: does hlo run it?"""
    from ..interpreter.custom_call_known import describe
    from ..interpreter.custom_call_targets import SHARD_TARGETS, refusal, registered
    sites: dict = {}
    reasons: dict = {}
    for comp in reachable_computations(module):
        for inst in comp.instructions:
            if inst.opcode != "custom-call":
                continue
            target = inst.attrs.get("custom_call_target", "") or ""
            sites.setdefault(target, []).append((comp.name, inst))
            # (the device layer runs the shard markers)
            why = None if target in SHARD_TARGETS else refusal(inst, _registry_refusal)
            if why is not None and target not in reasons:
                reasons[target] = why
    # what a target is, for those hlo has no handler of (custom_call_known's kinds describe refusals); a
    # handler that refuses a configuration says why itself (the reason)
    return [CustomCallUse(t, tuple(s), describe(t) if t and t in reasons and not registered(t) else None,
                          reasons.get(t), registered=registered(t)) for t, s in sites.items()]


def _registry_refusal(inst) -> str | None:
    """The registry's own answer, for a target whose handler checks its configuration (loads them)."""
    from ..interpreter.ops.custom_call import refusal
    return refusal(inst)


def unrunnable(module) -> list[CustomCallUse]:
    """The custom-call targets of the module hlo cannot run."""
    return [u for u in custom_calls(module) if not u.runnable]


def describe_use(u: CustomCallUse) -> str:
    """`'__gpu$xla.gpu.triton' is a Triton kernel (compiled GPU code)`, for messages."""
    if not u.target:
        return "a custom call with an empty custom_call_target"
    if u.registered and u.reason:
        return f"'{u.target}': {u.reason}"
    return f"'{u.target}' is {u.what}" if u.what else f"'{u.target}' is not a target hlo knows"


def _sites_text(u: CustomCallUse) -> str:
    names = [i.name for _, i in u.sites]
    more = f" and {len(names) - 1} more ({', '.join(names[1:4])}{', ...' if len(names) > 4 else ''})" \
        if len(names) > 1 else ""
    return f"%{names[0]}{more}"


def unsupported_error(uses, what: str = "this module") -> HloUnsupportedError:
    """The error naming every target of USES (unrunnable CustomCallUses) with its location."""
    uses = list(uses)
    n = len(uses)
    calls = sum(u.count for u in uses)
    head = (f"hlo cannot run {what}: {n} custom-call target{'s' if n != 1 else ''} "
            f"({calls} call{'s' if calls != 1 else ''}) {'have' if n != 1 else 'has'} no implementation in hlo "
            f"(the module is not wrong; nothing was run)")
    diags = []
    for u in uses:
        i = u.first
        diags.append(Diagnostic(f"{_sites_text(u)}: {describe_use(u)}", i.loc.file, i.loc.line, i.loc.column,
                                "error", UNSUPPORTED_CODE, i.name))
    from ..interpreter.custom_call_known import advice
    hint = advice([(u.target, u.what) for u in uses])
    body = "\n".join(f"  {d.location}: {d.message}" for d in diags)
    return HloUnsupportedError(f"{head}\n{body}\n{hint}", diags, uses=uses, hint=hint)


def check_runnable(module, what: str = "this module") -> None:
    """Raise HloUnsupportedError (exit 7) naming every custom-call target of MODULE hlo cannot run,
    each once with its location; nothing when every instruction runs."""
    bad = unrunnable(module)
    if bad:
        raise unsupported_error(bad, what)


__all__ = ["CustomCallUse", "UNSUPPORTED_CODE", "check_runnable", "custom_calls", "describe_use",
           "reachable_computations", "unrunnable", "unsupported_error"]
