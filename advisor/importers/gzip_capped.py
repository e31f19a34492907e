"""Inflate one gzip member without ever holding more than a cap: a gzip bomb costs ``cap + 1`` bytes.

Shared by the upload reader (gzipped bundles) and the controller's ingest endpoint
(``Content-Encoding: gzip``); each maps the two failures below to its own error.
"""

from __future__ import annotations

import zlib


class GzipTooLarge(ValueError):
    """The member inflates to more than the cap (the rest was never inflated)."""


class GzipInvalid(ValueError):
    """Not gzip, corrupt, truncated, or followed by stray bytes; the message says which."""


def inflate_gzip(data: bytes | bytearray, cap: int) -> bytes:
    """The inflated member, at most ``cap`` bytes; raises ``GzipTooLarge`` or ``GzipInvalid``."""
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        # max_length bounds the output; a shorter result means all input was consumed
        out = inflater.decompress(data, cap + 1)
    except zlib.error as exc:
        raise GzipInvalid(f"not valid gzip ({exc})") from None
    if len(out) > cap:
        raise GzipTooLarge(f"inflates to more than {cap} bytes")
    if not inflater.eof:
        raise GzipInvalid(f"truncated gzip data (the stream ends after {len(out)} inflated bytes)")
    if inflater.unused_data:
        raise GzipInvalid(f"{len(inflater.unused_data)} stray bytes after the gzip stream")
    return out
