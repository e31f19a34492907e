"""The namespace testbed the recorders share (record_ps_traces.py, record_allreduce_ddp.py,
record_allreduce_mwms.py): every task a network namespace on one bridge, its link shaped with
``tc tbf`` both ways, as ``tests/data/ps-async/README.md`` describes the testbed its runs came
from; plus the stand-in for the controller's ingest endpoint and the process reaper they use.

Each recorder names its own namespace prefix and subnet, so that two can run side by side.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

# A burst of a few frames: tbf then splits every larger GSO packet into wire-size frames, each
# paying its headers, as on a real link (about 95 % TCP goodput, as the runs of tests/data/ps-async
# measured); a 64 KB burst let whole GSO packets through on one header (99 %).
BURST = "4kb"


def run(*cmd: str) -> None:
    subprocess.run(cmd, check=True)


def ns_exec(ns: str, *cmd: str) -> None:
    run("ip", "netns", "exec", ns, *cmd)


def shape(ns: str, dev: str, mbit: float, queue_ms: float, delay_ms: float = 0.0) -> None:
    """tbf at ``mbit`` with a ``queue_ms`` queue on ``dev``, behind a netem delay when one is asked."""
    tbf = ["tbf", "rate", f"{mbit}mbit", "burst", BURST, "latency", f"{queue_ms}ms"]
    if delay_ms > 0:
        ns_exec(ns, "tc", "qdisc", "add", "dev", dev, "root", "handle", "1:", "netem", "delay", f"{delay_ms}ms")
        ns_exec(ns, "tc", "qdisc", "add", "dev", dev, "parent", "1:1", "handle", "10:", *tbf)
    else:
        ns_exec(ns, "tc", "qdisc", "add", "dev", dev, "root", *tbf)


def setup_network(prefix: str, subnet: str, names: Sequence[str], *, mbit: float, queue_ms: float,
                  delay_ms: float = 0.0, shaped: Callable[[str], bool] = lambda name: True,
                  rate: Callable[[str], float | None] = lambda name: None,
                  sysctls: Mapping[str, str] | None = None, congestion: str = "cubic") -> dict[str, str]:
    """Namespaces ``<prefix>-<name>`` on a bridge in ``<prefix>-br``, addresses ``<subnet>.1..``,
    TCP ``congestion`` (cubic unless said), and each ``shaped`` task's link shaped both ways at ``mbit``, or at its own
    ``rate(name)`` where that is not None (a slower NIC); ``sysctls`` (name: value) set in every
    task's namespace (a new namespace starts from the kernel's defaults, not the host's settings);
    returns each task's address."""
    teardown_network(prefix)
    bridge = f"{prefix}-br"
    run("ip", "netns", "add", bridge)
    ns_exec(bridge, "ip", "link", "set", "lo", "up")
    ns_exec(bridge, "ip", "link", "add", "br0", "type", "bridge")
    ns_exec(bridge, "ip", "link", "set", "br0", "up")
    addresses = {}
    for k, name in enumerate(names):
        ns, peer = f"{prefix}-{name}", f"b-{name}"
        run("ip", "netns", "add", ns)
        ns_exec(ns, "ip", "link", "set", "lo", "up")
        # both ends created inside the namespaces: nothing touches the host's own
        ns_exec(bridge, "ip", "link", "add", peer, "type", "veth", "peer", "name", "eth0", "netns", ns)
        ns_exec(bridge, "ip", "link", "set", peer, "master", "br0")
        ns_exec(bridge, "ip", "link", "set", peer, "up")
        address = f"{subnet}.{k + 1}"
        ns_exec(ns, "ip", "addr", "add", f"{address}/24", "dev", "eth0")
        ns_exec(ns, "ip", "link", "set", "eth0", "up")
        # the namespace's sysctl default is the host's (bbr here) and read-only: a route attribute
        # sets the congestion control for every connection on the subnet instead
        ns_exec(ns, "ip", "route", "replace", f"{subnet}.0/24", "dev", "eth0", "congctl", "lock", congestion)
        for key, value in (sysctls or {}).items():
            ns_exec(ns, "sysctl", "-q", "-w", f"{key}={value}")
        own = rate(name)
        if shaped(name) or own is not None:
            shape(ns, "eth0", own or mbit, queue_ms, delay_ms)  # task -> bridge
            shape(bridge, peer, own or mbit, queue_ms, delay_ms)  # bridge -> task
        addresses[name] = address
    return addresses


# TCP counters read at the end of a run: retransmissions, and why (a timeout costs at least the
# minimum RTO, 200 ms; a fast retransmit or a tail-loss probe about one round trip)
TCP_COUNTERS = {"Tcp": ("OutSegs", "RetransSegs"),
                "TcpExt": ("TCPTimeouts", "TCPLossProbes", "TCPFastRetrans", "TCPSlowStartRetrans",
                           "TCPLostRetransmit", "TCPSpuriousRTOs")}


def _proc_counters(text: str) -> dict[str, int]:
    """``/proc/net/snmp`` or ``netstat``: header and value lines in pairs, per protocol."""
    lines = text.splitlines()
    found: dict[str, int] = {}
    for header, values in zip(lines[::2], lines[1::2]):
        proto, names = header.split(":", 1)
        wanted = TCP_COUNTERS.get(proto, ())
        for name, value in zip(names.split(), values.split(":", 1)[1].split()):
            if name in wanted:
                found[name] = int(value)
    return found


