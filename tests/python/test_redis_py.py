"""redis-py against a cads CMI: the plain (Redis-compatible) string subset, pipelines, errors,
connection pooling, and the cads lease commands through ``execute_command``.

Run against a running CMI:

    CADS_PORT=7379 python3 -m pytest -q tests/python

``cargo test -p cads-server --test redis_compat`` starts a CMI and runs this file with CADS_PORT set.
Without CADS_PORT the module is skipped.

A CMI speaks RESP2, and RESP3 after ``HELLO 3`` (redis-py 8 sends it on every new connection by
default), so every test runs with both protocols.
"""

import datetime
import os
import random
import time

import pytest

PORT = os.environ.get("CADS_PORT")
if not PORT:
    pytest.skip(
        "CADS_PORT is not set: start a CMI (cads-server --port P --cmis 1) and run with "
        "CADS_PORT=P, or run `cargo test -p cads-server --test redis_compat`",
        allow_module_level=True,
    )

redis = pytest.importorskip(
    "redis", reason="redis-py is not installed (pip install redis)"
)


def client(decode_responses=True, protocol=2, **kwargs):
    return redis.Redis(
        host="127.0.0.1",
        port=int(PORT),
        protocol=protocol,
        decode_responses=decode_responses,
        socket_timeout=10,
        **kwargs,
    )


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
def r(request):
    c = client(decode_responses=True, protocol=request.param)
    c.flushdb()
    yield c
    c.close()


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
def rb(request):
    c = client(decode_responses=False, protocol=request.param)
    c.flushdb()
    yield c
    c.close()


def test_default_client_settings():
    # redis-py's defaults (RESP3 through HELLO 3 in redis-py 8).
    c = redis.Redis(host="127.0.0.1", port=int(PORT), socket_timeout=10, decode_responses=True)
    try:
        assert c.ping() is True
        assert c.set("default:k", "v") is True
        assert c.get("default:k") == "v"
        assert c.get("default:missing") is None
        assert c.config_get("maxmemory")["maxmemory"].isdigit()
    finally:
        c.close()


def test_ping_echo(r):
    assert r.ping() is True
    assert r.echo("hello") == "hello"
    assert r.echo("") == ""


def test_set_get(r, rb):
    assert r.get("missing") is None
    assert r.set("k", "v") is True
    assert r.get("k") == "v"
    assert r.set("k", "v2") is True
    assert r.get("k") == "v2"
    assert r.set("", "") is True
    assert r.get("") == ""
    binary = b"a\r\nb\x00c\xff\r\n$3\r\n"
    assert rb.set(b"bin\r\nkey", binary) is True
    assert rb.get(b"bin\r\nkey") == binary
    big = bytes(range(256)) * 4096  # 1 MiB
    assert rb.set("big", big) is True
    assert rb.get("big") == big
    assert rb.strlen("big") == len(big)


def test_set_nx_xx_get(r):
    assert r.set("k", "v", nx=True) is True
    assert r.set("k", "other", nx=True) is None
    assert r.get("k") == "v"
    assert r.set("missing", "v", xx=True) is None
    assert r.exists("missing") == 0
    assert r.set("k", "v2", xx=True) is True
    assert r.get("k") == "v2"
    assert r.set("k", "v3", get=True) == "v2"
    assert r.set("new", "v", get=True) is None
    assert r.get("new") == "v"
    assert r.set("k", "ignored", nx=True, get=True) == "v3"
    assert r.get("k") == "v3"
    with pytest.raises(redis.ResponseError, match="syntax error"):
        r.execute_command("SET", "k", "v", "NX", "XX")


def test_set_expiry_options(r):
    assert r.set("ex", "v", ex=100) is True
    assert 98 <= r.ttl("ex") <= 100
    assert r.set("px", "v", px=100_000) is True
    assert 98_000 <= r.pttl("px") <= 100_000
    assert r.set("td", "v", ex=datetime.timedelta(seconds=50)) is True
    assert 48 <= r.ttl("td") <= 50
    now = int(time.time())
    assert r.set("exat", "v", exat=now + 1000) is True
    assert 997 <= r.ttl("exat") <= 1000
    assert r.set("pxat", "v", pxat=(now + 1000) * 1000) is True
    assert 997 <= r.ttl("pxat") <= 1000
    # KEEPTTL keeps it, a plain SET drops it.
    assert r.set("ex", "v2", keepttl=True) is True
    assert 98 <= r.ttl("ex") <= 100
    assert r.get("ex") == "v2"
    assert r.set("ex", "v3") is True
    assert r.ttl("ex") == -1
    # Expiry in the past: gone at once.
    assert r.set("past", "v", exat=1) is True
    assert r.get("past") is None
    assert r.set("past", "v", pxat=1) is True
    assert r.exists("past") == 0


