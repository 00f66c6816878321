"""Steady: the main job and Quix Streams under a fixed input rate, one engine at a time.

Each engine reads twelve Kafka partitions (4 topics x 3) fed by the job's generator at a
fixed rate from a process of its own (``benchmarks.cases._steady_feed``). The main job runs
in the plain session of ``orderedstream run --master local[2]`` (Spark's defaults, the
process tuning off); Quix Streams runs the same ``SessionLogic`` (``benchmarks/quix_app.py``).

- Ramp: after a warm-up, fixed-rate steps from an empty backlog, each rate 1.6x the last,
  until the lag stops being bounded (``_step``), then one step between the highest rate that
  held and the lowest that did not.
- Latency: each record's Kafka timestamp to the commit that made it visible (the pack: the
  Delta commit's timestamp in its log; Quix: the end of the sink flush that wrote it), at half
  the pack's maximum rate, for each trigger (Quix: commit) interval; the interval of lowest
  p99 is then run for the measured window.
- Cost in the measured window: CPU seconds per record by kind of process (the Kafka broker
  and the feeder are in no engine's tree), peak and final RSS, RSS slope (least squares over
  the window's last 5 minutes).
- The pack on a standalone cluster (master + 2 workers x 1 core) draining one backlog with 1
  and with 2 executors: a scaling ratio, informational.
"""

from __future__ import annotations

import math
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.cases._steady_feed import (
    create_topics,
    feeder_stats,
    latencies,
    record_timestamps,
    start_feeder,
)
from benchmarks.cases._streaming import run_engine
from benchmarks.common import CaseContext, Result, last_seconds, percentile, slope_per_minute

INTERVALS = (1.0, 2.0)
"""Trigger intervals (Quix: commit intervals) tried for latency, in seconds."""
RAMP_INTERVAL = 2.0  # the job's default trigger while the ramp looks for the maximum rate
RAMP_FACTOR = 1.6
START_WAIT_S = 5.0  # an engine's start (a query's first plan, a Quix app's subscription)
LAG_TOLERANCE_S = 1.5 * RAMP_INTERVAL
"""A step holds while its lag grows by less than this many seconds of input (``_step``)."""
RSS_SLOPE_S = 300.0  # the RSS slope is taken over the measured window's last 5 minutes
TARGETS = {"rate_per_core": 2.0, "p99": 1.0, "rss_slope": 1.0, "peak_rss": 1.5}
DEFAULTS = {"steady_window_s": 600, "steady_warmup_s": 30, "steady_step_s": 60,
            "steady_ramp_steps": 7, "steady_ramp_start": 2000, "steady_intervals": 2,
            "steady_scale_records": 50_000}