def _qdisc_counters(text: str) -> dict[str, int]:
    """The tbf's ``Sent B bytes P pkt (dropped D, overlimits O ...)`` of ``tc -s qdisc``."""
    for qdisc in text.split("qdisc ")[1:]:
        if qdisc.startswith("tbf"):
            sent = qdisc.split("Sent ", 1)[1].split()
            dropped = qdisc.split("dropped ", 1)[1].split(",")[0]
            return {"sent_bytes": int(sent[0]), "sent_packets": int(sent[2]), "dropped": int(dropped)}
    return {}


def network_counters(prefix: str, names: Sequence[str]) -> dict[str, dict[str, object]]:
    """Per task, since its namespace was made: its TCP counters (``tcp``) and, for a shaped link,
    the tbf counters of the direction task -> bridge (``out``) and bridge -> task (``in``). Why:
    whether losses and timeouts differ between arrangements is what a run's step log cannot show."""
    def read(ns: str, *cmd: str) -> str:
        return subprocess.run(["ip", "netns", "exec", ns, *cmd], capture_output=True, text=True, check=True).stdout

    counters: dict[str, dict[str, object]] = {}
    for name in names:
        ns = f"{prefix}-{name}"
        tcp = _proc_counters(read(ns, "cat", "/proc/net/snmp")) | _proc_counters(read(ns, "cat", "/proc/net/netstat"))
        task: dict[str, object] = {"tcp": tcp}
        out, into = _qdisc_counters(read(ns, "tc", "-s", "qdisc", "show", "dev", "eth0")), \
            _qdisc_counters(read(f"{prefix}-br", "tc", "-s", "qdisc", "show", "dev", f"b-{name}"))
        if out:
            task["out"] = out
        if into:
            task["in"] = into
        counters[name] = task
    return counters


def add_probe_run(path: Path, how: str, run: dict[str, object]) -> None:
    """Append ``run`` (its timings and settings) to the probe file at ``path``, stamped with when
    it was recorded, and set the file's ``how``; the file is made when missing."""
    doc = json.loads(path.read_text()) if path.is_file() else {"runs": []}
    doc["how"] = how
    doc["runs"].append({**run, "recorded": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1) + "\n")


def teardown_network(prefix: str) -> None:
    """Delete every namespace named ``<prefix>-...`` (deleting one removes its veths too)."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    for line in listed.splitlines():
        name = line.split()[0] if line.strip() else ""
        if name.startswith(f"{prefix}-"):
            subprocess.run(["ip", "netns", "del", name], check=False)


class IngestStub(http.server.BaseHTTPRequestHandler):
    """Stands in for the controller's ingest endpoint: keeps the last uploaded body."""

    body: bytes | None = None

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        length = int(self.headers.get("content-length", "0"))
        type(self).body = self.rfile.read(length)
        reply = b'{"profile": "stored"}'
        self.send_response(202)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


class Ingest:
    """An ``IngestStub`` serving on localhost from now on, with a token file: what a profiling hook
    in the recording process uploads to, as it would to the controller."""

    def __init__(self) -> None:
        self.server = http.server.HTTPServer(("127.0.0.1", 0), IngestStub)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.token = Path(tempfile.mkdtemp()) / "token"
        self.token.write_text("record\n")

    def environ(self, steps: int, warmup: int, **extra: str) -> dict[str, str]:
        """The hook's environment: profile ``steps`` after ``warmup``, upload here; plus ``extra``."""
        return {"ADVISOR_PROFILE": "1", "ADVISOR_INGEST_URL": f"http://127.0.0.1:{self.server.server_port}/ingest",
                "ADVISOR_TOKEN_FILE": str(self.token), "ADVISOR_PROFILE_STEPS": str(steps),
                "ADVISOR_PROFILE_WARMUP": str(warmup), **extra}

    def bundle(self, uploader: str) -> bytes:
        """Stop serving; the uploaded bundle (already gzip), or exit naming ``uploader`` if none came."""
        self.server.shutdown()
        if IngestStub.body is None:
            raise SystemExit(f"{uploader} uploaded nothing")
        return IngestStub.body


def wait_workers(workers: Sequence[subprocess.Popen[bytes]], logs: Path, timeout_s: float) -> None:
    """Wait for every worker (its output in ``logs/w<k>.log``) within one deadline; the first that
    fails or outlives it ends the recording with the tail of its log."""
    deadline = time.monotonic() + timeout_s
    for k, proc in enumerate(workers):
        try:
            code = proc.wait(timeout=max(deadline - time.monotonic(), 1.0))
        except subprocess.TimeoutExpired:
            code = None
        if code != 0:
            tail = (logs / f"w{k}.log").read_text(errors="replace")[-4000:]
            raise SystemExit(f"worker {k} of {len(workers)} failed ({code}); logs in {logs}:\n{tail}")


@contextlib.contextmanager
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    """A list to put started processes in; on leaving, each still running is killed and reaped."""
    started: list[subprocess.Popen[bytes]] = []
    try:
        yield started
    finally:
        for proc in started:  # only the processes this script started, by their handle
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=30)