def test_set_invalid_expiry(r):
    for kwargs in ({"ex": 0}, {"ex": -1}, {"px": 0}, {"px": -5}):
        with pytest.raises(redis.ResponseError, match="invalid expire time"):
            r.set("bad", "v", **kwargs)
    with pytest.raises(redis.ResponseError, match="not an integer"):
        r.execute_command("SET", "bad", "v", "EX", "abc")
    with pytest.raises(redis.ResponseError, match="syntax error"):
        r.execute_command("SET", "bad", "v", "EX", "10", "PX", "100")
    with pytest.raises(redis.ResponseError, match="syntax error"):
        r.execute_command("SET", "bad", "v", "KEEPTTL", "EX", "10")
    assert r.exists("bad") == 0


def test_mset_mget(r):
    assert r.mset({"a": "1", "b": "2", "c": "3"}) is True
    assert r.mget("a", "b", "missing", "c") == ["1", "2", None, "3"]
    assert r.mget(["a"]) == ["1"]
    with pytest.raises(redis.ResponseError, match="wrong number of arguments"):
        r.execute_command("MSET", "a", "1", "b")


def test_incr_family(r):
    assert r.incr("n") == 1
    assert r.incr("n", 10) == 11
    assert r.incrby("n", 5) == 16
    assert r.decr("n") == 15
    assert r.decr("n", 5) == 10
    assert r.decrby("n", 20) == -10
    assert r.get("n") == "-10"
    assert r.decr("fresh") == -1
    r.set("max", str(2**63 - 1))
    with pytest.raises(redis.ResponseError, match="overflow"):
        r.incr("max")
    r.set("min", str(-(2**63)))
    with pytest.raises(redis.ResponseError, match="overflow"):
        r.decr("min")


def test_incr_on_a_non_integer_is_a_response_error(r):
    for value in ["abc", "1.5", "", " 1", "1 ", "+1", "01"]:
        r.set("s", value)
        with pytest.raises(redis.ResponseError, match="not an integer"):
            r.incr("s")
        assert r.get("s") == value
    r.set("n", "1")
    with pytest.raises(redis.ResponseError, match="not an integer"):
        r.execute_command("INCRBY", "n", "x")


def test_append_strlen(r):
    assert r.append("ap", "hello") == 5
    assert r.append("ap", " world") == 11
    assert r.get("ap") == "hello world"
    assert r.strlen("ap") == 11
    assert r.strlen("missing") == 0
    assert r.append("empty", "") == 0
    assert r.exists("empty") == 1


def test_expire_family(r):
    assert r.expire("missing", 100) is False
    r.set("e", "v")
    assert r.ttl("e") == -1
    assert r.pttl("e") == -1
    assert r.ttl("missing") == -2
    assert r.pttl("missing") == -2
    assert r.expire("e", 100) is True
    assert 98 <= r.ttl("e") <= 100
    assert r.pexpire("e", 200_000) is True
    assert 198 <= r.ttl("e") <= 200
    assert r.expireat("e", int(time.time()) + 1000) is True
    assert 997 <= r.ttl("e") <= 1000
    at = datetime.datetime.now() + datetime.timedelta(seconds=500)
    assert r.pexpireat("e", at) is True
    assert 497 <= r.ttl("e") <= 500
    assert r.persist("e") is True
    assert r.persist("e") is False
    assert r.persist("missing") is False
    assert r.ttl("e") == -1
    # NX / XX / GT / LT
    assert r.expire("e", 100, xx=True) is False
    assert r.expire("e", 100, gt=True) is False
    assert r.expire("e", 100, nx=True) is True
    assert r.expire("e", 200, nx=True) is False
    assert r.expire("e", 50, gt=True) is False
    assert r.expire("e", 300, gt=True) is True
    assert r.expire("e", 400, lt=True) is False
    assert r.expire("e", 60, lt=True) is True
    assert 58 <= r.ttl("e") <= 60
    assert r.pexpire("e", 90_000, xx=True) is True
    assert 88 <= r.ttl("e") <= 90
    r.persist("e")
    assert r.expire("e", 100, lt=True) is True
    with pytest.raises(redis.ResponseError, match="not compatible"):
        r.execute_command("EXPIRE", "e", "100", "NX", "XX")
    with pytest.raises(redis.ResponseError, match="not compatible"):
        r.execute_command("EXPIRE", "e", "100", "GT", "LT")
    with pytest.raises(redis.ResponseError, match="not an integer"):
        r.execute_command("EXPIRE", "e", "abc")
    # Negative or past expiry deletes the key.
    assert r.expire("e", -1) is True
    assert r.exists("e") == 0
    r.set("e", "v")
    assert r.expireat("e", 1) is True
    assert r.get("e") is None


