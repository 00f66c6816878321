"""Buffered blind writes (``RocksDBStatePartition.put``) against a plain-dict model.

Blind ``put``s are held in one WriteBatch and written before any read, delete, other write
path or commit. Random mixes of every operation, in two spaces, must read exactly like a dict
that saw the same calls, keep exact key counts exact, and restore the same on another machine.
The buffer is made tiny here (3 puts) so flushes by size happen too, and left at its default.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from orderedstream.statestore import EMPTY_VERSION, BytesCodec
from orderedstream.statestore.rocksdb import db as db_mod
from orderedstream.statestore.rocksdb import writes as writes_mod
from orderedstream.statestore.rocksdb.store import RocksDBStateStore

Factory = Callable[..., RocksDBStateStore]
SPACES = ("default", "other")


def random_ops(part, model: dict[str, dict[bytes, object]], rng: random.Random,  # type: ignore[no-untyped-def]
               n: int, exact: bool) -> None:
    """``n`` random calls on ``part``, mirrored in ``model``; reads are checked as they go."""
    def key() -> bytes:
        return b"k%03d" % rng.randrange(60)

    for _ in range(n):
        space = rng.choice(SPACES)
        m = model[space]
        op = rng.random()
        if op < 0.40:  # blind put (buffered)
            k, v = key(), rng.randrange(1000)
            part.put(k, v, space=space)
            m[k] = v
        elif op < 0.50:  # read-modify-write (written at once)
            k = key()
            assert part.get(k, space=space) == m.get(k)
            part.put(k, (m.get(k) or 0) + 1, space=space)  # type: ignore[operator]
            m[k] = (m.get(k) or 0) + 1  # type: ignore[operator]
        elif op < 0.60:  # get_for_update remembers presence for a later put_many/delete
            k = key()
            read = part.get_for_update if rng.random() < 0.5 else part.get
            assert read(k, -1, space=space) == m.get(k, -1)
        elif op < 0.67:
            k = key()
            part.delete(k, space=space)
            m.pop(k, None)
        elif op < 0.74:
            items = [(key(), rng.randrange(1000)) for _ in range(rng.randrange(1, 6))]
            part.put_many(items, space=space)
            m.update(items)
        elif op < 0.80:
            keys = [key() for _ in range(5)]
            assert part.multi_get(keys, space=space) == [m.get(k) for k in keys]
        elif op < 0.85:
            k = key()
            assert part.contains(k, space=space) == (k in m)
        elif op < 0.90:
            lo = key()
            assert list(part.range(lo, space=space)) == sorted(
                (k, v) for k, v in m.items() if k >= lo)
        elif op < 0.95:
            k, v = key(), rng.randrange(1000)
            part.put(k, v, space=space, ttl_ms=3_600_000)
            m[k] = v
        elif exact:
            assert part.num_keys(space=space) == len(m)
            assert part.num_keys() == sum(len(x) for x in model.values())


@pytest.mark.parametrize(("buffer_puts", "exact", "changelog"), [
    (3, True, False), (None, True, False), (3, False, False), (None, False, False),
    (3, True, True)], ids=["tiny-exact", "default-exact", "tiny-nocount", "default-nocount",
                           "tiny-exact-changelog"])
def test_buffered_puts_read_like_a_dict_count_exactly_and_restore(
        make_store: Factory, monkeypatch: pytest.MonkeyPatch, buffer_puts: int | None,
        exact: bool, changelog: bool) -> None:
    if buffer_puts is not None:
        monkeypatch.setattr(writes_mod, "_BUFFER_PUTS", buffer_puts)
    monkeypatch.setattr(db_mod, "_MEMO_MAX", 16)  # the presence memo clears often
    rng = random.Random(f"{buffer_puts}-{exact}")
    model: dict[str, dict[bytes, object]] = {s: {} for s in SPACES}
    options = {"exact_key_count": exact}
    if changelog:  # versions 1 and 3 are restored from write logs
        options.update(changelog=True, snapshot_interval=2)
    store = make_store("writer", **options)
    with store.open(0, EMPTY_VERSION) as part:
        for version in range(4):
            random_ops(part, model, rng, 600, exact)
            for _ in range(7):  # end on blind puts: the commit must write them
                k, v = b"k%03d" % rng.randrange(60), rng.randrange(1000)
                part.put(k, v)
                model["default"][k] = v
            metrics = part.commit(version)
            if exact:
                assert metrics.num_keys == sum(len(m) for m in model.values())
    with make_store("elsewhere", **options).open(0, 3) as part:
        for space in SPACES:
            assert dict(part.items(space=space)) == model[space]
        if exact:
            assert part.num_keys() == sum(len(m) for m in model.values())


def test_uncommitted_buffered_puts_are_dropped_with_the_transaction(
        make_store: Factory) -> None:
    store = make_store()
    with store.open(0, EMPTY_VERSION) as part:
        part.put("kept", 1)
        part.commit(0)
        part.put("lost", 2)  # buffered, never committed
    with store.open(0, 0) as part:
        assert dict(part.items()) == {b"kept": 1} and part.num_keys() == 1


def test_values_are_stored_bare_unless_their_first_byte_needs_a_frame(
        make_store: Factory) -> None:
    """Payloads starting with 0x00/0x01 (or empty) keep a 1-byte frame, others are stored as
    they are; both read back through every path, with and without TTL, after a restore."""
    values = {b"empty": b"", b"zero": b"\x00abc", b"one": b"\x01xyz", b"two": b"\x02",
              b"plain": b"plain", b"high": b"\xff\x00"}
    store = make_store(codec=BytesCodec())
    with store.open(0, EMPTY_VERSION) as part:
        for k, v in values.items():
            part.put(k, v)
        part.put_many((b"many-" + k, v) for k, v in values.items())
        part.put_many(((b"ttl-" + k, v) for k, v in values.items()), ttl_ms=10, now_ms=0)
        part.put(b"ttl-one-put", b"\x01late", ttl_ms=10, now_ms=0)
        raw = dict(part.raw_items())
        assert raw[b"plain"] == b"plain" and raw[b"high"] == b"\xff\x00"
        assert raw[b"zero"] == b"\x00\x00abc" and raw[b"empty"] == b"\x00"
        assert raw[b"ttl-plain"][:1] == b"\x01" and raw[b"ttl-plain"].endswith(b"plain")
        part.commit(0)
    with make_store("elsewhere", codec=BytesCodec()).open(0, 0) as part:
        for k, v in values.items():
            assert part.get(k) == v and part.get(b"many-" + k) == v
        assert part.multi_get(list(values)) == list(values.values())
        assert dict(part.prefix(b"ttl-")) == {
            **{b"ttl-" + k: v for k, v in values.items()}, b"ttl-one-put": b"\x01late"}
        expired = {k: v for _, k, v in part.expire(now_ms=20)}
        assert expired == {**{b"ttl-" + k: v for k, v in values.items()},
                           b"ttl-one-put": b"\x01late"}
        assert part.num_keys() == 2 * len(values)


def test_puts_made_while_expire_iterates_are_seen_by_it_and_replayed_in_order(
        make_store: Factory) -> None:
    """``expire`` writes the caller's buffered puts before each step: a key renewed without
    TTL during the pass is not expired, and a changelog restore holds the renewed value."""
    options = {"changelog": True, "snapshot_interval": 10}
    store = make_store("writer", **options)
    with store.open(0, EMPTY_VERSION) as part:
        part.put(b"a", "old-a", ttl_ms=10, now_ms=0)
        part.put(b"b", "old-b", ttl_ms=20, now_ms=0)
        part.commit(0)
        expired = []
        for _space, key, value in part.expire(now_ms=100):
            expired.append((key, value))
            if key == b"a":
                part.put(b"b", "renewed-b")
        assert expired == [(b"a", "old-a")]
        assert part.commit(1).changelog
    with make_store("elsewhere", **options).open(0, 1) as part:
        assert dict(part.items()) == {b"b": "renewed-b"} and part.num_keys() == 1
