"""Writes the benchmark report: Markdown for people, JSON for tools, PNG charts of the ratios."""

from __future__ import annotations

import json
import platform
from pathlib import Path
from typing import Any


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def write_report(out: Path, results: list[dict[str, Any]], meta: dict[str, Any]) -> Path:
    """Write report.json, report.md and ratios.png into ``out``; return the Markdown path."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps({"meta": meta, "results": results}, indent=2))
    lines = [
        "# orderedstream benchmarks",
        "",
        f"Run {meta['started']} on {platform.node()} ({meta['cpus']} cores, "
        f"{meta['memory_gib']:.0f} GiB), size `{meta['size']}`, {meta['seconds']:.0f}s in all.",
        "Each case ran in its own process against the same local Kafka / S3 (SeaweedFS) "
        "services; ours and Spark's figures in a row come from the same run. Ratio > 1 means "
        "this pack is better (higher throughput or lower cost). Absolute times on a shared "
        "2-core machine are noisy: read the ratios.",
        "",
        "| case | metric | ours | baseline value | baseline | ratio | how measured |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['case']} | {r['metric']} ({r['unit']}) | {_fmt(r['ours'])} | "
            f"{_fmt(r['baseline'])} | {r['baseline_name'] or '-'} | {_fmt(r['ratio'])} | "
            f"{r['how']} |")
    failures = meta.get("failures") or {}
    if failures:
        lines += ["", "## Cases that failed", ""]
        lines += [f"- `{name}`: {why}" for name, why in failures.items()]
    extras = [r for r in results if r.get("extra")]
    if extras:
        lines += ["", "## Details", ""]
        for r in extras:
            lines.append(f"- {r['case']} / {r['metric']}: "
                         + ", ".join(f"{k}={v}" for k, v in r["extra"].items()))
    chart = _chart(out, results)
    if chart:
        lines += ["", f"![ratios]({chart.name})"]
    scaling = _scaling_chart(out, results)
    if scaling:
        lines += ["", "## Scaling", "",
                  "Throughput per component against Kafka (= state) partitions in local[2] and "
                  "against executors on the standalone cluster; ratios in the table are "
                  "speedups over the component's first point.", "",
                  f"![scaling]({scaling.name})"]
    md = out / "report.md"
    md.write_text("\n".join(lines) + "\n")
    return md


def _is_scaling(result: dict[str, Any]) -> bool:
    """Scaling rows compare a point with the same component's first point, not with Spark."""
    return bool((result.get("extra") or {}).get("scaling"))


def _chart(out: Path, results: list[dict[str, Any]]) -> Path | None:
    rows = [r for r in results if r.get("ratio") and not _is_scaling(r)]
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{r['case']}: {r['metric']} (vs {r['baseline_name']})"[:90] for r in rows]
    ratios = [r["ratio"] for r in rows]
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(rows) + 1.2))
    colors = ["#2a9d8f" if x >= 1 else "#e76f51" for x in ratios]
    ax.barh(labels, ratios, color=colors)
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_xscale("log")
    ax.set_xlabel("ratio vs the row's baseline, log scale (>1: this pack better)")
    ax.invert_yaxis()
    for y, value in enumerate(ratios):
        ax.text(value, y, f" {value:.2f}x", va="center")
    fig.tight_layout()
    path = out / "ratios.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _scaling_chart(out: Path, results: list[dict[str, Any]]) -> Path | None:
    """scaling.png: records/s vs partitions (local) and vs executors (cluster), per component."""
    rows = [r for r in results if _is_scaling(r)]
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (by_parts, by_execs) = plt.subplots(1, 2, figsize=(11, 4))
    components = list(dict.fromkeys(r["extra"]["component"] for r in rows))
    for component in components:
        local = sorted((r["extra"]["partitions"], r["ours"]) for r in rows
                       if r["extra"]["component"] == component and not r["extra"]["executors"])
        cluster = sorted((r["extra"]["executors"], r["ours"]) for r in rows
                         if r["extra"]["component"] == component and r["extra"]["executors"])
        if local:
            by_parts.plot([p for p, _ in local], [v for _, v in local], marker="o",
                          label=component)
        if cluster:
            by_execs.plot([e for e, _ in cluster], [v for _, v in cluster], marker="o",
                          label=component)
    by_parts.set_xscale("log", base=2)
    parts = sorted({r["extra"]["partitions"] for r in rows if not r["extra"]["executors"]})
    if parts:
        by_parts.set_xticks(parts, [str(p) for p in parts])
    by_parts.set_xlabel("Kafka (= state) partitions, local[2]")
    by_execs.set_xlabel("executors (1 core each), standalone cluster")
    for ax in (by_parts, by_execs):
        ax.set_yscale("log")
        ax.set_ylabel("records (keys) / s")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    by_execs.set_xticks(sorted({r["extra"]["executors"] for r in rows
                                if r["extra"]["executors"]}) or [1])
    fig.tight_layout()
    path = out / "scaling.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
