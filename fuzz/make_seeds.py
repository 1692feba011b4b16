#!/usr/bin/env python3
"""Writes the hand-written seed inputs of the fuzz corpora (fuzz/corpus/<target>/seed-*).

The engine_commands inputs follow the byte decoder of crates/engine/src/fuzzing.rs: a configuration
byte, then operations, each an operation code followed by its operands. Keep the codes below in step
with `decode_op` there. Run from anywhere: python3 fuzz/make_seeds.py
"""

import os

HERE = os.path.dirname(os.path.abspath(__file__))

# --- engine_commands -----------------------------------------------------------------------------

# Configuration byte: bit 0 write-around; bits 1-2 maxmemory [0, 400, 1000, 3000], also the cap on
# session state; bits 3-4 pinned cap [0, 250, 700, 1500]; bits 5-6 lease ms [500, 50, 2000, 500],
# the last with an 800 ms maximum session lifetime; bit 7 a 2000-byte value limit.
WT, WA = 0, 1


def mem(i):
    return i << 1


def pinned_cap(i):
    return i << 3


K0, K1, K2, K3, KEMPTY, KLONG = range(6)
S1, S2, S3, S0, SMAX = range(5)


def val(text):
    """A value taken from the input: length byte (< 64), then the bytes."""
    data = text.encode()
    assert len(data) < 64
    return bytes([len(data)]) + data


def big(n4):
    """A value of 4 * n4 'v' bytes (n4 < 64)."""
    return bytes([128 + n4])


GET = lambda k: bytes([0, k])
SET = lambda k, v, opts=0: bytes([3, k]) + v + bytes([opts])
DEL = lambda k: bytes([6, k, 0])
MSET = lambda k, v: bytes([9, k]) + v + bytes([0])
INCR = lambda k: bytes([10, 0, k])
APPEND = lambda k, v: bytes([11, k]) + v
EXPIRE_PX = lambda k, adv: bytes([13, 1, adv, k, 0])  # PEXPIRE k ADVANCES[adv]
TTL = lambda k: bytes([14, 0, k])
INSPECT = lambda k: bytes([16, k])
CONFIGID = lambda n: bytes([17, 1, n])
FRAGMENTS = lambda n: bytes([18, 1, n])
FRAGMENTID = lambda f, n: bytes([19, f, 1, n])
DBSIZE = bytes([20])
FLUSHALL = bytes([21, 1])
LGET = lambda s, k, mode=1: bytes([22, s, k, mode])  # mode 0 RMW, 1 RO, 2 none
LGET_RMW = lambda s, k: LGET(s, k, 0)
LMGET = lambda s, k1, k2, rmw=0: bytes([24, rmw, s, k1, k2])
LSET = lambda s, k, v, pin=0: bytes([25, 0, s, k]) + v + bytes([pin])
LADD = lambda s, k, v: bytes([25, 1, s, k]) + v + bytes([0])
LDEL = lambda s, k: bytes([28, s, k])
LAPPEND = lambda s, k, v: bytes([30, 0, s, k]) + v
LINCR = lambda s, k: bytes([32, 0, s, k, 3])
LUNPIN = lambda s, k: bytes([33, s, k])
LMARK = lambda s, k: bytes([34, 0, s, k])
LVALIDATE = lambda s: bytes([35, s])
LCOMMIT = lambda s: bytes([36, s])
LABORT = lambda s: bytes([38, s])
IQGET = lambda s, k: bytes([39, s, k])
IQSET = lambda s, k, v: bytes([40, s, k]) + v
QAREG = lambda s, k: bytes([41, s, k])
QAREAD = lambda s, k: bytes([42, s, k])
SAR = lambda s, k, v, mark=2: bytes([43, s, k]) + v + bytes([mark])  # 0 MARK, 1 UNMARK, 2 none
DAR = lambda s, k, mark=2: bytes([44, s, k, mark])
ADVANCE = lambda i: bytes([45, i])  # [1, 50, 250, 499, 500, 501, 1000, 2001, 60000, 3600000]
TICK = bytes([47])
MAXMEMORY = lambda i: bytes([48, i])  # [0, 150, 400, 1000, 3000]
REWRITE_BEGIN = bytes([49])
REWRITE_STEP = lambda n: bytes([50, n])
REWRITE_SWITCH = bytes([51])
REWRITE_ABANDON = bytes([52])
RESTART = bytes([53])


