"""TensorFlow's trace data, normalised: what every reader produces and the profile builder reads.

TensorFlow emits the same facts in three encodings (protobuf-JSON ``RunMetadata`` lines,
binary ``RunMetadata``, and the condensed dump in ``tests/data/ps-async``). Each reader only decodes
its encoding into these plain records; ``tf_profile.build_profile_from_trace`` does the
interpretation (pairing transfers, recovering dependencies, classifying resources) once.

Field meanings follow TensorFlow's protos: ``NodeDef`` in partition graphs and
``NodeExecStats`` in ``StepStats.dev_stats[].node_stats[]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class GraphNode:
    """A ``NodeDef`` of a partition graph (only the fields the builder needs)."""

    name: str
    op: str
    device: str
    inputs: tuple[str, ...] = ()  # "name", "name:1" (output slot) or "^name" (control input)
    tensor_name: str | None = None  # attr tensor_name of _Send/_Recv
    send_device: str | None = None
    recv_device: str | None = None
    client_terminated: bool = False


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """A ``NodeExecStats`` of one step on one device.

    ``name`` is ``node_name``; for transfers TensorFlow writes ``RecvTensor`` there and the
    tensor name, sizes and devices in ``label`` (``timeline_label``).
    """

    device: str
    name: str
    start_us: int  # all_start_micros (absolute, shared clock)
    end_rel_us: int  # all_end_rel_micros
    label: str = ""
    requested_bytes: int | None = None  # output[0] allocation description, if recorded
    # Shape of each output by slot (None where the record gives neither a shape nor bytes and
    # dtype); () when the record lists no outputs. See tf_shapes.output_shape.
    output_shapes: tuple[tuple[int, ...] | None, ...] = ()


@dataclass(frozen=True, slots=True)
class StepRecords:
    """All node records of one ``session.run`` step."""

    index: int
    records: tuple[NodeRecord, ...]
    client_start_us: int | None = None
    client_end_us: int | None = None


@dataclass(frozen=True, slots=True)
class TraceRecords:
    """A whole traced run: the partition graphs once, then the steps."""

    graph: tuple[GraphNode, ...]
    steps: tuple[StepRecords, ...]
    batch_size: int | None = None
    model: str | None = None
    source: str | None = None
    bandwidth_bps: float | None = None
    variable_bytes: dict[str, int] = field(default_factory=dict)
    # client wall time of each step the recorder timed untraced after the traced ones (µs)
    untraced_walls_us: tuple[float, ...] = ()
