"""What the ``advisor`` subcommands share on the command line: the parser class (which gives
every subcommand the same ``-q``/``-v``), argparse ``type=`` converters that keep the project's
error messages, and output-file checks.

A module of its own because ``advisor.cli`` imports the subcommand modules (``fit_cli``,
``store_cli``), which need these too.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from advisor.errors import AdvisorError

T = TypeVar("T")


class OutputFileError(AdvisorError, ValueError):
    """An output file (-o, --plot, --timeline) that cannot be written; the message names the flag."""


class UsageError(AdvisorError, ValueError):
    """A command line that cannot work as written: options that contradict each other (``-q``
    with ``-v``), a value in the wrong form; the message names the option."""


QUIET, NORMAL, VERBOSE = -1, 0, 1


def output_options() -> argparse.ArgumentParser:
    """The parent parser of every subcommand: ``-q`` and ``-v`` mean the same everywhere
    (``advisor/cli_output.py`` does what they say). Their defaults are suppressed, so that a flag
    given before the subcommand (``advisor -q predict``) is not overwritten by the subcommand's
    default; ``verbosity`` reads them."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS,
                        help="results only: no progress bar and no notes on stderr (warnings and errors still)")
    parent.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS,
                        help="more detail on stderr: debug messages (the log level DEBUG)")
    return parent


def verbosity(args: argparse.Namespace) -> int:
    """QUIET (-q), NORMAL or VERBOSE (-v, once or more) from the parsed ``args``."""
    quiet, verbose = getattr(args, "quiet", False), getattr(args, "verbose", 0)
    if quiet and verbose:
        raise UsageError("-q/--quiet and -v/--verbose contradict each other: give one")
    return QUIET if quiet else VERBOSE if verbose else NORMAL


class _Commands(argparse._SubParsersAction):  # type: ignore[type-arg]
    """``add_subparsers``' action, whose ``add_parser`` gives each subcommand ``output_options``:
    one place for -q/-v, and no subcommand without them (tests/test_cli_output.py walks them)."""

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        kwargs["parents"] = [*kwargs.get("parents", ()), output_options()]
        return super().add_parser(name, **kwargs)


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser, except that a value starting with '-' and a digit or '.' ('-5Mbit/s',
    '-1e3', '-.5') is taken as the value of the option before it, as a plain '-5' already is:
    the option's own check then refuses it by name ("bandwidth must be > 0") where argparse
    would say "expected one argument". No option of the advisor looks like '-5'. Subcommands'
    parsers are of this class too (``add_subparsers`` makes them of the parent's class), and
    each gets ``-q``/``-v`` (``_Commands``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = re.compile(r"^-\.?\d")
        self.register("action", "parsers", _Commands)


def argument_type(parse: Callable[[str], T]) -> Callable[[str], T]:
    """``parse`` as an argparse ``type=``: its ``AdvisorError`` message ("bandwidth must be > 0,
    got '0'") is what argparse prints after the option's name, where a plain ValueError would
    become "invalid parse_bandwidth value"."""

    def convert(text: str) -> T:
        try:
            return parse(text)
        except AdvisorError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = parse.__name__
    return convert


def int_at_least(low: int, why: str = "") -> Callable[[str], int]:
    """An argparse ``type=`` for whole numbers >= ``low``; ``why`` is added to the refusal."""

    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}" + (f" ({why})" if why else ""))
        return value

    convert.__name__ = "int"
    return convert


SEED = int_at_least(0, "numpy seeds its random generators with integers >= 0")


def check_output(flag: str, path: Path | None) -> None:
    """Refuse an output file that cannot be written (no such directory, or a directory itself) before
    the work that would fill it."""
    if path is None:
        return
    if path.is_dir():
        raise OutputFileError(f"{flag} {path}: is a directory; name the file to write")
    if not path.absolute().parent.is_dir():
        raise OutputFileError(f"{flag} {path}: there is no directory {path.absolute().parent} to write it in")


@contextmanager
def writing(flag: str, path: Path) -> Iterator[None]:
    """An OSError while writing ``path`` as the user's error, naming the flag."""
    try:
        yield
    except OSError as exc:
        raise OutputFileError(f"{flag} {path}: cannot write it ({exc.strerror or exc})") from None
