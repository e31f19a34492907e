"""What the ``advisor`` command writes besides its results, by one rule for every subcommand.

- stdout carries the results (tables, JSON, written files' names where that is the result).
- stderr carries warnings and errors always; informational notes (the bundled example is used,
  the link rate was measured, a file was written) unless ``-q``; debug detail with ``-v``;
  and a progress bar only when stderr is a terminal: never into a pipe or a log file, nor on a
  ``TERM=dumb`` terminal, nor with ``-q``.

Notes, detail and warnings are ``logging`` records of the ``advisor`` loggers, so the
controller's code that a command runs (``predict-job``) follows the same levels: ``-q`` is the
level WARNING, the default INFO, ``-v`` DEBUG. ``session`` sets this up for one command and
undoes it after (tests run many commands in one process). The bar is tqdm's: small, and
imported only when a bar is wanted, so a command in a pipe pays nothing for it. It draws no
color, so ``NO_COLOR`` has nothing to turn off (tests/test_cli_output.py checks that under a
terminal); nothing else the command prints has color either.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from advisor.cli_args import QUIET, VERBOSE

LOGGER = "advisor"
_LEVELS = {QUIET: logging.WARNING, VERBOSE: logging.DEBUG}
_PREFIX = {logging.DEBUG: "advisor: debug: ", logging.INFO: "", logging.WARNING: "advisor: warning: "}
_state = {"verbosity": 0}

Progress = Callable[[int, int], None]


def log_level(verbosity: int) -> int:
    """The logging level a verbosity stands for: WARNING (-q), INFO, DEBUG (-v)."""
    return _LEVELS.get(verbosity, logging.INFO)


class _StderrHandler(logging.Handler):
    """Writes to the ``sys.stderr`` of the moment (a test's capture replaces it), a note as it
    is, a warning or debug line with the command's prefix."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            prefix = _PREFIX.get(record.levelno, "advisor: error: ")
            sys.stderr.write(prefix + record.getMessage() + "\n")
            sys.stderr.flush()
        except Exception:  # logging's own contract: a failed write is reported, not raised
            self.handleError(record)


@contextmanager
def session(verbosity: int, *, logs: bool = True) -> Iterator[None]:
    """One command's output rules. ``logs=False``: the command sets up logging itself (the
    controller, from its settings), and only the bar and notes follow ``verbosity`` here."""
    logger = logging.getLogger(LOGGER)
    handler, level, before = _StderrHandler(), logger.level, _state["verbosity"]
    _state["verbosity"] = verbosity
    if logs:
        logger.addHandler(handler)
        logger.setLevel(log_level(verbosity))
    try:
        yield
    finally:
        _state["verbosity"] = before
        if logs:
            logger.removeHandler(handler)
            logger.setLevel(level)


def note(message: str, *args: Any) -> None:
    """An informational line on stderr (silenced by -q)."""
    logging.getLogger("advisor.cli").info(message, *args)


def warning(message: str, *args: Any) -> None:
    """A warning line on stderr ("advisor: warning: ..."), shown even with -q."""
    logging.getLogger("advisor.cli").warning(message, *args)


def detail(message: str, *args: Any) -> None:
    """A debug line on stderr (shown with -v)."""
    logging.getLogger("advisor.cli").debug(message, *args)


def bar_wanted(stream: Any = None) -> bool:
    """A progress bar is drawn on a terminal only: stderr a TTY, TERM not 'dumb', and no -q."""
    stream = sys.stderr if stream is None else stream
    if _state["verbosity"] == QUIET or os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


@contextmanager
def progress(what: str, unit: str) -> Iterator[Progress | None]:
    """A ``progress(done, total)`` callback that draws a bar ("simulated 3/16 worker counts"),
    or None where no bar is wanted (the core then reports nothing). The bar is cleared at the
    end, so that the terminal keeps the results only."""
    if not bar_wanted():
        yield None
        return
    try:
        from tqdm import tqdm
    except ImportError:  # an install without its dependency tqdm: the command still runs, without a bar
        yield None
        return
    tqdm.monitor_interval = 0  # no monitor thread: the point pool forks its processes after the first report
    bar = _Bar(tqdm, what, unit)
    try:
        yield bar
    finally:
        bar.close()


class _Bar:
    """tqdm's bar, made at the first report (when the total is known)."""

    def __init__(self, tqdm: Any, what: str, unit: str) -> None:
        self.tqdm, self.what, self.unit = tqdm, what, unit
        self._bar: Any = None

    def __call__(self, done: int, total: int) -> None:
        if self._bar is None:
            # every report redrawn (mininterval 0): a command makes a few dozen at most
            self._bar = self.tqdm(total=total, initial=done, desc=self.what, unit=self.unit, leave=False,
                                  file=sys.stderr, dynamic_ncols=True, mininterval=0,
                                  bar_format="{desc} {n_fmt}/{total_fmt} {unit} |{bar}| {elapsed}<{remaining}")
            return
        self._bar.update(done - self._bar.n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
