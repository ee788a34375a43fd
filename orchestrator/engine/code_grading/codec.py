"""Values as data between the answer's sandbox and the tests' sandbox: tagged JSON, never pickle.

Inlined into both sandboxed programs (``answer_host.py`` and ``tests_host.py``), so stdlib only.
Every value is a JSON list whose first item is its tag. Only exact builtin types are data: an
``int`` subclass, or any object of the answer's own, is not data and travels as a reference
(``["r", id]``) to an object that stays where it was made. Depth, message size and item counts
are bounded on both sides.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

MAX_DEPTH = 64
MAX_MESSAGE_BYTES = 8 * 2**20
MAX_ITEMS = 100_000


_CONTAINER_TAGS: dict[type, str] = {list: "l", tuple: "t", set: "e", frozenset: "z"}


class NotData(TypeError):
    """A value that cannot travel as data, and has no reference to travel as."""


def encode(value: Any, refer: Callable[[Any], int] | None, depth: int = 0) -> Any:
    """``value`` as tagged JSON; ``refer`` gives a reference id for what is not data (None: such
    a value raises NotData)."""
    if depth > MAX_DEPTH:
        raise NotData("nested too deeply")
    kind = type(value)
    if value is None:
        return ["n"]
    if kind is bool:
        return ["b", value]
    if kind is int:
        return ["i", str(value)]
    if kind is float:
        return ["f", repr(value)]
    if kind is complex:
        return ["c", [repr(value.real), repr(value.imag)]]
    if kind is str:
        return ["s", value]
    if kind is bytes:
        import base64  # only when bytes travel: each import costs the grading milliseconds

        return ["y", base64.b64encode(value).decode("ascii")]
    if kind in (list, tuple, set, frozenset):
        if len(value) > MAX_ITEMS:
            raise NotData("too many items")
        tag = _CONTAINER_TAGS[kind]
        return [tag, [encode(item, refer, depth + 1) for item in value]]
    if kind is dict:
        if len(value) > MAX_ITEMS:
            raise NotData("too many items")
        pairs = [
            [encode(k, refer, depth + 1), encode(v, refer, depth + 1)] for k, v in value.items()
        ]
        return ["d", pairs]
    if refer is None:
        raise NotData(f"a {kind.__name__} is not data")
    return ["r", refer(value)]


def decode(data: Any, resolve: Callable[[int], Any], depth: int = 0) -> Any:
    """The value tagged JSON ``data`` stands for; ``resolve`` turns a reference id into the
    object (or its stand-in). Raises ValueError on anything malformed."""
    if depth > MAX_DEPTH or not isinstance(data, list) or not data:
        raise ValueError("malformed value")
    tag = data[0]
    body = data[1] if len(data) > 1 else None
    if tag == "n":
        return None
    if tag == "b" and type(body) is bool:
        return body
    if tag == "i" and type(body) is str and len(body) <= 4300:
        return int(body)
    if tag == "f" and type(body) is str and len(body) <= 40:
        return float(body)
    if tag == "c" and type(body) is list and len(body) == 2:
        return complex(float(body[0]), float(body[1]))
    if tag == "s" and type(body) is str:
        return body
    if tag == "y" and type(body) is str:
        import base64

        return base64.b64decode(body, validate=True)
    if tag in ("l", "t", "e", "z") and type(body) is list and len(body) <= MAX_ITEMS:
        items = [decode(item, resolve, depth + 1) for item in body]
        return {"l": list, "t": tuple, "e": set, "z": frozenset}[tag](items)
    if tag == "d" and type(body) is list and len(body) <= MAX_ITEMS:
        result = {}
        for pair in body:
            if not isinstance(pair, list) or len(pair) != 2:
                raise ValueError("malformed pair")
            result[decode(pair[0], resolve, depth + 1)] = decode(pair[1], resolve, depth + 1)
        return result
    if tag == "r" and type(body) is int:
        return resolve(body)
    raise ValueError("malformed value")


class Channel:
    """One JSON message a line over a pair of pipes: read with a size cap, written whole."""

    def __init__(self, read_fd: int, write_fd: int) -> None:
        self.read_fd = read_fd
        self.write_fd = write_fd
        self.buffer = bytearray()

    def send(self, message: Any) -> None:
        data = json.dumps(message, separators=(",", ":")).encode("utf-8") + b"\n"
        if len(data) > MAX_MESSAGE_BYTES:
            raise NotData("message too large")
        view = memoryview(data)
        while view:
            view = view[os.write(self.write_fd, view) :]

    def receive(self) -> Any:
        """The next message, or EOFError when the peer has gone."""
        while True:
            end = self.buffer.find(b"\n")
            if end >= 0:
                line = bytes(self.buffer[:end])
                del self.buffer[: end + 1]
                return json.loads(line)
            if len(self.buffer) > MAX_MESSAGE_BYTES:
                raise ValueError("message too large")
            chunk = os.read(self.read_fd, 65536)
            if not chunk:
                raise EOFError("the peer closed the channel")
            self.buffer += chunk