def test_delete_exists_dbsize_flushdb(r):
    r.mset({"a": "1", "b": "2", "c": "3"})
    assert r.dbsize() == 3
    assert r.exists("a") == 1
    assert r.exists("a", "a", "b", "missing") == 3
    assert r.delete("a", "a", "missing") == 1
    assert r.delete("missing") == 0
    assert r.dbsize() == 2
    assert r.flushdb() is True
    assert r.dbsize() == 0
    r.set("x", "1")
    assert r.flushall() is True
    assert r.dbsize() == 0


def test_pipeline_of_1000_commands(r):
    pipe = r.pipeline(transaction=False)
    for i in range(250):
        pipe.set("p:%d" % i, i)
        pipe.incr("p:%d" % i)
        pipe.get("p:%d" % i)
        pipe.exists("p:%d" % i, "missing")
    results = pipe.execute()
    assert len(results) == 1000
    for i in range(250):
        assert results[4 * i : 4 * i + 4] == [True, i + 1, str(i + 1), 1]
    assert r.dbsize() == 250
    assert r.mget(["p:0", "p:249"]) == ["1", "250"]


def test_pipeline_errors_do_not_break_the_pipeline(r):
    r.set("s", "text")
    pipe = r.pipeline(transaction=False)
    pipe.set("a", "1")
    pipe.incr("s")
    pipe.get("a")
    results = pipe.execute(raise_on_error=False)
    assert results[0] is True
    assert isinstance(results[1], redis.ResponseError)
    assert results[2] == "1"


def test_unknown_command_is_a_response_error(r):
    with pytest.raises(redis.ResponseError, match="unknown command"):
        r.execute_command("NOSUCHCOMMAND")
    with pytest.raises(redis.ResponseError, match="unknown command"):
        r.execute_command("NOSUCHCOMMAND", "a", "b")
    # The connection is still usable.
    assert r.ping() is True


def test_connection_pool_reuse():
    pool = redis.ConnectionPool(
        host="127.0.0.1", port=int(PORT), protocol=2, max_connections=1,
        decode_responses=True, socket_timeout=10,
    )
    c = redis.Redis(connection_pool=pool)
    try:
        first_id = c.client_id()
        # With max_connections=1 every command must reuse the single pooled connection; a
        # connection that could not be returned to the pool would make the next call fail.
        for i in range(200):
            c.set("pool:%d" % i, i)
            assert c.get("pool:%d" % i) == str(i)
        pipe = c.pipeline(transaction=False)
        for i in range(50):
            pipe.incr("pool:counter")
        assert pipe.execute()[-1] == 50
        assert c.client_id() == first_id
        # A second client on the same pool uses the same connection too.
        other = redis.Redis(connection_pool=pool)
        assert other.client_id() == first_id
        assert other.get("pool:counter") == "50"
    finally:
        c.delete("pool:counter", *["pool:%d" % i for i in range(200)])
        pool.disconnect()


def test_lease_commands_through_execute_command(r):
    # Random session ids so that reruns against a long-lived CMI never meet an old tombstone.
    s1 = random.randint(1, 2**62)
    s2 = s1 + 1
    r.set("lk", "old")
    assert r.execute_command("LGET", s1, "lk", "RMW") == "old"
    assert r.execute_command("LSET", s1, "lk", "v") in (True, "OK")
    # Another session cannot take the X lease session 1 holds (write-through: abort the requester).
    with pytest.raises(redis.ResponseError) as info:
        r.execute_command("LGET", s2, "lk", "RMW")
    assert str(info.value).startswith("ABORT"), str(info.value)
    # A plain write may not slip under the lease.
    with pytest.raises(redis.ResponseError) as info:
        r.set("lk", "plain")
    assert str(info.value).startswith("LEASED"), str(info.value)
    # The pending version is invisible until commit.
    assert r.get("lk") == "old"
    assert r.execute_command("LCOMMIT", s1) in (True, "OK")
    assert r.get("lk") == "v"
    # Session 2 is a tombstone until it is aborted.
    with pytest.raises(redis.ResponseError) as info:
        r.execute_command("LGET", s2, "lk", "RO")
    assert str(info.value).startswith("ABORT"), str(info.value)
    assert r.execute_command("LABORT", s2) in (True, "OK")
    # A fresh session reads the committed value under an S lease and commits with nothing pending.
    s3 = s2 + 1
    assert r.execute_command("LGET", s3, "lk") == "v"
    assert r.execute_command("LVALIDATE", s3) in (True, "OK")
    assert r.execute_command("LCOMMIT", s3) in (True, "OK")
    assert r.set("lk", "plain") is True
