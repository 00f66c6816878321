"""Kafka consumers kept across batches within one Python worker.

Spark reuses Python workers, so a task of batch N+1 often runs where the task of batch N read
the same partition. Like Spark's ``KafkaDataConsumer`` cache, consumers are pooled by client
configuration (cluster and security settings, secrets included, held in memory only), topic
and partition; a pooled consumer keeps its broker connections and metadata, which a new
consumer must set up again. A consumer that failed is closed, never pooled. The pool is
bounded (least recently used closed first) and consumers idle longer than the timeout are
closed by a daemon thread.

How a consumer waits in the pool depends on what follows its range in the log
(why: docs/decisions/0007-replace-consumers-instead-of-seeking.md):

- Near the log end (at most ``REFETCH_RECORDS`` records after it, the usual case of a stream
  that keeps up) it is *unassigned*: librdkafka fetches nothing for it. Left assigned, a
  consumer at the log end keeps a fetch waiting at the broker and sends the next as soon as
  one returns, every ``fetch.wait.max.ms`` (the main job sets a short one), which costs the
  broker CPU. A reader takes it wherever its last range stopped (another worker may have read
  the ranges in between, or a batch is replayed) and assigns it at the range's start: not a
  seek, nothing of its own is in flight once it has been idle for ``fetch.wait.max.ms``.
- With a backlog after its range (catching up) it stays *assigned* and keeps prefetching, up
  to librdkafka's queue bound (``queued.max.messages.kbytes``, as
  ``client_config.consumer_settings`` sets it), so the next range's records are in memory
  already. It is taken only by a range that starts exactly where its delivery stopped;
  otherwise it is replaced by a new consumer, not re-positioned: librdkafka starts a seek's
  fetch only once the consumer's outstanding fetch returns.

The pool's memory is therefore at most ``kafkaConsumer.cacheCapacity`` times that queue bound,
reached only while catching up; 0 turns pooling off. (Pausing idle consumers instead was
tried: librdkafka's resume then waited for the outstanding fetch as a seek does.)
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)


REFETCH_RECORDS = 10_000
"""A released consumer with at most this many records after its range in the log (as its last
fetch saw the log's end) is unassigned: it has fetched or soon fetches them all and would then
keep a fetch waiting at the broker; a reader reusing it fetches them again."""


def _idle_error(err: Any) -> None:
    """``error_cb`` of an idle consumer (no secrets: librdkafka's error texts name brokers)."""
    log.debug("orderedkafka: idle pooled consumer: %s", err)


@dataclass
class _Idle:
    consumer: Any
    next_offset: int  # the offset it delivers next without a seek; -1: unknown (seek)
    assigned: bool  # still fetching ahead (a backlog); else unassigned: fetching nothing
    since: float = field(default_factory=time.monotonic)


@dataclass
class PoolStats:
    """Counts since the worker started (what the benchmark reads)."""

    created: int = 0
    reused: int = 0
    moved: int = 0
    """Reused consumers whose last range stopped elsewhere than the new range's start (counted
    in ``reused`` too)."""
    replaced: int = 0
    """Idle consumers of the key that could not be assigned again, closed for a new one
    (counted in ``created`` and ``closed`` too)."""
    closed: int = 0


class ConsumerPool:
    """A bounded pool of idle consumers keyed by (reader kind, settings, topic, partition).

    Parameters
    ----------
    capacity
        How many idle consumers to keep at most; 0 or less pools nothing.
    idle_timeout_s
        Seconds after which an idle consumer is closed.

    Runs on
    -------
    executor (one pool per Python worker: :data:`POOL`)
    """

    def __init__(self, *, capacity: int = 16, idle_timeout_s: float = 60.0) -> None:
        self.capacity = capacity
        self.idle_timeout_s = idle_timeout_s
        self.stats = PoolStats()
        self._idle: OrderedDict[Hashable, _Idle] = OrderedDict()
        self._lock = threading.Lock()
        self._sweeper: threading.Thread | None = None

    def __repr__(self) -> str:  # never the keys: they hold the client's secret settings
        return f"ConsumerPool(idle={len(self._idle)}, capacity={self.capacity}, {self.stats})"

    def configure(self, *, capacity: int, idle_timeout_s: float) -> None:
        """Apply a reader's ``kafkaConsumer.cache*`` options (the latest reader's win), closing the
        idle consumers beyond them now.

        Parameters
        ----------
        capacity
            How many idle consumers to keep at most.
        idle_timeout_s
            Seconds after which an idle consumer is closed.
        """
        self.capacity, self.idle_timeout_s = capacity, idle_timeout_s
        self._evict(time.monotonic())

    def acquire(self, key: Hashable, start: int, factory: Callable[[], Any]) -> Any:
        """A consumer assigned at ``start``: the pooled one of ``key`` when it still fetches
        ahead from exactly there (its prefetched records serve the range) or is unassigned
        (assigning it is not a seek); else a new one from ``factory`` (a pooled consumer
        fetching ahead from elsewhere is closed: see the module's note on seeks).

        Parameters
        ----------
        key
            The pool key: reader kind, client settings, topic and partition.
        start
            The offset the range starts at.
        factory
            Makes a new consumer (not yet assigned).

        Returns
        -------
        Any
            The consumer, assigned at ``start``.

        Raises
        ------
        Exception
            Whatever ``factory`` or assigning the new consumer raises (that consumer is closed).
        """
        with self._lock:
            idle = self._idle.pop(key, None)
        if idle is not None and idle.assigned and idle.next_offset == start:
            self.stats.reused += 1
            return idle.consumer
        if idle is not None and not idle.assigned:
            try:
                idle.consumer.assign(start)
            except Exception as exc:  # noqa: BLE001 - a broken idle consumer: a new one
                log.debug("orderedkafka: assigning a pooled consumer again failed (%s)",
                          type(exc).__name__)
            else:
                self.stats.reused += 1
                self.stats.moved += idle.next_offset != start
                return idle.consumer
        if idle is not None:
            self.stats.replaced += 1
            self._close(idle.consumer)
        consumer = factory()
        try:
            consumer.assign(start)
        except BaseException:
            self._close(consumer)
            raise
        self.stats.created += 1
        return consumer

    def release(self, key: Hashable, consumer: Any, next_offset: int) -> None:
        """Give back a consumer that finished its range cleanly. It stays assigned only while more
        than ``REFETCH_RECORDS`` records follow in the log (catching up: the records it prefetched
        serve the next range); near the log end it is unassigned (module note). A consumer that
        cannot be made idle, or any with pooling off, is closed.

        Parameters
        ----------
        key
            The pool key it was acquired with.
        consumer
            The consumer.
        next_offset
            The offset it would deliver next; -1 when unknown.
        """
        if self.capacity <= 0:
            self._close(consumer)
            return
        try:
            high = consumer.cached_high()
            assigned = next_offset >= 0 and high - next_offset > REFETCH_RECORDS
            if not assigned:
                consumer.unassign()
        except Exception as exc:  # noqa: BLE001 - not pooled then
            log.debug("orderedkafka: a consumer could not be made idle (%s); closed",
                      type(exc).__name__)
            self._close(consumer)
            return
        consumer.errors = _idle_error  # no reader to tell: a broker restart is not news
        with self._lock:
            previous = self._idle.pop(key, None)
            self._idle[key] = _Idle(consumer, next_offset, assigned)
        if previous is not None:
            self._close(previous.consumer)
        self._evict(time.monotonic())
        self._start_sweeper()

    def discard(self, consumer: Any) -> None:
        """Close a consumer that failed (never pooled).

        Parameters
        ----------
        consumer
            The consumer.
        """
        self._close(consumer)

    def clear(self) -> None:
        """Closes every idle consumer."""
        with self._lock:
            idle = list(self._idle.values())
            self._idle.clear()
        for entry in idle:
            self._close(entry.consumer)

    def _evict(self, now: float) -> None:
        victims = []
        with self._lock:
            for key in list(self._idle):
                if (len(self._idle) > max(self.capacity, 0)
                        or now - self._idle[key].since > self.idle_timeout_s):
                    victims.append(self._idle.pop(key))
        for entry in victims:
            self._close(entry.consumer)

    def _close(self, consumer: Any) -> None:
        with self._lock:
            self.stats.closed += 1
        try:
            consumer.close()
        except Exception as exc:  # noqa: BLE001 - closing is best effort
            log.debug("orderedkafka: closing a pooled consumer failed: %s", type(exc).__name__)

    def _start_sweeper(self) -> None:
        with self._lock:
            if self._sweeper is not None and self._sweeper.is_alive():
                return
            self._sweeper = threading.Thread(target=self._sweep, daemon=True,
                                             name="orderedkafka-consumer-pool")
            self._sweeper.start()

    def _sweep(self) -> None:
        while True:
            time.sleep(max(0.5, min(self.idle_timeout_s / 2, 10.0)))
            self._evict(time.monotonic())
            with self._lock:
                if not self._idle:
                    self._sweeper = None
                    return


#: The pool of this Python worker.
POOL = ConsumerPool()
atexit.register(POOL.clear)