def ops(config, *steps):
    return bytes([config]) + b"".join(steps)


ENGINE = {
    "plain-get-set": ops(
        WT,
        SET(K0, val("hello")),
        GET(K0),
        APPEND(K0, val(" world")),
        INCR(K1),
        INCR(K1),
        MSET(K2, val("m")),
        EXPIRE_PX(K2, 4),
        TTL(K2),
        ADVANCE(6),
        GET(K2),
        DEL(K0),
        DBSIZE,
        RESTART,
        GET(K1),
    ),
    "session-write-through": ops(
        WT,
        SET(K0, val("old")),
        LGET_RMW(S1, K0),
        LSET(S1, K0, val("new")),
        LGET(S2, K1),
        LSET(S2, K1, val("filled")),
        LCOMMIT(S1),
        LCOMMIT(S2),
        LSET(S3, K2, val("pinned"), 1),
        LAPPEND(S3, K2, val("+more")),
        LCOMMIT(S3),
        LGET(S1, K2),
        LUNPIN(S2, K2),
        LCOMMIT(S2),
        INSPECT(K2),
        RESTART,
        INSPECT(K2),
    ),
    "session-conflicts-and-expiry": ops(
        WT,
        SET(K0, val("v")),
        LGET(S1, K0),
        LGET(S2, K0),
        LGET_RMW(S3, K0),  # wounds 1 and 2
        LGET(S1, K0),  # ABORT
        LVALIDATE(S2),
        LGET(S2, K1),
        ADVANCE(5),  # leases run out
        LCOMMIT(S3),
        ADVANCE(7),  # tombstones go
        LGET(S1, K0),
        LABORT(S1),
    ),
    "iq-leases-and-markers": ops(
        WT,
        IQGET(S1, K0),
        IQGET(S2, K0),  # RETRY: 1 is filling
        IQSET(S1, K0, val("from-db")),
        QAREG(S2, K0),
        IQGET(S3, K0),  # RETRY under Q
        SAR(S2, K0, val("updated"), 0),
        QAREAD(S1, K0),
        DAR(S1, K0, 1),
        INSPECT(K0),
        CONFIGID(3),
        FRAGMENTS(4),
        FRAGMENTID(1, 5),
        SET(K1, val("x")),
        GET(K1),
        RESTART,
        INSPECT(K0),
    ),
    "write-around": ops(
        WA,
        LGET(S1, K0),
        LSET(S1, K0, val("filled")),
        LCOMMIT(S1),
        QAREG(S2, K0),
        QAREG(S3, K0),
        DAR(S2, K0),
        DAR(S3, K0),
        LGET(S1, K1),
        LDEL(S2, K1),
        LCOMMIT(S2),
        LCOMMIT(S1),
        RESTART,
    ),
    "memory-pressure": ops(
        WT | mem(1) | pinned_cap(1),
        SET(K0, big(20)),
        SET(K1, big(20)),
        SET(K2, big(30)),  # evicts
        LSET(S1, K3, big(10), 1),
        LSET(S2, KLONG, big(10), 1),  # pinned cap: NOTSTORED
        LCOMMIT(S1),
        LCOMMIT(S2),
        SET(KEMPTY, big(60)),
        MAXMEMORY(1),
        DBSIZE,
        RESTART,
    ),
    "log-rewrite": ops(
        WT,
        SET(K0, val("a")),
        SET(K1, val("b")),
        SET(K2, val("c")),
        LSET(S1, K3, val("p"), 1),
        LCOMMIT(S1),
        REWRITE_BEGIN,
        REWRITE_STEP(1),
        DEL(K0),
        SET(K0, val("a2")),
        REWRITE_STEP(1),
        APPEND(K2, val("+")),
        LGET_RMW(S2, K1),
        REWRITE_STEP(3),
        REWRITE_SWITCH,
        LSET(S2, K1, val("b2")),
        LCOMMIT(S2),
        RESTART,
        GET(K1),
    ),
}

