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
    md = out / "report.md"
    md.write_text("\n".join(lines) + "\n")
    return md


def _chart(out: Path, results: list[dict[str, Any]]) -> Path | None:
    rows = [r for r in results if r.get("ratio")]
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