class _Phase:
    """One engine phase over fresh topics: sampling of lag, RSS and CPU while it runs."""

    def __init__(self, engine: Any, ctx: CaseContext, work: Path, tag: str,
                 interval: float) -> None:
        from benchmarks.cases._steady_feed import KafkaEnds

        self.engine, self.ctx, self.work = engine, ctx, work
        self.prefix = f"steady-{engine.name}-{tag}-{time.strftime('%H%M%S')}"
        self.topics = create_topics(ctx.bootstrap, self.prefix)
        self.kafka = KafkaEnds(ctx.bootstrap, self.topics)
        self.lag: list[tuple[float, float]] = []
        engine.start(self.prefix, interval)
        time.sleep(START_WAIT_S)
        self.seed = zlib.crc32(self.prefix.encode()) % 100_000

    def sample(self) -> float:
        """Lag now (records in Kafka the engine's commits do not cover yet)."""
        ends, done = self.kafka.ends(), self.engine.position()
        lag = float(sum(max(0, end - done.get(tp, 0)) for tp, end in ends.items()))
        self.lag.append((time.time(), lag))
        return lag

    def feed(self, rate: float, seconds: float, every: float = 1.0) -> dict[str, Any]:
        """Feed ``rate`` records/s for ``seconds``, sampling the lag every ``every`` s."""
        feeder = start_feeder(self.ctx.bootstrap, self.prefix, rate, seconds,
                              self.seed, self.work / "feeder.log")
        self.seed += 1
        began = time.time()
        while feeder.poll() is None:
            self.sample()
            time.sleep(every)
        stats = feeder_stats(feeder, timeout=60)
        return {**stats, "began": began, "ended": time.time()}

    def drain(self, timeout: float, below: float = 0.0) -> bool:
        """Wait until the lag is at most ``below`` (True) or ``timeout`` s passed."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.sample() <= below:
                return True
            time.sleep(1.0)
        return False

    def stop(self) -> None:
        self.engine.stop()
        self.kafka.close()


def _ramp(engine: Any, ctx: CaseContext, work: Path, cfg: dict[str, int]) -> dict[str, Any]:
    """Fixed-rate steps until the lag is no longer bounded; the highest rate that held.

    Up by ``RAMP_FACTOR`` while steps hold, down by it while none has held yet, then one step
    between the highest that held and the lowest that did not. A warm-up feed (not judged)
    comes first: the plain session starts its Python workers in its first batches.
    """
    phase = _Phase(engine, ctx, work, "ramp", RAMP_INTERVAL)
    steps: list[dict[str, Any]] = []
    step_s = float(cfg["steady_step_s"])
    rate, held, failed, refined = float(cfg["steady_ramp_start"]), 0.0, math.inf, False
    budget = cfg["steady_ramp_steps"]
    try:
        phase.feed(rate, float(cfg["steady_warmup_s"]))
        phase.drain(300.0)
        while budget > 0:
            budget -= 1
            phase.drain(max(60.0, 2 * step_s))  # every step starts from an empty backlog
            step = _step(phase, rate, step_s)
            steps.append(step)
            print(f"[steady] {engine.name} ramp {rate:,.0f} rec/s: "
                  f"{'held' if step['held'] else 'not held'} ({step['why']})", flush=True)
            if step["held"]:
                held = max(held, rate)
            else:
                failed = min(failed, rate)
            if refined:
                break
            if held and failed < math.inf:
                refined, rate, budget = True, math.sqrt(held * failed), max(budget, 1)
            else:
                rate = rate / RAMP_FACTOR if failed < math.inf else rate * RAMP_FACTOR
    finally:
        phase.stop()
    return {"max_rate": held, "first_failed": failed if failed < math.inf else None,
            "steps": steps}


def _quarter_mean(points: list[tuple[float, float]], last: bool) -> float:
    """Mean value of the first (or last) quarter of a series' time span."""
    if not points:
        return 0.0
    span = points[-1][0] - points[0][0]
    if last:
        picked = [v for t, v in points if t >= points[-1][0] - span / 4]
    else:
        picked = [v for t, v in points if t <= points[0][0] + span / 4]
    return float(np.mean(picked))


def _step(phase: _Phase, rate: float, seconds: float) -> dict[str, Any]:
    """One ramp step from an empty backlog: feed ``rate`` for ``seconds``, then judge it.

    It holds when the feeder reached 90% of the rate, the lag of the step's last quarter is
    above that of its first quarter by less than ``LAG_TOLERANCE_S`` seconds of input (the
    lag of a periodic trigger rises and falls by about one interval of input, so a fixed
    tolerance; an engine slower than the rate grows it by the shortfall times the step), and
    the lag at the end is below ``lag_bound_s`` seconds of input.
    """
    started = len(phase.lag)
    fed = phase.feed(rate, seconds)
    points = phase.lag[started:]
    first, last = _quarter_mean(points, False), _quarter_mean(points, True)
    end = points[-1][1] if points else 0.0
    tolerance = rate * LAG_TOLERANCE_S
    bound = rate * max(10.0, 4 * RAMP_INTERVAL)
    why = (f"lag {first:,.0f} -> {last:,.0f} (first -> last quarter, tolerance +"
           f"{tolerance:,.0f}), {end:,.0f} at the end; fed {fed['rate']:,.0f} rec/s")
    ok = fed["rate"] >= 0.9 * rate and last - first <= tolerance and end <= bound
    return {"rate": rate, "fed_rate": fed["rate"], "lag_first_quarter": first,
            "lag_last_quarter": last, "final_lag": end, "held": ok, "why": why}


