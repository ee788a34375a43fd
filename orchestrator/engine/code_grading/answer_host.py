"""The program of the answer's sandbox: runs the answer, then serves calls into it as data.

It knows nothing of the tests: no test text, no expected value ever reaches this process. It
runs the answer (``solution.py``), tells the tests' sandbox which names the answer defines, then
answers each request (call, attribute, iteration, ...) with the result as tagged data, or a
reference to an object that stays here. Whatever the answer does to this process, it can only
change what it answers, as a wrong implementation would.

Run as ``main.py REQUEST_FD RESPONSE_FD`` with the codec inlined above it.
"""

from __future__ import annotations

import builtins
import sys
import types
from collections.abc import Callable
from typing import Any

from orchestrator.engine.code_grading.codec import Channel, NotData, decode, encode  # inlined

_objects: dict[int, Any] = {}


def _refer(value: Any) -> int:
    key = len(_objects) + 1
    _objects[key] = value
    return key


def _resolve(key: int) -> Any:
    return _objects[key]


def _manifest(namespace: dict[str, Any]) -> list[list[Any]]:
    names: list[list[Any]] = []
    for name, value in list(namespace.items()):
        if name.startswith("__") or isinstance(value, types.ModuleType):
            continue
        if isinstance(value, type) and issubclass(value, BaseException):
            base = next(
                (k.__name__ for k in value.__mro__ if getattr(builtins, k.__name__, None) is k),
                "Exception",
            )
            names.append([name, "exception", base])
        elif callable(value):
            names.append([name, "callable", _refer(value)])
        else:
            try:
                names.append([name, "value", encode(value, None)])
            except NotData:
                names.append([name, "object", _refer(value)])
    return names


def _mutable_args(args: list[Any], kwargs: dict[str, Any]) -> list[list[Any]]:
    """The arguments a call may have changed in place, as they are after it."""
    after = []
    for position, value in [*enumerate(args), *kwargs.items()]:
        if type(value) in (list, dict, set, bytearray):
            try:
                after.append([position, encode(value, _refer)])
            except NotData:
                continue
    return after


def _serve(request: dict[str, Any]) -> dict[str, Any]:
    op = request["op"]
    target = _resolve(request["target"])
    if op == "call":
        args = [decode(item, _resolve) for item in request["args"]]
        kwargs = {str(k): decode(v, _resolve) for k, v in request["kwargs"]}
        result = target(*args, **kwargs)
        return {"ok": encode(result, _refer), "after": _mutable_args(args, kwargs)}
    if op == "getattr":
        return {"ok": encode(getattr(target, str(request["name"])), _refer)}
    if op == "setattr":
        setattr(target, str(request["name"]), decode(request["value"], _resolve))
        return {"ok": encode(None, None)}
    if op == "getitem":
        return {"ok": encode(target[decode(request["key"], _resolve)], _refer)}
    if op == "eq":  # only ever between two of the answer's own objects
        return {"ok": encode(bool(target == _resolve(request["other"])), None)}
    unary: dict[str, Callable[[Any], Any]] = {
        "iter": iter, "next": next, "len": len, "bool": bool, "str": str, "repr": repr,
    }  # fmt: skip
    return {"ok": encode(unary[op](target), _refer)}


def main() -> None:
    channel = Channel(int(sys.argv[1]), int(sys.argv[2]))
    # A module of its own, as an imported file would be (dataclasses and pickle look it up).
    module = types.ModuleType("solution")
    sys.modules["solution"] = module
    namespace = vars(module)
    namespace["__builtins__"] = builtins
    try:
        with open("solution.py", encoding="utf-8") as handle:
            source = handle.read()
        exec(compile(source, "solution.py", "exec"), namespace)  # noqa: S102 - inside the sandbox
    except BaseException as error:  # noqa: BLE001 - the answer's failure is reported, not raised
        channel.send({"error": f"{type(error).__name__}: {error}"[:2000], "names": []})
        return
    channel.send({"names": _manifest(namespace)})
    while True:
        try:
            request = channel.receive()
        except EOFError:
            return
        try:
            response = _serve(request)
        except BaseException as error:  # noqa: BLE001 - raised by the answer: sent as data
            response = {"raise": [type(error).__name__, str(error)[:2000]]}
        channel.send(response)


if __name__ == "__main__":
    main()
