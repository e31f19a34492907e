"""What the command writes besides its results (advisor/cli_output.py): -q and -v mean the same in
every subcommand, progress bars only on a terminal, and no color with NO_COLOR.

The bar tests run the real command (``python -m advisor``) with stderr a pipe, and with stderr a
pseudo-terminal (Python's ``pty``); the rest run ``main`` in this process.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from advisor import cli_output
from advisor.cli import _parser, main
from advisor.cli_args import NORMAL, QUIET, VERBOSE, verbosity
from advisor.controller.pipeline.prediction_job import TOKEN_ENV
from advisor.controller.state.store import Store
from advisor.importers.loader import BUNDLED_EXAMPLE, load_profile
from advisor.importers.profile_file import profile_to_json

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = str(BUNDLED_EXAMPLE)
DTS_EXAMPLE = str(ROOT / "advisor" / "data" / "dts-example.yaml")
FAST = ["--workers", "1,2", "--steps", "60", "--warmup", "10"]
KEY = "0123456789abcdef01234567"

# The subcommands that draw a bar, run on the bundled example (named, so no note about it), and
# the words their bar starts with.
BARS = {
    "predict": (["predict", EXAMPLE, "--workers", "1-3", "--steps", "60", "--warmup", "10", "--jobs", "1"],
                "simulated", "3"),
    "compare": (["compare", EXAMPLE, *FAST, "--models", "li2020-des,cynthia,phase-mva"], "predicted", "3"),
    "fit-contention": (["fit-contention", EXAMPLE, "--observed", "2=120", "--sigmas", "0.5,1", "--etas", "0.9",
                        "--steps", "80"], "fitted", "2"),
}


# --- every subcommand takes -q and -v ------------------------------------------------------------


def _leaves(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...],
                                                                                         argparse.ArgumentParser]]:
    """Every subcommand that runs something (``advisor profile inspect``, ``advisor models``, ...)."""
    groups = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not groups:
        yield path, parser
    for group in groups:
        for name, sub in group.choices.items():
            yield from _leaves(sub, (*path, name))


def test_every_subcommand_offers_q_and_v() -> None:
    leaves = dict(_leaves(_parser()))
    assert set(leaves) >= {("predict",), ("compare",), ("models",), ("profile", "inspect"), ("profile", "convert"),
                           ("calibrate",), ("fit-contention",), ("opdb", "build"), ("opdb", "show"), ("store", "list"),
                           ("store", "export"), ("dts",), ("controller",), ("predict-job",)}
    for path, parser in leaves.items():
        text = parser.format_help()
        assert "-q, --quiet" in text and "-v, --verbose" in text, " ".join(path)


@pytest.mark.parametrize(("argv", "expected"), [
    (["models"], NORMAL),
    (["models", "-q"], QUIET), (["models", "--quiet"], QUIET), (["-q", "models"], QUIET),
    (["models", "-v"], VERBOSE), (["models", "-vv"], VERBOSE), (["--verbose", "models"], VERBOSE),
    (["profile", "inspect", "-q"], QUIET), (["store", "-v", "list"], VERBOSE),
])
def test_the_flags_mean_the_same_before_and_after_a_subcommand(argv: list[str], expected: int) -> None:
    assert verbosity(_parser().parse_args(argv)) == expected


def test_quiet_and_verbose_together_are_one_error_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["models", "-q", "-v"]) == 2
    captured = capsys.readouterr()
    assert captured.err == "advisor: error: -q/--quiet and -v/--verbose contradict each other: give one\n"
    assert captured.out == ""


# --- -q: results only, in every subcommand -------------------------------------------------------


class _Controller:
    """A controller for ``predict-job``: its input is a profile that cannot be read, so the
    answer is the reason (quick), which it accepts."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            def _answer(self, body: object) -> None:
                raw = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                self._answer({"profile": {"not": "a profile"}, "params": {}})

            def do_PUT(self) -> None:  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                self._answer({})

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """Files and a controller that the subcommands below read: a store holding one profile, an
    op database, a place to write to."""
    store = tmp_path / "advisor.db"
    text = json.dumps(profile_to_json(load_profile(BUNDLED_EXAMPLE)), sort_keys=True, separators=(",", ":"))
    with Store(store) as s:
        s.ensure_run("uid-a", "ml", "mlp", 1, "mlp-prof-g1", 1000.0)
        s.put_trace("uid-a", 1, b"raw", text, hashlib.sha256(text.encode()).hexdigest(), 1000.0)
    assert main(["opdb", "build", EXAMPLE, "-o", str(tmp_path / "db.json"), "-q"]) == 0
    monkeypatch.setenv(TOKEN_ENV, "t0ken")
    monkeypatch.delenv("ADVISOR_CONFIG_FILE", raising=False)
    controller = _Controller()
    yield {"tmp": str(tmp_path), "store": str(store), "controller": controller.url}
    controller.close()


