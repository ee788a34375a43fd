"""The program of the tests' sandbox: runs the reference's tests against the answer, and decides.

The answer is not in this process: each name it defines is a stand-in that asks the answer's
sandbox over a pipe, and what comes back is plain data (or a stand-in for one of the answer's
objects, equal only to itself, or to another of them by the answer's own comparison). So the
comparisons with expected values happen here, where the answer cannot reach: it can neither
read the tests nor change how they compare.

The reference is any of: plain ``assert`` lines, ``unittest.TestCase`` classes (with or without
``unittest.main()``), or doctest-like ``>>>`` examples. It is run as the module ``tests``;
``import solution`` / ``from solution import f`` give the answer's names. The verdict is one
line, ``REPORT {json}``, printed last.

Run as ``main.py REQUEST_FD RESPONSE_FD`` with the codec inlined above it.
"""

from __future__ import annotations

import ast
import builtins
import io
import json
import sys
import types
from typing import Any

from orchestrator.engine.code_grading.codec import MAX_ITEMS, Channel, decode, encode  # inlined
from orchestrator.engine.code_grading.reading import looks_like_doctest, module_asserts  # inlined

_channel: Channel


class RemoteError(Exception):
    """The answer raised an exception that is not one of Python's own."""


class AnswerGone(Exception):
    """The answer's sandbox stopped answering (it ended, crashed or was killed)."""


_exceptions: dict[str, type[BaseException]] = {}


def _raise(name: str, message: str) -> None:
    kind = _exceptions.get(name) or getattr(builtins, name, None)
    if isinstance(kind, type) and issubclass(kind, Exception):
        raise kind(message)
    raise RemoteError(f"{name}: {message}")


def _exchange(request: dict[str, Any]) -> dict[str, Any]:
    """Send one request and read its response; what the answer raised is raised here."""
    try:
        _channel.send(request)
        response = _channel.receive()
    except (EOFError, OSError) as error:
        raise AnswerGone(f"the answer stopped answering ({error})") from None
    if not isinstance(response, dict):
        raise AnswerGone("the answer sent something that is not a response")
    if "raise" in response:
        name, message = response["raise"]
        _raise(str(name), str(message))
    return response


def _ask(request: dict[str, Any]) -> Any:
    return decode(_exchange(request)["ok"], Remote)


def _send_value(value: Any) -> Any:
    return encode(value, _reference_of)


def _reference_of(value: Any) -> int:
    if isinstance(value, Remote):
        key: int = object.__getattribute__(value, "_key")
        return key
    raise TypeError(f"a {type(value).__name__} cannot be passed to the answer")


class Remote:
    """A stand-in for one of the answer's objects (its functions and classes too)."""

    __slots__ = ("_key",)

    def __init__(self, key: int) -> None:
        object.__setattr__(self, "_key", key)

    def _request(self, op: str, **fields: Any) -> Any:
        return _ask({"op": op, "target": object.__getattribute__(self, "_key"), **fields})

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        response = _exchange(
            {
                "op": "call",
                "target": object.__getattribute__(self, "_key"),
                "args": [_send_value(item) for item in args],
                "kwargs": [[name, _send_value(value)] for name, value in kwargs.items()],
            }
        )
        for position, value in response.get("after", []):
            original = args[position] if isinstance(position, int) else kwargs.get(position)
            _update_in_place(original, decode(value, Remote))
        return decode(response["ok"], Remote)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return self._request("getattr", name=name)

    def __setattr__(self, name: str, value: Any) -> None:
        self._request("setattr", name=name, value=_send_value(value))

    def __getitem__(self, key: Any) -> Any:
        return self._request("getitem", key=_send_value(key))

    def __iter__(self) -> Any:
        iterator = self._request("iter")
        if not isinstance(iterator, Remote):
            return iter(iterator)
        return _RemoteIterator(iterator)

    def __len__(self) -> int:
        length = self._request("len")
        if type(length) is not int:
            raise TypeError("len() of the answer's object is not an int")
        return length

    def __bool__(self) -> bool:
        return self._request("bool") is True

    def __str__(self) -> str:
        return str(self._request("str"))

    def __repr__(self) -> str:
        return str(self._request("repr"))

    def __contains__(self, item: Any) -> bool:
        # Looked for here, item by item: the item (often an expected value) is never sent.
        for count, member in enumerate(self):
            if count >= MAX_ITEMS:
                return False
            if member == item:
                return True
        return False

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Remote):
            return self._request("eq", other=object.__getattribute__(other, "_key")) is True
        return False  # never compared by the answer's code against a value of the tests

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash(("remote", object.__getattribute__(self, "_key")))


class _RemoteIterator:
    def __init__(self, remote: Remote) -> None:
        self.remote = remote

    def __iter__(self) -> _RemoteIterator:
        return self

    def __next__(self) -> Any:
        return self.remote._request("next")