def _measure(engine: Any, ctx: CaseContext, work: Path, rate: float, interval: float,
             seconds: float, warmup: float, tag: str) -> dict[str, Any]:
    """Run ``rate`` records/s at ``interval`` for ``warmup`` + ``seconds``: latency, CPU per
    record by kind and RSS of the measured part."""
    phase = _Phase(engine, ctx, work, tag, interval)
    process = engine.process
    try:
        phase.drain(120.0)
        feeder = start_feeder(ctx.bootstrap, phase.prefix, rate, warmup + seconds,
                              phase.seed, work / "feeder.log")
        began = time.time()
        cpu0: tuple[float | None, dict[str, float]] | None = None
        since = began
        while feeder.poll() is None:
            if cpu0 is None and time.time() >= began + warmup:
                cpu0, since = process.cpu(), time.time()
            phase.sample()
            time.sleep(1.0)
        if cpu0 is None:
            cpu0, since = process.cpu(), time.time()
        cpu1, until = process.cpu(), time.time()
        fed = feeder_stats(feeder, timeout=60)
        caught_up = phase.drain(max(120.0, 20 * interval))
        commits = engine.commits()
    finally:
        phase.stop()
    stamps = record_timestamps(ctx.bootstrap, phase.topics)
    lat, missing = latencies(commits, stamps, since, until)
    records = int(sum(((t >= since) & (t <= until)).sum() for _, t in stamps.values()))
    rss = [p for p in process.tree.rss_series if since <= p[0] <= until]
    kinds = {k: v - cpu0[1].get(k, 0.0) for k, v in cpu1[1].items()}
    sampled = sum(kinds.values())
    exact = None if cpu0[0] is None or cpu1[0] is None else cpu1[0] - cpu0[0]
    ms = [percentile(lat * 1000, q) for q in (0.5, 0.99, 1.0)]
    return {"rate": rate, "interval": interval, "fed_rate": fed["rate"], "records": records,
            "seconds": until - since, "caught_up": caught_up, "uncommitted": missing,
            "p50_ms": ms[0], "p99_ms": ms[1], "max_ms": ms[2], "latency_n": len(lat),
            "cpu_s": exact if exact is not None else sampled, "cpu_sampled_s": sampled,
            "cpu_source": "cgroup" if exact is not None else "psutil samples",
            "cpu_us_by_kind": {k: round(v * 1e6 / max(1, records), 2) for k, v in kinds.items()},
            "peak_rss_mb": max((v for _, v in rss), default=0.0),
            "final_rss_mb": rss[-1][1] if rss else 0.0,
            "rss_slope_mb_min": slope_per_minute(last_seconds(rss, RSS_SLOPE_S)),
            "lag_slope_per_min": slope_per_minute(last_seconds(
                [p for p in phase.lag if since <= p[0] <= until], RSS_SLOPE_S))}


