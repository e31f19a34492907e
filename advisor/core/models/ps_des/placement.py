"""PS-count what-if: a one-PS profile rewritten as the same program on M parameter servers.

Why a profile transformation: the simulator already runs any number of PS (each PS has its
own downlink, uplink and compute, ``simulator/inputs.py``); what a one-PS trace lacks is only
*where* each operation would run with M PS. TensorFlow decides that per variable, so:

1. **Variables** are the PS operations of a variable type (``VARIABLE_TYPES``: what
   ``tf.compat.v1.train.replica_device_setter`` puts on a PS), in creation order where the
   trace recorded it (``JobInfo.variable_order``: ``global_step`` is usually first, which
   round-robin then puts with the odd variables), else in the order the profile lists them.
   They are placed on M PS by ``ps_placement``:
   ``round-robin`` (the device setter's default ``_RoundRobinStrategy``: the k-th variable on
   PS k mod M) or ``greedy-bytes`` (``GreedyLoadBalancingStrategy`` with ``byte_size_load_fn``:
   in creation order, each variable on the PS with the fewest bytes so far, ties to the lowest
   index). A variable's bytes are those of its largest transfer (a pull carries the whole
   variable; a control edge carries 0).
2. **PS computation follows its variable** (TF colocates reads and updates with the
   variable): an op that depends directly on a variable belongs to it. A synchronous program's
   (``SyncReplicasOptimizer``) resources follow theirs too, as TF creates them: each gradient
   accumulator on its variable's device, the token queue on ``global_step``'s. A one-worker trace
   does not link an accumulator to its variable (the chief's ops that read both are not in it),
   so accumulators are matched to variables in creation order by size: the k-th accumulator
   takes the next variable whose pull has as many bytes as the gradient pushed to it (the
   trainable variables in the optimizer's order; ``global_step``, pulled but never pushed, is
   passed over). An op that depends directly on such a resource belongs to its variable as
   well (an accumulator's apply, the queue's dequeue). Otherwise an op belongs to the one
   variable its PS-side dependencies belong to; failing that (e.g. the op that gathers every
   update before ``global_step`` is incremented), to the variable of its first PS-side
   dependent that has one; failing that, to the first variable. So each PS's compute is
   exactly the traced compute of the variables it holds.
3. **Pulls** come from the PS of the op they read (their PS-side dependency). **Pushes** go
   to the PS of the ops that consume them; a tensor consumed on several PS (the learning rate,
   read by every update) is sent once to each, as TF sends one ``_Send``/``_Recv`` pair per
   destination device: the push is copied, the copies named ``<name>@ps<i>`` for every PS
   but the lowest, each with the traced bytes and durations.

With M = 1 the profile is returned unchanged (``--ps 1`` is today's prediction, bit for bit).
What it cannot see: a dependency between ops now on different PS (e.g. the ``global_step``
increment waiting for every update) costs nothing here, where TF sends a 0-byte control
message PS to PS; and per-PS effects that a one-PS trace does not show (a PS's CPU shared by
several updates at once, gRPC threads per PS).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from advisor.core.profile import Operation, Profile, Resource, StepTiming
from advisor.errors import ModelInputError

Placement = Literal["round-robin", "greedy-bytes"]
PLACEMENTS: tuple[str, ...] = ("round-robin", "greedy-bytes")
# tf.compat.v1.train.replica_device_setter's default ps_ops (the resource variable and the
# classic ref variables, and the mutable tables).
VARIABLE_TYPES = frozenset({
    "Variable", "VariableV2", "AutoReloadVariable", "VarHandleOp", "MutableHashTable", "MutableHashTableV2",
    "MutableHashTableOfTensors", "MutableHashTableOfTensorsV2", "MutableDenseHashTable", "MutableDenseHashTableV2",
})  # fmt: skip
# SyncReplicasOptimizer's per-variable gradient accumulators (resource and ref kinds, dense and
# sparse) and the queues it creates (its token queue): PS resources that are not variables
ACCUMULATOR_TYPES = frozenset({"ResourceConditionalAccumulator", "ConditionalAccumulator",
                               "SparseConditionalAccumulator"})
QUEUE_TYPES = frozenset({"FIFOQueueV2", "FIFOQueue"})
TOKEN_QUEUE_VARIABLE = "global_step"  # SyncReplicasOptimizer: with ops.device(global_step.device): token queue
_WHO = "ps placement"


def variables(profile: Profile) -> tuple[int, ...]:
    """Positions of the profile's variables (PS ops of a variable type) in creation order: as
    ``job.variable_order`` lists them where the trace recorded it (a partition graph's node order
    is not TF's creation order: it put ``global_step``, created first, last), the rest after them
    in profile order."""
    found = [i for i, op in enumerate(profile.ops) if op.resource is Resource.PS and op.op_type in VARIABLE_TYPES]
    order = {name: k for k, name in enumerate(profile.job.variable_order or ())}
    return tuple(sorted(found, key=lambda i: (order.get(profile.ops[i].name.split(":", 1)[-1], len(order)), i)))


def owners(profile: Profile) -> list[int | None]:
    """Per op, the variable (position) it belongs to; None for worker compute (module docstring)."""
    ops, deps = profile.ops, profile.dep_indices
    var = set(variables(profile))
    if not var:
        raise ModelInputError(_WHO, "the profile names no variables (PS ops of type VarHandleOp, VariableV2, ...): "
                                    "it cannot say which PS each transfer would use")  # fmt: skip
    first = min(var)
    dependents: list[list[int]] = [[] for _ in ops]
    for i, ds in enumerate(deps):
        for d in ds:
            dependents[d].append(i)
    ps_compute = [op.resource is Resource.PS for op in ops]
    owner: list[int | None] = [None] * len(ops)
    resources = _resource_variables(profile, dependents)  # accumulators and queues: their variable
    order = profile.topological_order
    for i in order:
        if not ps_compute[i]:
            continue
        if i in var:
            owner[i] = i
            continue
        if i in resources:
            owner[i] = resources[i]
            continue
        direct = [d for d in deps[i] if d in var] or [resources[d] for d in deps[i] if d in resources]
        found = {owner[d] for d in deps[i] if ps_compute[d] and owner[d] is not None}
        owner[i] = direct[0] if direct else (found.pop() if len(found) == 1 else None)
    for i in reversed(order):
        if ps_compute[i] and owner[i] is None:
            below = [owner[d] for d in dependents[i] if ps_compute[d] and owner[d] is not None]
            owner[i] = below[0] if below else first
    for i, op in enumerate(ops):
        if op.resource is Resource.DOWNLINK:
            src = [owner[d] for d in deps[i] if ps_compute[d]]
            owner[i] = src[0] if src else first
    return owner


def _resource_variables(profile: Profile, dependents: list[list[int]]) -> dict[int, int]:
    """{resource position: variable position} for a synchronous program's accumulators and token
    queue (module docstring, 2.); empty for any other program."""
    ops, deps = profile.ops, profile.dep_indices
    var = variables(profile)
    var_set = set(var)
    pulled = {v: 0 for v in var}  # a variable's bytes: its largest pull, through the op that reads it
    for i, op in enumerate(ops):
        if op.resource is Resource.DOWNLINK:
            for d in deps[i]:
                for v in ([d] if d in var_set else [x for x in deps[d] if x in var_set]):
                    pulled[v] = max(pulled[v], op.bytes)
    out: dict[int, int] = {}
    position = 0  # the accumulators are matched in creation order: the next variable of equal size
    for a in (i for i, op in enumerate(ops) if op.resource is Resource.PS and op.op_type in ACCUMULATOR_TYPES):
        pushed = max((ops[d].bytes for j in dependents[a] for d in deps[j] if ops[d].resource is Resource.UPLINK),
                     default=0)
        match = next((k for k in range(position, len(var)) if pushed and pulled[var[k]] == pushed), None)
        if match is not None:
            out[a] = var[match]
            position = match + 1
    step = next((v for v in var if ops[v].name.split(":", 1)[-1] == TOKEN_QUEUE_VARIABLE), None)
    if step is not None:
        for q, op in enumerate(ops):
            if op.resource is Resource.PS and op.op_type in QUEUE_TYPES:
                out[q] = step
    return out


def variable_bytes(profile: Profile, owner: list[int | None]) -> dict[int, int]:
    """Each variable's size: the bytes of its largest pull (or push to its updates)."""
    size = {v: 0 for v in variables(profile)}
    for i, op in enumerate(profile.ops):
        if op.resource is Resource.DOWNLINK and owner[i] is not None:
            size[owner[i]] = max(size[owner[i]], op.bytes)  # type: ignore[index]
    for i, op in enumerate(profile.ops):
        if op.resource is Resource.UPLINK:
            for v in _consumer_vars(profile, owner, i):
                size[v] = max(size[v], op.bytes)
    return size


def place(profile: Profile, parameter_servers: int, strategy: str = "round-robin") -> dict[str, int]:
    """{variable name: PS index} for ``parameter_servers`` PS (the placement to print)."""
    _check(profile, parameter_servers, strategy)
    var = variables(profile)
    if parameter_servers == profile.job.parameter_servers:
        return {profile.ops[v].name: int(profile.ops[v].ps or 0) for v in var}
    out: dict[str, int] = {}
    if strategy == "round-robin":
        for k, v in enumerate(var):
            out[profile.ops[v].name] = k % parameter_servers
        return out
    size = variable_bytes(profile, owners(profile))
    load = [0] * parameter_servers
    for v in var:
        target = min(range(parameter_servers), key=lambda p: (load[p], p))
        out[profile.ops[v].name] = target
        load[target] += size[v]
    return out


def with_parameter_servers(profile: Profile, parameter_servers: int, strategy: str = "round-robin") -> Profile:
    """``profile`` (traced with one PS) as the same program on ``parameter_servers`` PS."""
    _check(profile, parameter_servers, strategy)
    if parameter_servers == profile.job.parameter_servers:
        return profile
    placement = place(profile, parameter_servers, strategy)
    owner = owners(profile)
    ps_of_var = {v: placement[profile.ops[v].name] for v in variables(profile)}
    new_ops: list[Operation] = []
    copies: list[list[int]] = []  # per new op, the old op whose timings it takes
    renamed: dict[tuple[str, int], str] = {}  # (push name, destination PS) -> name of its copy
    for i, op in enumerate(profile.ops):
        if op.resource is Resource.UPLINK:
            dests = sorted({ps_of_var[v] for v in _consumer_vars(profile, owner, i)}) or [0]
            for k, p in enumerate(dests):
                name = op.name if k == 0 else f"{op.name}@ps{p}"
                renamed[(op.name, p)] = name
                new_ops.append(op.model_copy(update={"name": name, "ps": p}))
                copies.append([i])
        elif op.resource is Resource.WORKER:
            new_ops.append(op)
            copies.append([i])
        else:
            new_ops.append(op.model_copy(update={"ps": ps_of_var[owner[i]]}))  # type: ignore[index]
            copies.append([i])
    # Each PS-side consumer of a push now reads the copy sent to its own PS.
    pushes = {op.name for op in profile.ops if op.resource is Resource.UPLINK}
    for j, op in enumerate(new_ops):
        if op.resource is not Resource.WORKER and any(d in pushes for d in op.deps):
            deps = tuple(renamed.get((d, int(op.ps or 0)), d) if d in pushes else d for d in op.deps)
            new_ops[j] = op.model_copy(update={"deps": deps})
    source = [c[0] for c in copies]
    steps = tuple(
        StepTiming(index=s.index, start_us=tuple(s.start_us[i] for i in source),
                   duration_us=tuple(s.duration_us[i] for i in source), wall_us=s.wall_us)
        for s in profile.steps
    )  # fmt: skip
    job = profile.job.model_copy(update={"parameter_servers": parameter_servers})
    return Profile(job=job, ops=tuple(new_ops), steps=steps)


def ps_bytes(profile: Profile) -> list[int]:
    """Bytes each PS sends and receives per step (pulls + pushes), to print beside a placement."""
    out = [0] * profile.job.parameter_servers
    for op in profile.ops:
        if op.resource.is_transfer:
            out[int(op.ps or 0)] += op.bytes
    return out


def _consumer_vars(profile: Profile, owner: list[int | None], push: int) -> Iterable[int]:
    """The variables of the PS computations that consume transfer ``push``."""
    name = profile.ops[push].name
    for j, op in enumerate(profile.ops):
        if op.resource is Resource.PS and name in op.deps and owner[j] is not None:
            yield owner[j]  # type: ignore[misc]


def _check(profile: Profile, parameter_servers: int, strategy: str) -> None:
    if strategy not in PLACEMENTS:
        raise ModelInputError(_WHO, f"ps_placement {strategy!r} is not one of {', '.join(PLACEMENTS)}")
    if parameter_servers < 1:
        raise ModelInputError(_WHO, f"parameter_servers must be >= 1, got {parameter_servers}")
    traced = profile.job.parameter_servers
    if parameter_servers != traced and traced != 1:
        raise ModelInputError(_WHO, f"the profile was traced with {traced} PS; a PS-count what-if starts from a "
                                    f"one-PS profile (asked for {parameter_servers})")  # fmt: skip
