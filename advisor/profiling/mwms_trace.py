"""What a Keras MultiWorkerMirroredStrategy step looks like to the ring model, read off
``tf.profiler``'s XPlane events of one worker running alone; standard library only, so the
default test suite checks it without TensorFlow (``mwms_tracer`` is the TensorFlow adapter that
``keras_mwms`` and ``tf_custom_loop`` share). A custom training loop's step (``strategy.run`` of
a function that takes ``tf.GradientTape`` gradients and calls ``optimizer.apply_gradients``)
makes the same ops under the same name scopes as Keras's ``train_step``, which does just that.

**Where the all-reduce happens** (TensorFlow 2.21, Keras 3; ``keras/src/backend/tensorflow/
optimizer.py`` and ``tensorflow/python/distribute/cross_device_ops.py``,
``cross_device_utils.py``): Keras's ``train_step`` computes every gradient with one
``tape.gradient`` and then calls ``optimizer.apply_gradients``, whose
``_all_reduce_sum_gradients`` makes ONE ``ReplicaContext.all_reduce(SUM, grads)`` call. For MWMS
that is ``CollectiveAllReduce._all_reduce``: it reverses the gradient list (the last variable
first, "so that values follow the order in which they are calculated"), groups it with
``group_by_size(grads, bytes_per_pack)`` and launches one ``CollectiveReduceV2`` per pack on the
concatenation of the pack's tensors. ``bytes_per_pack`` comes from the strategy's
``CommunicationOptions`` (default 0, which ``group_by_size`` turns into a single pack of every
gradient); a pack is closed once it holds MORE than ``bytes_per_pack`` bytes. The packs run in
list order (they share an ordering token, so auto control dependencies chain them), and a pack
starts once its concatenation's inputs, its gradients, exist: its ready time is its last
gradient's. The parameter updates read the reduced tensors, so they run after the all-reduce.
With one worker and one device (``num_between_graph_workers == 1``) ``batch_reduce`` returns the
gradients untouched: the traced step has no collective at all, which is why the trace must come
from one worker alone (it then is pure compute).

**What the trace gives** (``tf.profiler.experimental.start/stop`` writes
``<logdir>/plugins/profile/<run>/<host>.xplane.pb``, an ``XSpace`` protobuf; TF 2.21 writes no
``trace.json.gz`` itself, that conversion lives in the TensorBoard profile plugin): the plane
``/host:CPU`` has one line per executor thread (``tf_Compute/...``) whose events are TensorFlow
ops named ``<op name>:<op type>``, e.g. ``StatefulPartitionedCall/gradient_tape/functional_1/
fc0_1/MatMul/MatMul:_MklMatMul``; an event starts ``line.timestamp_ns + offset_ps / 1000`` ns
after the ``profile_start_time`` stat of the ``Task Environment`` plane, which is on the wall clock
(``time.time_ns``). From them, per traced step:

- backward starts at the first op under ``gradient_tape/`` (the loss's gradient, the first thing
  ``tape.gradient`` runs) and ends with the last one;
- a variable's gradient is ready when the last ``gradient_tape`` op of its layer's name scope
  ends (its layer: the variable path's owner, ``fc0`` for ``fc0/kernel``; Keras uniquifies the
  scope as ``fc0_1``). A variable whose layer has no gradient op (a custom gradient outside the
  tape's scope) is taken ready at backward's end: exact when all gradients share one pack (the
  pack waits for its last gradient anyway), refused otherwise;
- the optimizer is the busy time of the ops under the optimizer's name scope (``sgd/``,
  ``adam/``...), placed after backward's end: with one worker Keras's updates may run while
  backward still runs, with more they wait for the all-reduce. One ``apply_gradients`` runs each
  op once under one scope, so an optimizer op seen twice (a ``tf.range`` loop of steps) or under
  two scopes (``adam``, ``adam_1``: steps unrolled by a Python loop) in one step means the traced
  call ran several steps, which is refused.

**The other collectives of a step** (Keras 3 ``backend/tensorflow/trainer.py``,
``reduce_per_replica``; ``distribute_lib.Strategy.reduce``): after ``strategy.run`` returns, the
step reduces every value it logs (the loss, each compiled metric) with
``strategy.reduce("MEAN", value, axis=0)``, which for MWMS is two all-reduces: the sum over
axis 0 (the value less its first dimension) and the count (an int64), "TODO: Should batch
reduce here instead of doing two". They share the gradients' ordering token, so they run after
the gradients' pack. With one worker they do not run at all, so the trace cannot show them; the
callback reads them off the step's logs instead (``metric_collectives``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from advisor.profiling.errors import ProfilingUnsupportedError

GRADIENT_SCOPE = "gradient_tape"
_UNIQUIFIED = re.compile(r"^(.*)_\d+$")


@dataclass(frozen=True, slots=True)
class OpEvent:
    """One TensorFlow op execution: ``name`` without the ``:<type>`` suffix, wall-clock ns."""

    name: str
    start_ns: int
    end_ns: int


def pack_layout(sizes: Sequence[int], bytes_per_pack: int) -> list[list[int]]:
    """Gradient positions per all-reduce pack, in the order TF reduces them (module docstring):
    the list reversed, then ``group_by_size``: a new pack starts after one exceeds the cap."""
    order = list(range(len(sizes)))[::-1]
    if bytes_per_pack <= 0:
        return [order] if order else []
    packs: list[list[int]] = []
    filled = 0
    for g in order:
        if not packs or filled > bytes_per_pack:
            packs.append([])
            filled = 0
        packs[-1].append(g)
        filled += sizes[g]
    return packs


COUNT_BYTES = 8  # the count of strategy.reduce("MEAN", v, axis=0) is an int64


def metric_collectives(logged: Sequence[tuple[str, Sequence[int], int]]) -> list[tuple[str, int]]:
    """The all-reduces a Keras step runs for what it logs (module docstring): per logged value
    ``(name, shape, dtype size)``, in the sorted order ``tree.map_structure`` visits a dict, the
    sum over axis 0 (``name/sum``) and the count (``name/count``), as (name, bytes)."""
    out: list[tuple[str, int]] = []
    for name, shape, itemsize in sorted(logged, key=lambda item: item[0]):
        elements = 1
        for dim in list(shape)[1:]:  # reduce_sum over axis 0; a scalar stays one element
            elements *= int(dim)
        out.append((f"{name}/sum", max(1, elements * int(itemsize))))
        out.append((f"{name}/count", COUNT_BYTES))
    return out


def declared_collectives(collectives: Iterable[tuple[str, int]], who: str) -> list[tuple[str, int]]:
    """The per-step all-reduces a custom loop declares besides its gradients' (e.g. a
    ``strategy.reduce(SUM, loss)`` as ``("loss", 4)``), checked: one worker's trace cannot show
    them (they do not run alone), so only the program can say what it reduces."""
    out: list[tuple[str, int]] = []
    for i, item in enumerate(collectives):
        try:
            name, size = item
        except (TypeError, ValueError):
            raise ProfilingUnsupportedError(
                f"{who}: collectives[{i}] must be a (name, bytes) pair, e.g. ('loss', 4), got {item!r}") from None
        if not isinstance(name, str) or not name:
            raise ProfilingUnsupportedError(f"{who}: collectives[{i}]'s name must be a non-empty string, got {name!r}")
        if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
            raise ProfilingUnsupportedError(
                f"{who}: collectives[{i}] ({name!r}) must reduce a whole number of bytes > 0, got {size!r}")
        out.append((name, size))
    return out


def layer_of(variable_path: str) -> str:
    """The layer owning a variable: ``fc0`` for ``fc0/kernel`` (Keras 3 ``path``) or
    ``model/fc0/kernel:0`` (a ``tf.Variable`` name)."""
    parts = [p for p in variable_path.split(":")[0].split("/") if p]
    return parts[-2] if len(parts) >= 2 else (parts[0] if parts else "")


def events_from_xspace(xspace: Any) -> list[OpEvent]:
    """Every TensorFlow op event on the host plane of a parsed ``XSpace`` (``xplane_pb2``)."""
    ops: list[OpEvent] = []
    origin = _profile_start_ns(xspace)
    for plane in xspace.planes:
        if plane.name != "/host:CPU":
            continue
        names = plane.event_metadata
        for line in plane.lines:
            base_ns = origin + int(line.timestamp_ns)
            for event in line.events:
                full = names[event.metadata_id].name
                op, sep, kind = full.rpartition(":")
                if not sep or not op or not kind or " " in full or "::" in full:
                    continue  # runtime annotations (ExecutorState::Process...), not ops
                start = base_ns + int(event.offset_ps) // 1000
                ops.append(OpEvent(op, start, start + int(event.duration_ps) // 1000))
    return ops


def _profile_start_ns(xspace: Any) -> int:
    """The ``profile_start_time`` stat (wall-clock ns, on TF 2.21's ``Task Environment`` plane):
    line times are relative to it; 0 when absent (times already absolute)."""
    for plane in xspace.planes:
        for stat in plane.stats:
            if plane.stat_metadata[stat.metadata_id].name == "profile_start_time":
                return int(stat.uint64_value or stat.int64_value)
    return 0


def _scopes(name: str) -> list[str]:
    return name.split("/")


def _in_scope(parts: Sequence[str], scope: str) -> bool:
    for part in parts:
        if part == scope:
            return True
        m = _UNIQUIFIED.match(part)
        if m and m.group(1) == scope:
            return True
    return False


def _busy_ns(intervals: Iterable[tuple[int, int]]) -> int:
    """Length of the union of ``intervals``."""
    total = 0
    end = None
    for s, e in sorted(intervals):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def step_facts(
    index: int,
    start_ns: int,
    next_start_ns: int,
    ops: Sequence[OpEvent],
    variables: Sequence[str],
    optimizer_scope: str,
    single_pack: bool,
) -> dict[str, Any]:
    """One bundle step (``allreduce_bundle.STEP_FIELDS``) from the ops that started in
    ``[start_ns, next_start_ns)``; times in us from ``start_ns``. Raises
    ``ProfilingUnsupportedError`` when the step's ops do not show a Keras training step."""
    mine = [op for op in ops if start_ns <= op.start_ns < next_start_ns]
    grads = [op for op in mine if GRADIENT_SCOPE in _scopes(op.name)]
    if not grads:
        raise ProfilingUnsupportedError(
            f"tf.profiler recorded no gradient op (name scope {GRADIENT_SCOPE}/) in traced step {index} "
            f"({len(mine)} op events): the step takes no tf.GradientTape gradient run as TensorFlow ops "
            "(e.g. jit_compile=True compiles it into XLA clusters; compile the model or the tf.function "
            "with jit_compile=False for the profiling run)"
        )
    back_start = min(op.start_ns for op in grads)
    back_end = max(op.end_ns for op in grads)
    ready: list[float] = []
    missing = []
    for path in variables:
        layer = layer_of(path)
        ends = [op.end_ns for op in grads if layer and _in_scope(_scopes(op.name), layer)]
        if not ends:
            missing.append(path)
            ends = [back_end]
        ready.append((max(ends) - start_ns) / 1e3)
    if missing and not single_pack:
        raise ProfilingUnsupportedError(
            f"no gradient op in the layer scope of {missing[:5]} (step {index}): their gradients' ready "
            "times are unknown, and with bytes_per_pack > 0 the packs need them; profile with the "
            "default CommunicationOptions (bytes_per_pack=0) or name the layers' scopes after them"
        )
    updates = [op for op in mine if _in_scope(_scopes(op.name), optimizer_scope)]
    several = _several_updates([op.name for op in updates], optimizer_scope)
    if several:
        raise ProfilingUnsupportedError(
            f"{several} in traced step {index}: one traced call applies gradients more than once (several "
            "training steps in one tf.function call: a loop, or steps_per_execution > 1), and the steps cannot "
            "be told apart; run one step per call for the profiling run"
        )
    opt = [(op.start_ns, op.end_ns) for op in updates]
    opt_ns = _busy_ns(opt)
    wall_us = (next_start_ns - start_ns) / 1e3
    back_end_us = (back_end - start_ns) / 1e3
    opt_us = min(opt_ns / 1e3, max(0.0, wall_us - back_end_us))
    return {
        "index": index,
        "wall_us": wall_us,
        "backward_start_us": (back_start - start_ns) / 1e3,
        "backward_end_us": back_end_us,
        "grad_ready_us": ready,
        "optimizer_us": [back_end_us, opt_us],
    }


def _several_updates(names: Sequence[str], scope: str) -> str:
    """What shows that the optimizer ran more than once, or "". One ``apply_gradients`` runs each
    of its ops once under one name scope (``adam`` or a uniquified ``adam_1``, after any outer
    scopes), so an op seen twice is a loop of steps (``tf.range``: a ``while`` body runs the same
    ops again) and two scopes are steps unrolled by a Python loop in the ``tf.function``."""
    counts: dict[str, int] = {}
    prefixes: set[str] = set()
    for name in names:
        counts[name] = counts.get(name, 0) + 1
        parts = _scopes(name)
        at = next(i for i, part in enumerate(parts) if _in_scope([part], scope))
        prefixes.add("/".join(parts[: at + 1]))
    if len(prefixes) > 1:
        return f"the optimizer's ops ran under {len(prefixes)} name scopes ({', '.join(sorted(prefixes)[:4])})"
    name, count = max(counts.items(), key=lambda item: item[1], default=("", 0))
    return f"the optimizer's op {name} ran {count} times" if count > 1 else ""


def check_single_worker(replicas: int, task_workers: int, strategy: str) -> None:
    """Refuse a trace that would hold all-reduce waits: one replica, one worker in TF_CONFIG."""
    if replicas != 1 or task_workers > 1:
        raise ProfilingUnsupportedError(
            f"{strategy} has {replicas} replica(s) in sync and TF_CONFIG lists {task_workers} worker(s); "
            "a profile needs exactly 1 worker with 1 device running alone (with more, the trace holds the "
            "all-reduce the model is meant to predict). Run the profiling job with 1 worker and 1 GPU/CPU"
        )


def bytes_of(shape: Sequence[int | None], dtype_size: int, name: str) -> int:
    """A gradient's bytes: the variable's elements times its dtype's size; refuses unknown shapes."""
    elements = 1
    for dim in shape:
        if dim is None:
            raise ProfilingUnsupportedError(f"variable {name} has an unknown shape {list(shape)}: its gradient size is unknown")
        elements *= int(dim)
    return elements * int(dtype_size)


def step_windows(begins_ns: Sequence[int]) -> list[tuple[int, int]]:
    """Consecutive ``(start, next start)`` pairs of the recorded step begin times."""
    return list(zip(begins_ns, begins_ns[1:]))

