"""Roles: `with kd.role(first, groups, registers=R):` gives whole groups of a cube their own
code (a producer group that only issues bulk copies, consumer groups that only multiply),
handed work through arrival barriers.

Native where arrival barriers are (`Capabilities.bulk_copy`): the role's body is guarded by
its units' group, roles run concurrently, and a kd.barrier_wait inside a role waits on the
hardware barrier; `registers` moves registers between roles (setmaxnreg) where
`Capabilities.register_budgets`. Elsewhere roles run one after another in program order (a
cube barrier ends each), copies land at once, and a wait inside a role must therefore find its
phase complete already: the interpreter checks it (PhaseCheck) and raises if not.
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import ir
from ..errors import CompileError
from .registry import builtin

REGISTER_STEP = 8  # setmaxnreg counts registers in multiples of 8
MIN_REGISTERS, MAX_REGISTERS = 24, 256
REGISTER_FILE = 64 * 1024  # registers a cube may hold (every device with register budgets)


@dataclass(frozen=True)
class RoleSpec:
    """What kd.role(...) evaluates to: the groups it covers and their register budget."""
    first: int
    groups: int
    registers: int | None


@builtin("Within `with`: the body runs on groups first .. first+groups-1 only (see docs/dsl.md, Roles).")
def role(fe, node, first, groups=1, registers=None):
    first = fe.ct(first, node, "kd.role first group")
    groups = fe.ct(groups, node, "kd.role group count")
    for what, v, low in (("first group", first, 0), ("group count", groups, 1)):
        if not isinstance(v, int) or isinstance(v, bool) or v < low:
            raise fe.error(node, f"kd.role: the {what} must be a compile-time int >= {low}, got {v!r}")
    if registers is not None:
        registers = fe.ct(registers, node, "kd.role registers")
        if (not isinstance(registers, int) or isinstance(registers, bool) or registers % REGISTER_STEP
                or not MIN_REGISTERS <= registers <= MAX_REGISTERS):
            raise fe.error(node, f"kd.role: registers must be a compile-time multiple of {REGISTER_STEP} in "
                                 f"{MIN_REGISTERS}..{MAX_REGISTERS}, got {registers!r}")
    return RoleSpec(first, groups, registers)


@builtin("Barrier over the units of the enclosing kd.role (reached by all of them).")
def sync_role(fe, node):
    """Orders the role's shared-memory accesses as kd.sync_cube() orders the cube's, without
    waiting for the other roles (natively a named barrier of the role's units)."""
    if fe.role is None:
        raise fe.error(node, "kd.sync_role() outside a kd.role: use kd.sync_cube()")
    fe.emit(ir.Barrier(origin="kd.sync_role()", role=(fe.role.first_unit, fe.role.units), loc=fe.loc(node)))


def lower_role(fe, node, spec: RoleSpec):
    """Emit a `with kd.role(...)` statement: an ir.Role holding the body, followed by a cube
    barrier where arrival barriers are emulated (roles then run in program order)."""
    loc = fe.loc(node)
    if fe.role is not None:
        raise fe.error(node, f"kd.role inside another kd.role (line {fe.role.loc.line}): roles do not nest")
    group_units = ir.GROUP_PLANES * fe.spec.plane_dim
    units = fe.cube_units()
    first, count = spec.first * group_units, spec.groups * group_units
    if units % group_units or first + count > units:
        raise fe.error(node, f"kd.role({spec.first}, {spec.groups}): the cube has {units} units, "
                             f"{units // group_units} whole groups of {ir.GROUP_PLANES} planes "
                             f"({group_units} units); the role's groups must be among them")
    registers = spec.registers
    if registers is not None:
        if len(fe.blocks) != 1 or fe.loops:
            raise fe.error(node, "kd.role with registers must be a statement of the kernel's top level (not in "
                                 "a loop or an if): the budget is set once, when the role starts")
        fe.register_roles.append((first, count, registers, loc))
        if not fe.spec.caps.register_budgets:
            registers = None
    stmt = ir.Role(first_unit=first, units=count, registers=registers, loc=loc)
    fe.role = stmt
    try:
        stmt.body = fe.sub_block(node.body)
    finally:
        fe.role = None
    fe.emit(stmt)
    if not fe.spec.caps.bulk_copy:
        fe.emit(ir.Barrier(origin="the end of a kd.role (roles run in program order here)", loc=loc))


def check_register_budgets(fe):
    """Register budgets must cover every unit of the cube and fit its register file: a role
    asking for more registers waits until others give theirs back."""
    roles = fe.register_roles
    if not roles:
        return
    units = fe.cube_units()
    covered = [0] * units
    for first, count, _, _ in roles:
        for u in range(first, first + count):
            covered[u] += 1
    if any(c != 1 for c in covered):
        raise CompileError(f"kernel {fe.kernel_name}: kd.role register budgets must cover every group of the cube "
                           f"exactly once ({units} units), so that the registers one role gives back are those "
                           f"another takes", roles[0][3])
    total = sum(count * regs for _, count, regs, _ in roles)
    if total > REGISTER_FILE:
        raise CompileError(f"kernel {fe.kernel_name}: kd.role register budgets total {total} registers, more than "
                           f"the {REGISTER_FILE} of a cube", roles[0][3])
