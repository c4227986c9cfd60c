"""Reading a CLI's input (a file or stdin) without trusting its size: only its last MAX_INPUT_BYTES.

A failed vLLM start ends its log with the error; a journal of many restarts or a log with a runaway line
(a base64 blob, a progress bar without newlines) can be tens of MB. `diagnose` scans every rule over
the text it is given (about 0.8 s per MiB on a loaded 2-core machine, `make bench-inputs`), so it is
given the tail: a regular file is read from a seek to its last MAX_INPUT_BYTES, a stream through a
bounded buffer of chunks, so neither a 50 MB file nor a 50 MB single line is ever held whole.
"""

from __future__ import annotations

import collections
import os
import stat
import sys
from dataclasses import dataclass
from typing import BinaryIO

MiB = 1 << 20
MAX_INPUT_BYTES = 1 * MiB
CHUNK_BYTES = 64 * 1024


@dataclass(frozen=True)
class Tail:
    data: bytes           # at most the limit; starts at a line boundary when one lies in the tail
    total_bytes: int      # bytes the input held
    window_bytes: int     # bytes of its end that were read (data is these, less a cut partial line)

    @property
    def truncated(self) -> bool:
        return self.total_bytes > self.window_bytes


def _from_line_start(tail: bytes, cut: bool) -> bytes:
    """Drop the partial first line a cut leaves (a carriage return ends a line too, as progress bars
    write them); a tail with no line break at all (one huge line) is kept whole."""
    if not cut:
        return tail
    breaks = [i for i in (tail.find(b"\n"), tail.find(b"\r")) if i >= 0]
    first = min(breaks) if breaks else -1
    return tail[first + 1:] if 0 <= first < len(tail) - 1 else tail


def tail_of_stream(stream: BinaryIO, limit: int = MAX_INPUT_BYTES) -> Tail:
    """The last `limit` bytes of a stream read in chunks; memory stays near limit + one chunk."""
    chunks: collections.deque[bytes] = collections.deque()
    kept = total = 0
    while True:
        chunk = stream.read(CHUNK_BYTES)
        if not chunk:
            break
        chunks.append(chunk)
        kept += len(chunk)
        total += len(chunk)
        while kept - len(chunks[0]) >= limit:
            kept -= len(chunks.popleft())
    if kept > limit:
        chunks[0] = chunks[0][kept - limit:]
    data = b"".join(chunks)
    chunks.clear()
    return Tail(_from_line_start(data, total > len(data)), total, len(data))


def tail_of_file(path: str, limit: int = MAX_INPUT_BYTES) -> Tail:
    """The last `limit` bytes of a file: a seek for a regular file, a bounded read for a pipe or FIFO."""
    with open(path, "rb") as fh:
        info = os.fstat(fh.fileno())
        if not stat.S_ISREG(info.st_mode):
            return tail_of_stream(fh, limit)
        start = max(0, info.st_size - limit)
        fh.seek(start)
        data = fh.read(limit)
    return Tail(_from_line_start(data, start > 0), start + len(data), len(data))


def read_tail(path: str | None, limit: int = MAX_INPUT_BYTES) -> Tail:
    """A CLI's input: `path`, or stdin for None / "-". OSError (missing, unreadable) is the caller's to report."""
    if path in (None, "-"):
        return tail_of_stream(sys.stdin.buffer, limit)
    return tail_of_file(path, limit)


def truncation_note(tail: Tail) -> str | None:
    """One line saying what was skipped, for stderr; None when the whole input was read."""
    if not tail.truncated:
        return None
    return (f"read the last {tail.window_bytes / MiB:.1f} MiB of a {tail.total_bytes / MiB:.1f} MiB input "
            "(the failure a log ends with is in its tail)")


class InputError(Exception):
    """An input that cannot be read; the CLI prints it as one line and exits 2, as for any bad input."""


def read_input(path: str | None) -> bytes:
    """A CLI's input, its last MAX_INPUT_BYTES (a note on stderr says when more was skipped)."""
    try:
        tail = read_tail(path)
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from exc
    note = truncation_note(tail)
    if note:
        print(f"vllm-deploy: note: {note}", file=sys.stderr)
    return tail.data