def _engine_run(engine: Any, ctx: CaseContext, work: Path, cfg: dict[str, int],
                rate: float | None) -> dict[str, Any]:
    """Ramp, then the latency probes and the measured window at ``rate`` (None: half this
    engine's own maximum: the pack, which runs first)."""
    try:
        ramp = _ramp(engine, ctx, work, cfg)
        half = rate or (ramp["max_rate"] or ramp["first_failed"] or 0.0) / 2
        intervals = INTERVALS[: max(1, cfg["steady_intervals"])]
        probes: dict[str, dict[str, Any]] = {}
        if len(intervals) > 1:
            probe_s = max(20.0, cfg["steady_window_s"] / 5)
            for interval in intervals:
                probes[f"{interval:g}"] = _measure(engine, ctx, work, half, interval, probe_s,
                                                   cfg["steady_warmup_s"] / 2, f"p{interval:g}")
        best = min(intervals, key=lambda i: probes[f"{i:g}"]["p99_ms"] or math.inf
                   ) if probes else intervals[0]
        window = _measure(engine, ctx, work, half, best, cfg["steady_window_s"],
                          cfg["steady_warmup_s"], "window")
        peak = max((v for _, v in engine.process.tree.rss_series), default=0.0)
    finally:
        engine.close()
    ms = "/".join(f"{window[k] or 0:,.0f}" for k in ("p50_ms", "p99_ms", "max_ms"))
    print(f"[steady] {engine.name}: max {ramp['max_rate']:,.0f} rec/s; at {half:,.0f} rec/s "
          f"interval {best:g}s p50/p99/max {ms} ms", flush=True)
    return {"ramp": ramp, "half": half, "probes": probes, "window": window,
            "interval": best, "lifetime_peak_rss_mb": peak}


def run(ctx: CaseContext) -> list[Result]:
    """benchmarks.run case: the pack, then Quix Streams, then the cluster scaling run."""
    from benchmarks.cases._steady_engines import PackEngine, QuixEngine
    from benchmarks.cases._steady_feed import feed

    cfg = {**DEFAULTS, **{k: v for k, v in ctx.scale.items() if k in DEFAULTS}}
    work = Path(tempfile.mkdtemp(prefix="steady-", dir=ctx.workdir))
    pack = _engine_run(PackEngine(ctx, work), ctx, work, cfg, None)
    quix = _engine_run(QuixEngine(ctx, work), ctx, work, cfg, pack["half"])
    prefix = f"steady-scale-{time.strftime('%H%M%S')}"
    create_topics(ctx.bootstrap, prefix)
    records = cfg["steady_scale_records"]
    fed = feed(ctx.bootstrap, prefix, None, records / 10_000, 7)
    scale = run_engine("benchmarks.cases._steady_engines", "cluster", ctx,
                       {"work": str(work), "prefix": prefix, "records": fed["records"]}, work)
    return _results(pack, quix, scale, cfg)


def _met(ok: bool, text: str) -> str:
    return f"{'met' if ok else 'missed'}: {text}"