# Each subcommand with what it writes to stderr without -q (a note), or None where it writes nothing.
COMMANDS = [
    (["models"], None),
    (["profile", "inspect"], "(no profile given: using the bundled example"),
    (["profile", "convert", "-o", "{tmp}/p.json"], "(no profile given: using the bundled example"),
    (["calibrate"], "(no profile given: using the bundled example"),
    (["predict", *FAST, "--timeline", "{tmp}/t.json"], "wrote {tmp}/t.json (4 workers, 20 steps each)"),
    (["compare", *FAST, "--models", "li2020-des,cynthia"], "(no profile given: using the bundled example"),
    ([*BARS["fit-contention"][0]], None),
    (["opdb", "build", EXAMPLE, "-o", "{tmp}/db2.json"], None),
    (["opdb", "show", "{tmp}/db.json"], None),
    (["dts", DTS_EXAMPLE, "--samples", "20"], None),
    (["store", "list", "--store", "{store}"], None),
    (["store", "export", "ml/mlp", "--store", "{store}", "-o", "{tmp}/x.json"], "wrote {tmp}/x.json: ml/mlp generation 1"),
    (["controller", "--check-config"], None),
    (["predict-job", "--controller", "{controller}", "--key", KEY, "--retry-for", "0"],
     f"prediction {KEY}: cannot predict: "),
]


