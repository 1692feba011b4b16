"""A pytest plugin for select_redis_py_tests.py: records, for each test of redis-py's own suite,
the commands it sends (name and first argument, to which port) and its outcome.

Loaded with ``-p redis_py_recorder`` (this directory on PYTHONPATH); writes JSON to the file named
by REDIS_PY_RECORD at the end of the session. It reads the bytes redis-py sends, so it sees every
command whatever path sent it: single commands, pipelines, connection set-up.
"""

import json
import os

import pytest
import redis.connection

_current = {"test": None}
_commands = {}
_outcomes = {}


def _requests(packed):
    """The (name, first argument) of every RESP request in ``packed``."""
    if isinstance(packed, (bytes, bytearray, memoryview)):
        packed = [packed]
    data = b"".join(bytes(chunk) for chunk in packed)
    pos = 0
    while pos < len(data) and data[pos : pos + 1] == b"*":
        end = data.index(b"\r\n", pos)
        count = int(data[pos + 1 : end])
        pos = end + 2
        args = []
        for _ in range(count):
            end = data.index(b"\r\n", pos)
            length = int(data[pos + 1 : end])
            args.append(data[end + 2 : end + 2 + length])
            pos = end + 2 + length + 2
        if args:
            sub = args[1] if len(args) > 1 else b""
            yield (
                args[0].decode("latin-1").upper(),
                sub.decode("latin-1").upper(),
            )


_send = redis.connection.AbstractConnection.send_packed_command


def _recording_send(self, command, check_health=True):
    test = _current["test"]
    if test is not None:
        port = getattr(self, "port", None)
        seen = _commands.setdefault(test, set())
        for name, sub in _requests(command):
            seen.add((port, name, sub))
    return _send(self, command, check_health)


redis.connection.AbstractConnection.send_packed_command = _recording_send


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _current["test"] = item.nodeid
    _commands.setdefault(item.nodeid, set())
    yield
    _current["test"] = None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    if report.when == "call" or (report.when == "setup" and not report.passed):
        _outcomes[item.nodeid] = report.outcome


def pytest_sessionfinish(session):
    out = os.environ.get("REDIS_PY_RECORD")
    if not out:
        return
    record = {
        test: {"commands": sorted(seen, key=str), "outcome": _outcomes.get(test)}
        for test, seen in _commands.items()
    }
    with open(out, "w") as f:
        json.dump(record, f)
