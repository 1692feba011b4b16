#!/usr/bin/env python3
"""Chooses which of redis-py's own tests a CMI must pass, and writes redis_py_suite.txt.

A test is chosen when, run against a real redis-server 7.0 in RESP2 and in RESP3 (as redis-py runs
its suite against a standalone server: no cluster, module or TLS tests), it passes both times,
talks to no other server, sends at least one command beyond a connection's set-up and tear-down,
and every command it sends is one a CMI supports (as the CMI's own COMMAND DOCS says, subcommands
included). The tests in EXCLUDED pass those checks but test something a CMI deliberately does
differently; each says why.

Run it when the pinned redis-py version changes (or when cads supports more commands):

    suite=$(scripts/redis-py-suite)           # the source distribution's tests
    redis-server --port 7380 --save '' &      # the reference
    cads-server --port 7379 --cmis 1 &        # what supports which commands
    tests/python/select_redis_py_tests.py --suite "$suite" --redis-port 7380 --cads-port 7379

It runs redis-py's sync suite twice against redis-server (a few minutes). CI then runs the chosen
tests against a CMI: crates/server/tests/redis_compat.rs, redis_py_own_tests_pass_against_a_cmi.
"""

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
LIST = os.path.join(HERE, "redis_py_suite.txt")


def connection_set_up(name, sub):
    """What redis-py sends on connecting, and what the test fixtures send when done, whatever the
    test. CLIENT MAINT_NOTIFICATIONS is refused by Redis 7.0 as by a CMI; redis-py goes on
    without it."""
    return name in ("HELLO", "FLUSHDB") or (
        name == "CLIENT" and sub in ("SETINFO", "MAINT_NOTIFICATIONS")
    )


EXCLUDED = {
    "tests/test_commands.py::TestRedisCommands::test_select": "selects databases 2, 5 and 9; a CMI has one database",
    "tests/test_commands.py::TestRedisCommands::test_command": "expects at least 100 commands in the table",
    "tests/test_commands.py::TestRedisCommands::test_command_count": "expects at least 100 commands",
    "tests/test_commands.py::TestRedisCommands::test_command_list": "expects more than 300 commands and list commands",
    "tests/test_commands.py::TestRedisCommands::test_config_get_multi_params": "expects the hash settings (hash-max-listpack-entries)",
    "tests/test_commands.py::TestRedisCommands::test_config_set": "sets `timeout`, which a CMI takes only at start",
    "tests/test_commands.py::TestRedisCommands::test_config_set_multi_params": "sets `timeout`, which a CMI takes only at start",
    "tests/test_command_parser.py::TestCommandsParser::test_get_keys_predetermined_key_location": "looks OBJECT up in the command table",
    "tests/test_command_parser.py::TestCommandsParser::test_get_pubsub_keys": "looks PUBLISH and SUBSCRIBE up in the command table",
}


def cads_commands(port):
    """The commands and subcommands a CMI supports: {name: set of subcommands (empty if none)}."""
    import redis

    conn = redis.Connection(host="127.0.0.1", port=port, protocol=2)
    conn.send_command("COMMAND", "DOCS")
    docs = conn.read_response()
    conn.disconnect()
    commands = {}
    for name, fields in zip(docs[0::2], docs[1::2]):
        fields = dict(zip(fields[0::2], fields[1::2]))
        subs = fields.get(b"subcommands", [])
        commands[name.decode().upper()] = {
            s.decode().split("|", 1)[1].upper() for s in subs[0::2]
        }
    return commands


def record(suite, port, protocol, out):
    """Runs redis-py's sync suite against redis-server with the recorder; returns its record."""
    # The sync suite: the top-level test files and the parsers' (the asyncio suite needs
    # pytest-asyncio and repeats the same commands).
    files = sorted(glob.glob(os.path.join(suite, "tests", "test_*.py")))
    files.append(os.path.join(suite, "tests", "test_parsers"))
    url = f"redis://127.0.0.1:{port}"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([HERE, suite]), REDIS_PY_RECORD=out)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "redis_py_recorder",
            "--continue-on-collection-errors",
            # As redis-py's own CI runs its suite against a standalone server.
            "-m",
            "not onlycluster and not redismod and not ssl",
            f"--redis-url={url}",
            f"--redis-mod-url={url}",
            f"--protocol={protocol}",
            *[os.path.relpath(f, suite) for f in files],
        ],
        cwd=suite,
        env=env,
        stdout=subprocess.DEVNULL,
    )
    with open(out) as f:
        return json.load(f)


def supported(name, sub, cads):
    """Whether a CMI supports a command; `sub` is its first argument (a subcommand, for CLIENT,
    CONFIG and COMMAND)."""
    if connection_set_up(name, sub):
        return True
    if name not in cads:
        return False
    subs = cads[name]
    return not subs or sub in subs or sub == ""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", required=True, help="redis-py's source distribution, unpacked")
    parser.add_argument("--redis-port", type=int, required=True, help="a redis-server 7.0")
    parser.add_argument("--cads-port", type=int, required=True, help="a CMI")
    parser.add_argument("--output", default=LIST)
    args = parser.parse_args()

    cads = cads_commands(args.cads_port)
    with open(os.path.join(args.suite, "PKG-INFO")) as f:
        version = next(line.split(":", 1)[1].strip() for line in f if line.startswith("Version:"))
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for protocol in (2, 3):
            out = os.path.join(tmp, f"{protocol}.json")
            runs.append(record(args.suite, args.redis_port, protocol, out))

    chosen = []
    for test in sorted(runs[0]):
        if any(run.get(test, {}).get("outcome") != "passed" for run in runs):
            continue
        sent = set()
        for run in runs:
            sent |= {tuple(c) for c in run[test]["commands"]}
        if any(port != args.redis_port for port, _, _ in sent):
            continue
        commands = {(name, sub) for _, name, sub in sent}
        if all(connection_set_up(*c) for c in commands):
            continue
        if not all(supported(*c, cads) for c in commands):
            continue
        if test in EXCLUDED:
            continue
        chosen.append(test)
    stale = sorted(set(EXCLUDED) - set(runs[0]))
    if stale:
        print("exclusions of tests that no longer exist:", *stale, sep="\n  ", file=sys.stderr)

    with open(args.output, "w") as f:
        f.write(
            "# redis-py's own tests that a CMI passes unmodified, in RESP2 and RESP3: the tests of\n"
            "# redis-py's sync suite for commands cads supports. Made by select_redis_py_tests.py\n"
            "# (which lists the tests left out on purpose, with the reason); run by\n"
            "# crates/server/tests/redis_compat.rs from the source distribution that\n"
            "# scripts/redis-py-suite fetches.\n"
            f"# redis-py {version}\n"
        )
        for test in chosen:
            f.write(test + "\n")
    print(f"{len(chosen)} tests written to {args.output}")


if __name__ == "__main__":
    main()
