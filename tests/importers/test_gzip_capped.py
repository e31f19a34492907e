"""The capped inflater: exact output under the cap, refusal past it without inflating the rest."""

from __future__ import annotations

import gzip
import zlib

import pytest

from advisor.importers.gzip_capped import GzipInvalid, GzipTooLarge, inflate_gzip


def test_round_trip_at_and_below_the_cap() -> None:
    text = b"x" * 1000
    assert inflate_gzip(gzip.compress(text), 1000) == text
    assert inflate_gzip(gzip.compress(b""), 0) == b""


def test_one_byte_past_the_cap_is_refused() -> None:
    with pytest.raises(GzipTooLarge, match="more than 999 bytes"):
        inflate_gzip(gzip.compress(b"x" * 1000), 999)


def test_a_bomb_is_refused_without_inflating_it() -> None:
    bomb = gzip.compress(b"\0" * (64 << 20))  # 64 MiB of zeros in about 64 KiB
    assert len(bomb) < 100_000
    with pytest.raises(GzipTooLarge):
        inflate_gzip(bomb, 1 << 20)


# mtime=0 and ids: the same test names in every process (pytest-xdist collects in each worker)
@pytest.mark.parametrize(("data", "reason"), [
    (b"not gzip at all", "not valid gzip"),
    (gzip.compress(b"y" * 5000, mtime=0)[:-12], "truncated gzip data"),
    (b"", "truncated gzip data"),
    (gzip.compress(b"{}", mtime=0) + b"junk", "4 stray bytes"),
    (gzip.compress(b"{}", mtime=0) + gzip.compress(b"{}", mtime=0), "stray bytes"),  # a second member is not read
], ids=["not-gzip", "truncated", "empty", "junk-after", "second-member"])
def test_unreadable_streams_say_why(data: bytes, reason: str) -> None:
    with pytest.raises(GzipInvalid, match=reason):
        inflate_gzip(data, 1 << 20)


def test_a_corrupt_body_is_invalid_not_a_zlib_error() -> None:
    good = bytearray(gzip.compress(bytes(range(256)) * 40))
    good[20] ^= 0xFF
    with pytest.raises(GzipInvalid):
        inflate_gzip(bytes(good), 1 << 20)
    assert issubclass(GzipInvalid, ValueError) and not issubclass(GzipInvalid, zlib.error)
