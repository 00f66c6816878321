"""Kafka consumers kept across batches within one Python worker.

Spark reuses Python workers, so a task of batch N+1 often runs where the task of batch N read
the same partition. Like Spark's ``KafkaDataConsumer`` cache, consumers are pooled by client
configuration (cluster and security settings, secrets included, held in memory only), topic
and partition: a reader takes the idle consumer of its key, which keeps its broker
connections, metadata and prefetched records, when the range starts exactly where that
consumer's delivery stopped. Otherwise (another worker read the ranges in between, or a batch
is replayed) the idle consumer is replaced by a new one, not re-positioned: librdkafka starts a
seek's fetch only once the consumer's outstanding fetch returns, and an idle consumer at the
end of the log has one waiting at the broker for ``fetch.wait.max.ms`` (500 ms): a seek took
454 ms there against 10.5 ms for a new consumer (``benchmarks/results/20261125-s11/``;
``benchmarks/profile_source_reader.py`` measures the case). A
consumer that failed is closed, never pooled. The pool is bounded (least recently used closed
first) and consumers idle longer than the timeout are closed by a daemon thread.

Memory: an idle consumer keeps prefetching up to librdkafka's queue bound
(``queued.max.messages.kbytes``: 64 MiB per consumer by default here, lowered with
``kafka.queued.max.messages.kbytes``), so the next batch's records are usually in memory already
(a range of 100 records then takes well under a millisecond instead of a new consumer's tens of
milliseconds, ``benchmarks/profile_source_reader.py``). The pool's worst case is therefore
``kafkaConsumer.cacheCapacity`` times that bound; 0 turns pooling off. (Pausing idle consumers
was measured: librdkafka's resume then waits ``fetch.wait.max.ms``, 500 ms per range.)
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


def _idle_error(err: Any) -> None:
    """``error_cb`` of an idle consumer (no secrets: librdkafka's error texts name brokers)."""
    log.debug("orderedkafka: idle pooled consumer: %s", err)


@dataclass
class _Idle:
    consumer: Any
    next_offset: int  # the offset it delivers next without a seek; -1: unknown (seek)
    since: float = field(default_factory=time.monotonic)


@dataclass
class PoolStats:
    """Counts since the worker started (what the benchmark reads)."""

    created: int = 0
    reused: int = 0
    replaced: int = 0
    """Idle consumers of the key that stopped elsewhere than the range's start, closed for a
    new one (counted in ``created`` and ``closed`` too)."""
    closed: int = 0


class ConsumerPool:
    """A bounded pool of idle consumers keyed by (reader kind, settings, topic, partition)."""

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
        """Applies a reader's ``kafkaConsumer.cache*`` options (the latest reader's win)."""
        self.capacity, self.idle_timeout_s = capacity, idle_timeout_s
        self._evict(time.monotonic())

    def acquire(self, key: Hashable, start: int, factory: Callable[[], Any]) -> Any:
        """An assigned consumer positioned at ``start``: the pooled one of ``key`` when its
        delivery stopped exactly there, else a new one (a pooled one stopped elsewhere is
        closed: see the module's note on seeks)."""
        with self._lock:
            idle = self._idle.pop(key, None)
        if idle is not None and idle.next_offset == start:
            self.stats.reused += 1
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
        """Returns a consumer that finished its range cleanly; ``next_offset`` is the offset
        it would deliver next (-1 when unknown)."""
        if self.capacity <= 0:
            self._close(consumer)
            return
        consumer.errors = _idle_error  # no reader to tell: a broker restart is not news
        with self._lock:
            previous = self._idle.pop(key, None)
            self._idle[key] = _Idle(consumer, next_offset)
        if previous is not None:
            self._close(previous.consumer)
        self._evict(time.monotonic())
        self._start_sweeper()

    def discard(self, consumer: Any) -> None:
        """Closes a consumer that failed (never pooled)."""
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