# --- request_parser ------------------------------------------------------------------------------


def resp(*args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a if isinstance(a, bytes) else a.encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


REQUESTS = {
    "get": resp("GET", "k"),
    "set-options": resp("SET", "k", "v", "NX", "PX", "100", "GET"),
    "pipelined": resp("SET", "k", "hello") + resp("GET", "k") + resp("PING") + resp("DEL", "k", "j"),
    "inline": b"SET k \"a b\\x41\\n\" 'it\\'s'\r\nPING\nGET k\r\n\r\n",
    "lease-session": resp("LGET", "1", "k", "RMW")
    + resp("LSET", "1", "k", "v", "PIN")
    + resp("LMSET", "1", "NOPIN", "a", "1", "b", "2")
    + resp("LDECR", "1", "n", "5")
    + resp("LCOMMIT", "1"),
    "iq": resp("IQGET", "7", "k") + resp("IQSET", "7", "k", "v") + resp("QAREG", "8", "k")
    + resp("SAR", "8", "k", "w", "MARK") + resp("DAR", "8", "k", "UNMARK"),
    "server": resp("HELLO", "2", "AUTH", "u", "p", "SETNAME", "n") + resp("CONFIG", "SET", "maxmemory", "10")
    + resp("CLIENT", "SETINFO", "lib-name", "x") + resp("COMMAND", "DOCS", "get")
    + resp("EXPIRE", "k", "5", "XX", "GT") + resp("FRAGMENTID", "3", "7"),
    "server-subcommands": resp("CLIENT", "ID") + resp("CLIENT", "GETNAME") + resp("CLIENT", "SETNAME", "n")
    + resp("CLIENT", "LIST") + resp("CONFIG", "RESETSTAT") + resp("CONFIG", "GET", "maxmemory")
    + resp("COMMAND", "COUNT") + resp("COMMAND", "LIST") + resp("COMMAND", "INFO", "get", "set")
    + resp("COMMAND") + resp("INFO", "memory") + resp("PING", "hi") + resp("ECHO", "x"),
    "empty-and-partial": b"*0\r\n*-1\r\n\r\n" + resp("GET", "k")[:-3],
    "replies": b"+OK\r\n:-42\r\n$5\r\nhello\r\n$-1\r\n*3\r\n-ERR bad\r\n*0\r\n*-1\r\n-ABORT session aborted\r\n",
}

# --- log_replay ----------------------------------------------------------------------------------

LOGS = {
    "records": resp("CONFIGID", "7")
    + resp("FRAGMENTS", "2")
    + resp("FRAGMENTID", "1", "3")
    + resp("PUT", "plain", "v", "0", "7", "0")
    + resp("PUT", "pinned", "bw", "0", "7", "1")
    + resp("PUT", "ttl", "v", "1700000100000", "7", "0")
    + resp("APPEND", "plain", "123", "7")
    + resp("EXPIREAT", "plain", "1700000200000")
    + resp("MARK", "marked")
    + resp("DEL", "ttl")
    + resp("UNMARK", "nothing"),
    "flush-and-torn": resp("PUT", "a", "1", "0", "0", "0") + resp("FLUSH") + resp("PUT", "b", "2", "0", "0", "0")
    + resp("PUT", "c", "3", "0", "0", "0")[:-4],
}


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


def main():
    for name, data in ENGINE.items():
        write("engine_commands", name, data)
    for name, data in REQUESTS.items():
        write("request_parser", name, data)
    for name, data in LOGS.items():
        write("log_replay", name, data)


if __name__ == "__main__":
    main()
