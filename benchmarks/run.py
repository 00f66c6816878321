"""Run every benchmark case against one set of local services and write the report.

Usage: ``scripts/bench [--size tiny|default|large] [--only source,sink] [--out DIR]``.
``tiny`` keeps the harness working in CI-sized runs; ``default`` finishes in under 30 minutes
on a 2-core machine; sizes scale every case's record and key counts.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import pkgutil
import subprocess
import sys
import time
from pathlib import Path

import psutil

from benchmarks.common import CaseContext, Result, peak_rss_mb, write_results
from benchmarks.report import write_report

SIZES: dict[str, dict[str, int]] = {
    "tiny": {"records": 20_000, "partitions": 4, "keys": 20_000, "rows": 20_000,
             "e2e_records": 3_000, "e2e_batches": 3, "yahoo_events": 20_000,
             "yahoo_batches": 3, "scale_records": 4_000, "scale_points": 2,
             "steady_window_s": 30, "steady_warmup_s": 10, "steady_step_s": 15,
             "steady_ramp_steps": 3, "steady_ramp_start": 1000, "steady_intervals": 1,
             "steady_scale_records": 2_000},
    "default": {"records": 2_000_000, "partitions": 8, "keys": 1_000_000, "rows": 2_000_000,
                "e2e_records": 100_000, "e2e_batches": 8, "ordered_records": 1_000_000,
                "yahoo_events": 500_000, "yahoo_batches": 8, "scale_records": 200_000,
                "scale_points": 4},
    "large": {"records": 10_000_000, "partitions": 8, "keys": 10_000_000, "rows": 10_000_000,
              "e2e_records": 1_000_000, "e2e_batches": 20, "yahoo_events": 5_000_000,
              "yahoo_batches": 20, "scale_records": 1_000_000, "scale_points": 4},
}


def available_cases() -> list[str]:
    import benchmarks.cases as cases

    return sorted(m.name for m in pkgutil.iter_modules(cases.__path__)
                  if not m.name.startswith("_"))


def run_case_in_process(name: str, ctx: CaseContext, out: Path) -> tuple[list[dict], str | None]:
    """Run one case in a fresh interpreter; return its results and an error, if any."""
    result_file = out / f"{name}.json"
    log_file = out / f"{name}.log"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    with open(log_file, "w") as log:
        proc = subprocess.run([sys.executable, "-m", "benchmarks.run", "--case", name],
                              input=ctx.to_json(), text=True, stdout=log, stderr=subprocess.STDOUT,
                              env=env, check=False, cwd=Path(__file__).resolve().parent.parent)
    if proc.returncode != 0 or not result_file.exists():
        tail = "\n".join(log_file.read_text(errors="replace").splitlines()[-5:])
        return [], f"exit {proc.returncode}; see {log_file}: {tail}"
    return json.loads(result_file.read_text()), None


def _case_main(name: str) -> int:
    ctx = CaseContext.from_json(sys.stdin.read())
    module = importlib.import_module(f"benchmarks.cases.{name}")
    results: list[Result] = module.run(ctx)
    for r in results:
        r.extra.setdefault("case_process_peak_rss_mb", round(peak_rss_mb(), 1))
    write_results(Path(ctx.workdir) / f"{name}.json", results)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", choices=sorted(SIZES), default="default")
    parser.add_argument("--only", help="comma-separated case names (default: all)")
    parser.add_argument("--out", type=Path, help="report directory")
    parser.add_argument("--session", choices=("embedded", "plain", "both"), default=None,
                        help="peer case: the main job in the embedded session (default), in "
                             "the plain session of 'orderedstream run --master local[2]' "
                             "(process tuning off), or both in one report")
    parser.add_argument("--minutes", type=float, default=None,
                        help="steady case: the measured window per engine, in minutes "
                             "(default: the size's, 10 at default)")
    parser.add_argument("--warmup", type=float, default=None,
                        help="steady case: seconds of input before the window (default: the "
                             "size's, 30 at default)")
    parser.add_argument("--ramp-steps", type=int, default=None,
                        help="steady case: at most this many fixed-rate steps looking for the "
                             "maximum rate (default: the size's, 7 at default)")
    parser.add_argument("--step-seconds", type=float, default=None,
                        help="steady case: seconds of each ramp step (default: the size's, "
                             "60 at default)")
    parser.add_argument("--ramp-start", type=float, default=None,
                        help="steady case: records/s of the first ramp step (default: the "
                             "size's, 2000 at default)")
    parser.add_argument("--case", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.case:
        return _case_main(args.case)
    scale = dict(SIZES[args.size])
    for option, key, factor in (("minutes", "steady_window_s", 60), ("warmup",
                                "steady_warmup_s", 1), ("ramp_steps", "steady_ramp_steps", 1),
                                ("step_seconds", "steady_step_s", 1),
                                ("ramp_start", "steady_ramp_start", 1)):
        if getattr(args, option) is not None:
            scale[key] = max(1, round(getattr(args, option) * factor))
    if args.session:  # the case processes inherit it (benchmarks.cases.peer.SESSION_ENV)
        os.environ["BENCH_SESSION"] = args.session

    from orderedstream.dev.services.embedded import embedded_services

    names = available_cases()
    if args.only:
        wanted = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = sorted(set(wanted) - set(names))
        if unknown:
            parser.error(f"unknown case(s) {unknown}; available: {', '.join(names)}")
        names = wanted
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = (args.out or Path(__file__).resolve().parent / "reports" / stamp).resolve()
    out.mkdir(parents=True, exist_ok=True)
    # The report's files sit at the top of ``out``; its folders are scratch (the services'
    # data, each case's work), never to be committed with a report kept in the repository.
    ignore = out / ".gitignore"
    if not ignore.exists():
        ignore.write_text("# scratch of scripts/bench: services, case work folders\n*/\n")
    began = time.monotonic()
    results: list[dict] = []
    failures: dict[str, str] = {}
    figures: dict[str, int] = {}  # per case module, in the report's meta
    with embedded_services(workdir=out / "services") as endpoints:
        for name in names:
            print(f"[bench] {name} ...", flush=True)
            ctx = CaseContext(endpoints.bootstrap, endpoints.s3_endpoint or "",
                              endpoints.storage_options, "lake", str(out), args.size,
                              scale)
            started = time.monotonic()
            case_results, error = run_case_in_process(name, ctx, out)
            results += case_results
            figures[name] = len(case_results)
            if error:
                failures[name] = error
            print(f"[bench] {name}: {len(case_results)} figures in "
                  f"{time.monotonic() - started:.0f}s{' FAILED ' + error if error else ''}",
                  flush=True)
    meta = {"started": stamp, "size": args.size, "scale": scale,
            "seconds": time.monotonic() - began, "cpus": os.cpu_count(),
            "memory_gib": psutil.virtual_memory().total / 2**30,
            "cases": names, "figures": figures, "failures": failures}
    md = write_report(out, results, meta)
    print(f"[bench] report: {md}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