def _results(pack: dict[str, Any], quix: dict[str, Any], scale: dict[str, Any],
             cfg: dict[str, int]) -> list[Result]:
    """The report's rows, each target's row saying met or missed and by how much."""
    base = "Quix Streams 3.28.1"
    pw, qw = pack["window"], quix["window"]
    p_core, q_core = pack["ramp"]["max_rate"] / 2, quix["ramp"]["max_rate"] / 1
    core_ratio = p_core / q_core if q_core else math.inf
    p99_ratio = (qw["p99_ms"] or math.inf) / (pw["p99_ms"] or math.inf)
    rss_ratio = pw["peak_rss_mb"] / qw["peak_rss_mb"] if qw["peak_rss_mb"] else math.inf
    slope = pw["rss_slope_mb_min"]
    how_ramp = (f"fixed-rate steps of {cfg['steady_step_s']} s from an empty backlog after a "
                f"{cfg['steady_warmup_s']} s warm-up (x{RAMP_FACTOR}, then one between the "
                "highest held and the lowest not held); a step holds when the fed rate is >= "
                "90% of it, its last quarter's mean lag exceeds its first quarter's by < "
                f"{LAG_TOLERANCE_S:g} s of input and the final lag is < 10 s of input. 12 "
                f"partitions, the job's generator, trigger {RAMP_INTERVAL:g} s (Quix: commit "
                f"interval {RAMP_INTERVAL:g} s)")
    extra = {"pack_steps": pack["ramp"]["steps"], "quix_steps": quix["ramp"]["steps"],
             "first_not_held": [pack["ramp"]["first_failed"], quix["ramp"]["first_failed"]]}
    lower = [n for n, e in (("pack", pack), ("Quix", quix)) if e["ramp"]["first_failed"] is None]
    bounds = (f"; every step held for {' and '.join(lower)}: a lower bound" if lower else "")
    window = (f"{cfg['steady_window_s']} s after {cfg['steady_warmup_s']} s warm-up at "
              f"{pack['half']:,.0f} rec/s (half the pack's maximum); pack trigger "
              f"{pack['interval']:g} s, Quix commit interval {quix['interval']:g} s (lowest "
              "p99 of the intervals tried)")
    rows = [
        Result("steady", "max sustainable rate", "records/s", pack["ramp"]["max_rate"],
               quix["ramp"]["max_rate"], base, how_ramp, extra=extra),
        Result("steady", "max sustainable rate per core", "records/s/core", p_core, q_core,
               base, _met(core_ratio >= TARGETS["rate_per_core"],
                          f"target >= {TARGETS['rate_per_core']:g}x Quix per core, measured "
                          f"{core_ratio:.2f}x (pack local[2]: 2 cores; Quix: 1){bounds}")),
    ]
    for q in ("p50", "p99", "max"):
        ok = p99_ratio >= TARGETS["p99"]
        how = ("Kafka append timestamp to the commit that made the record visible (pack: the "
               "Delta commit's log timestamp; Quix: end of its sink flush); " + window)
        if q == "p99":
            how = _met(ok, f"target pack p99 <= Quix p99, measured Quix/pack {p99_ratio:.2f}x"
                       ) + "; " + how
        rows.append(Result("steady", f"latency {q}", "ms", pw[f"{q}_ms"] or 0.0,
                           qw[f"{q}_ms"], base, how, higher_is_better=False,
                           extra={"pack_probes": {k: v[f"{q}_ms"] for k, v in
                                                  pack["probes"].items()},
                                  "quix_probes": {k: v[f"{q}_ms"] for k, v in
                                                  quix["probes"].items()},
                                  "uncommitted": [pw["uncommitted"], qw["uncommitted"]],
                                  "caught_up": [pw["caught_up"], qw["caught_up"]]}))
    rows += [
        Result("steady", "CPU per record", "us", pw["cpu_s"] * 1e6 / max(1, pw["records"]),
               qw["cpu_s"] * 1e6 / max(1, qw["records"]), base,
               "CPU seconds of the engine's process tree in the window / records appended in "
               f"it ({pw['cpu_source']}); " + window, higher_is_better=False,
               extra={"pack_us_by_kind": pw["cpu_us_by_kind"],
                      "quix_us_by_kind": qw["cpu_us_by_kind"]}),
        Result("steady", "peak RSS", "MiB", pw["peak_rss_mb"], qw["peak_rss_mb"], base,
               _met(rss_ratio <= TARGETS["peak_rss"],
                    f"target <= {TARGETS['peak_rss']:g}x Quix's, measured {rss_ratio:.2f}x"
                    ) + "; summed RSS of the process tree in the window",
               higher_is_better=False,
               extra={"lifetime_peak": [pack["lifetime_peak_rss_mb"],
                                        quix["lifetime_peak_rss_mb"]]}),
        Result("steady", "final RSS", "MiB", pw["final_rss_mb"], qw["final_rss_mb"], base,
               "the window's last RSS sample", higher_is_better=False),
        Result("steady", "RSS slope", "MiB/min", slope, qw["rss_slope_mb_min"], base,
               _met(slope <= TARGETS["rss_slope"],
                    f"target pack <= {TARGETS['rss_slope']:g} MiB/min, measured {slope:.2f}")
               + "; least squares over the window's last 5 minutes", higher_is_better=False),
    ]
    one, two = scale["1"]["records_per_s"], scale["2"]["records_per_s"]
    rows.append(Result("steady", "cluster: 2 vs 1 executors", "records/s", two, one,
                       "1 executor", "the main job draining one backlog "
                       f"({scale['1']['records']:,} records, 12 partitions, AvailableNow) on a "
                       "standalone cluster of 2 workers x 1 core; informational",
                       extra={"seconds": [scale["1"]["seconds"], scale["2"]["seconds"]]}))
    return rows
