"""One copy of a kernel's code per role, for devices whose roles run natively.

A unit's trace through a kernel with kd.role statements is the code outside roles plus the
bodies of the roles it belongs to. Natively (hardware arrival barriers) the guarded form,
`for ...: if (producer) {..} if (consumers) {..}`, runs that trace, but ptxas sees one
program for every unit: a producer's setmaxnreg.dec is ignored because the consumers' code
follows it, and group products whose waits straddle the producer's branch are serialised
(C7518). So, from the first top-level statement holding a role on, the renderer emits one copy
of the code per *part* (groups that belong to the same roles), each with only its part's role
bodies, chosen once by the unit's group: the same trace for every unit, in a shape ptxas
can allocate and schedule per role.

Not applied (the guarded form stays) when that suffix holds a cube barrier (every copy would
need the same barrier instruction; kd.sync_role's named barriers are fine) or the parts are not runs of consecutive groups.
"""
from __future__ import annotations

import copy

from kerneldsl import ir


def _roles(stmts) -> list:
    return [s for s in ir.walk_stmts(stmts) if isinstance(s, ir.Role)]


def _parts(roles: list, cube_units: int, group_units: int):
    """[(first unit, units)] of each run of groups that belong to the same roles, or None
    when some signature's groups are not consecutive."""
    signature = []
    for g in range(cube_units // group_units):
        u = g * group_units
        signature.append(tuple(i for i, r in enumerate(roles) if r.first_unit <= u < r.first_unit + r.units))
    parts, seen = [], set()
    for g, sig in enumerate(signature):
        if g and sig == signature[g - 1]:
            parts[-1][1] += group_units
            continue
        if sig in seen:
            return None
        seen.add(sig)
        parts.append([g * group_units, group_units])
    return [tuple(p) for p in parts]


def _restrict(stmts, lo: int, hi: int) -> list:
    """`stmts` as units lo .. hi - 1 run them: roles of theirs inlined (kept as an unguarded
    Role for the register budget), other roles dropped."""
    out = []
    for s in stmts:
        if isinstance(s, ir.Role):
            if s.first_unit <= lo and hi <= s.first_unit + s.units:
                mine = copy.copy(s)
                mine.body = _restrict(s.body, lo, hi)
                mine.guarded = False
                out.append(mine)
            continue
        if isinstance(s, ir.If):
            s = copy.copy(s)
            s.then, s.orelse = _restrict(s.then, lo, hi), _restrict(s.orelse, lo, hi)
        elif isinstance(s, (ir.For, ir.While)):
            s = copy.copy(s)
            s.body = _restrict(s.body, lo, hi)
        out.append(s)
    return out


def role_copies(k: ir.KernelIR) -> ir.KernelIR:
    """The kernel with its code from the first role on copied per part (see the module doc),
    or `k` itself where that does not apply."""
    body = k.body
    first = next((i for i, s in enumerate(body) if _roles([s])), None)
    if first is None:
        return k
    suffix = body[first:]
    if any(isinstance(s, ir.Barrier) and s.role is None for s in ir.walk_stmts(suffix)):
        return k
    group_units = k.plane_dim * ir.GROUP_PLANES
    parts = _parts(_roles(suffix), k.cube_units, group_units)
    if parts is None or len(parts) < 2:
        return k
    # each copy ends the kernel for its units: nothing it computed is live into the next copy
    # (otherwise a fragment written in one copy and overwritten in the next, e.g. by a group
    # product's accumulator operand, counts as live across the copies, outside their register
    # budgets: ptxas then serialised the group products of two consumer copies, C7512)
    branches = [ir.Role(first_unit=lo, units=n, registers=None,
                        body=_restrict(suffix, lo, lo + n) + ([ir.Return(loc=suffix[-1].loc)] if i < len(parts) - 1
                                                              else []), loc=suffix[0].loc)
                for i, (lo, n) in enumerate(parts)]
    out = copy.copy(k)
    out.body = body[:first] + branches
    return out