@pytest.mark.parametrize(("argv", "note"), COMMANDS, ids=[" ".join(a[:2]) for a, _ in COMMANDS])
def test_quiet_leaves_the_results_alone_and_stderr_empty(argv: list[str], note: str | None, places: dict[str, str],
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    argv = [a.format(**places) for a in argv]
    assert main(argv) == 0
    loud = capsys.readouterr()
    if note is not None:
        assert note.format(**places) in loud.err
    assert main([*argv, "-q"]) == 0
    quiet = capsys.readouterr()
    assert quiet.err == ""
    assert quiet.out.splitlines()[:3] == loud.out.splitlines()[:3]  # the results' heads (times in them may differ)
    assert main([*argv, "-v"]) == 0


def test_verbose_adds_debug_detail(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", EXAMPLE, *FAST, "--jobs", "1"]) == 0
    assert "advisor: debug:" not in capsys.readouterr().err
    assert main(["predict", EXAMPLE, *FAST, "--jobs", "1", "-v"]) == 0
    err = capsys.readouterr().err
    assert "advisor: debug: model li2020-des+contention, parameters as default; 2 worker count(s) on 1 process(es)" \
        in err


@pytest.mark.parametrize(("flags", "level"), [([], None), (["-q"], "WARNING"), (["-v"], "DEBUG")])
def test_the_controller_takes_its_log_level_from_q_and_v(flags: list[str], level: str | None,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a flag the controller's settings decide (log_level, INFO by default)."""
    import advisor.controller.main

    seen: list[str | None] = []
    monkeypatch.setattr(advisor.controller.main, "run_controller", lambda **kw: seen.append(kw["log_level"]) or 0)
    assert main(["controller", *flags]) == 0
    assert seen == [level]


def test_quiet_still_shows_warnings(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """predict-job retrying a busy controller is a warning: -q keeps it, and the error at the end."""
    monkeypatch.setenv(TOKEN_ENV, "t0ken")

    class Busy(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(503)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Busy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        assert main(["predict-job", "--controller", url, "--key", KEY, "--retry-for", "0.6", "-q"]) == 2
    finally:
        server.shutdown()
        server.server_close()
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("advisor: warning: GET ") and "; retrying in 0.5 s" in err[0]
    assert err[-1].startswith("advisor: error: ") and "gave up after 0.6 s" in err[-1]


# --- progress bars: on a terminal only -----------------------------------------------------------


def _env(**extra: str) -> dict[str, str]:
    """The environment of a real command: this checkout's code, no TQDM_* settings from outside."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TQDM_") and k not in ("NO_COLOR", "TERM")}
    return {**env, "PYTHONPATH": str(ROOT), **extra}


def _on_a_terminal(argv: list[str], **env: str) -> tuple[bytes, str]:
    """(what the command wrote to stderr, a pseudo-terminal 100 columns wide; its stdout, a pipe)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "advisor", *argv], stdout=subprocess.PIPE, stderr=slave,
                            env=_env(**env), cwd=ROOT)
    os.close(slave)
    err, deadline = b"", time.monotonic() + 300
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 1.0)
        if not ready:
            if proc.poll() is not None:
                break
            continue
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the command ended and closed the terminal
            break
        if not data:
            break
        err += data
    os.close(master)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, err.decode(errors="replace")
    return err, out.decode()


@pytest.mark.parametrize("command", list(BARS))
def test_a_pipe_gets_no_progress(command: str) -> None:
    argv, words, _ = BARS[command]
    done = subprocess.run([sys.executable, "-m", "advisor", *argv], capture_output=True, text=True, env=_env(),
                          cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "\r" not in done.stderr and words not in done.stderr
    assert all(line.startswith("advisor: warning: ") for line in done.stderr.splitlines()), done.stderr
    assert done.stdout.strip()


@pytest.mark.parametrize("command", list(BARS))
def test_a_terminal_gets_a_bar_and_quiet_silences_it(command: str) -> None:
    argv, words, total = BARS[command]
    err, out = _on_a_terminal(argv, TERM="xterm")
    assert f"\r{words} 1/{total} ".encode() in err and f"\r{words} {total}/{total} ".encode() in err, err
    assert f"{words} 1/{total}" not in out and "\r" not in out  # the results on stdout carry no bar
    err, _ = _on_a_terminal([*argv, "-q"], TERM="xterm")
    assert err == b""


def test_no_color_under_a_terminal() -> None:
    """With NO_COLOR=1 the bar is drawn (carriage returns redraw it, and the cursor may move),
    but no SGR sequence (ESC [ ... m), the escape that sets colors and styles, is written."""
    err, _ = _on_a_terminal(BARS["predict"][0], TERM="xterm-256color", NO_COLOR="1")
    assert b"\rsimulated 1/3 " in err
    assert re.search(rb"\x1b\[[0-9;]*m", err) is None, err


def test_a_dumb_terminal_gets_no_bar() -> None:
    """TERM=dumb (Emacs' shell, some CI consoles) cannot redraw a line: no bar, as in a pipe."""
    err, out = _on_a_terminal(BARS["compare"][0], TERM="dumb")
    assert b"\r" not in err.replace(b"\r\n", b"\n") and b"predicted" not in err
    assert "li2020-des" in out


def test_without_tqdm_a_terminal_gets_no_bar_and_the_command_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """tqdm is a dependency; an install that lacks it still predicts, without a bar."""

    class Terminal:
        def isatty(self) -> bool:
            return True

    monkeypatch.setenv("TERM", "xterm")
    monkeypatch.setattr(sys, "stderr", Terminal())
    assert cli_output.bar_wanted()
    monkeypatch.setitem(sys.modules, "tqdm", None)  # "from tqdm import tqdm" raises ImportError
    with cli_output.progress("simulated", "worker counts") as progress:
        assert progress is None