def _update_in_place(original: Any, changed: Any) -> None:
    if isinstance(original, list) and isinstance(changed, list):
        original[:] = changed
    elif isinstance(original, (dict, set)) and type(changed) is type(original):
        original.clear()
        original.update(changed)
    elif isinstance(original, bytearray) and isinstance(changed, (bytes, bytearray, list)):
        original[:] = bytes(changed)


def _answer_module(manifest: dict[str, Any]) -> types.ModuleType:
    module = types.ModuleType("solution")
    for name, kind, data in manifest.get("names", []):
        name = str(name)
        if kind == "exception":
            base = getattr(builtins, str(data), Exception)
            if not (isinstance(base, type) and issubclass(base, Exception)):
                base = Exception
            made = type(name, (base,), {"__module__": "solution"})
            _exceptions[name] = made
            setattr(module, name, made)
        elif kind in ("callable", "object") and type(data) is int:
            setattr(module, name, Remote(data))
        elif kind == "value":
            setattr(module, name, decode(data, Remote))
    # ``from solution import *`` takes neither dunders nor names that would hide Python's own.
    module.__all__ = [  # type: ignore[attr-defined]
        name for name in vars(module) if not name.startswith("_") and not hasattr(builtins, name)
    ]
    return module


def _failure(error: BaseException) -> str:
    import traceback

    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename == "tests.py"]
    where = f"tests.py line {frames[-1].lineno}: " if frames else ""
    return f"{where}{type(error).__name__}: {error}"[:2000]


def _run(reference: str, answer: types.ModuleType) -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": "tests", "__builtins__": builtins}
    # The answer's names, as when the tests ran beside it, but never one of Python's own: the
    # tests' len, sorted or isinstance stay Python's (``from solution import len`` can still ask).
    namespace.update(
        {
            k: v
            for k, v in vars(answer).items()
            if not k.startswith("__") and not hasattr(builtins, k)
        }
    )
    if looks_like_doctest(reference):
        import doctest  # imported only where used: each import costs the grading milliseconds

        parser = doctest.DocTestParser()
        test = parser.get_doctest(reference, namespace, "tests", "tests.py", 0)
        output = io.StringIO()
        runner = doctest.DocTestRunner(
            optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False
        )
        runner.run(test, out=output.write)
        results = runner.summarize(verbose=False)
        return {
            "passed": results.failed == 0 and results.attempted > 0,
            "checks": results.attempted,
            "failure": output.getvalue()[-2000:] if results.failed else "",
        }
    tree = ast.parse(reference, "tests.py")
    checks = module_asserts(tree)
    try:
        exec(compile(tree, "tests.py", "exec"), namespace)  # noqa: S102 - inside the sandbox
    except BaseException as error:  # noqa: BLE001 - a failing test module is a verdict
        return {"passed": False, "checks": checks, "failure": _failure(error)}
    if "unittest" not in sys.modules:  # no TestCase without it (imported only where needed)
        return {"passed": checks > 0, "checks": checks, "failure": ""}
    import unittest

    suite = unittest.TestSuite()
    loader = unittest.TestLoader()
    for value in list(namespace.values()):
        if (
            isinstance(value, type)
            and issubclass(value, unittest.TestCase)
            and value.__module__ == "tests"
        ):
            suite.addTests(loader.loadTestsFromTestCase(value))
    result = unittest.TextTestRunner(stream=io.StringIO(), verbosity=0).run(suite)
    problems = [
        *result.failures,
        *result.errors,
        *[(t, "unexpected success") for t in result.unexpectedSuccesses],
    ]
    failure = ""
    if problems:
        case, text = problems[0]
        failure = f"{case.id().removeprefix('tests.')}: {text.strip().splitlines()[-1]}"[:2000]
    ran = result.testsRun - len(result.skipped)  # a skipped test checked nothing
    return {
        "passed": not problems and checks + ran > 0,
        "checks": checks + ran,
        "failure": failure,
    }


def main() -> None:
    global _channel
    _channel = Channel(int(sys.argv[2]), int(sys.argv[1]))
    real_stdout = sys.stdout
    sys.stdout = io.StringIO()  # what the tests print is not the report
    try:
        with open("tests.py", encoding="utf-8") as handle:
            reference = handle.read()
        if "unittest" in reference:
            import unittest

            # This program decides when the tests run: unittest.main() in the reference runs
            # nothing here.
            unittest.main = lambda *args, **kwargs: None  # type: ignore[assignment]
        try:
            manifest = _channel.receive()
        except EOFError:
            manifest = {"error": "the answer's sandbox ended before it was ready", "names": []}
        if not isinstance(manifest, dict):
            manifest = {"error": "the answer's sandbox sent no list of names", "names": []}
        answer = _answer_module(manifest)
        sys.modules["solution"] = answer
        report = _run(reference, answer)
        if manifest.get("error") and not report["passed"]:
            report["failure"] = f"the answer failed to load: {manifest['error']}"[:2000]
    except BaseException as error:  # noqa: BLE001 - any failure of the tests is a verdict
        report = {"passed": False, "checks": 0, "failure": _failure(error)}
    sys.stdout = real_stdout
    print("REPORT " + json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
