"""Charts of a report (matplotlib, PNG): latency distributions and throughput against the floor.

``python -m bench.chart bench/results/latest.json`` redraws them from a saved report.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt

from bench.report import MODE_NAMES
from bench.stats import QUANTILES

COLORS = {"a": "#1b9e77", "b": "#7570b3", "c": "#d95f02", "a_no_notify": "#66a61e",
          "a_merged": "#e7298a"}


def _cdf(ax: Any, summary: dict[str, Any], label: str, color: str, style: str = "-") -> None:
    qs = summary.get("quantiles_ms")
    if not qs:
        return
    ax.plot(qs, [q * 100 for q in QUANTILES], style, color=color, label=label, lw=1.6)


def latency_chart(report: dict[str, Any], path: Path) -> Path:
    """One panel per concurrency: the round trip's latency CDF for each mode, first level."""
    level = report["levels"][0]
    clients = sorted({p["clients"] for p in level["round_trip"]})
    fig, axes = plt.subplots(1, len(clients), figsize=(5 * len(clients), 4.2), sharey=True)
    axes = axes if len(clients) > 1 else [axes]
    for ax, n in zip(axes, clients, strict=True):
        for p in level["round_trip"] + level.get("variants", []):
            if p["clients"] == n:
                _cdf(ax, p["latency"], MODE_NAMES.get(p["mode"], p["mode"]),
                     COLORS.get(p["mode"], "grey"))
        ax.set_xscale("log")
        ax.set_title(f"{n} client{'s' if n > 1 else ''}")
        ax.set_xlabel("round trip (post + answer), ms")
        ax.grid(True, which="both", alpha=0.3)
        ax.axhline(50, color="grey", lw=0.6, ls=":")
        ax.axhline(99, color="grey", lw=0.6, ls=":")
    axes[0].set_ylabel("percentile")
    axes[-1].legend(loc="lower right", fontsize=8)
    fig.suptitle(f"Round-trip latency distribution, {level['cards']:,} cards in the database "
                 f"({report['plan']['name']} run, {report['finished_at']})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def throughput_chart(report: dict[str, Any], path: Path) -> Path:
    """Round trips/s per mode and concurrency at each data level, with the targets' lines."""
    levels = report["levels"]
    fig, axes = plt.subplots(1, len(levels), figsize=(6 * len(levels), 4.2))
    axes = axes if len(levels) > 1 else [axes]
    for ax, level in zip(axes, levels, strict=True):
        points = level["round_trip"] + level.get("variants", [])
        clients = sorted({p["clients"] for p in points})
        modes = [m for m in COLORS if any(p["mode"] == m for p in points)]
        width = 0.8 / max(len(modes), 1)
        for i, mode in enumerate(modes):
            xs, ys = [], []
            for j, n in enumerate(clients):
                for p in points:
                    if p["mode"] == mode and p["clients"] == n:
                        xs.append(j + i * width)
                        ys.append(p["rate_per_s"])
            ax.bar(xs, ys, width, label=MODE_NAMES.get(mode, mode), color=COLORS[mode])
        ax.set_xticks([j + width * (len(modes) - 1) / 2 for j in range(len(clients))],
                      [f"{n} client{'s' if n > 1 else ''}" for n in clients])
        ax.set_ylabel("round trips / s")
        ax.set_title(f"{level['cards']:,} cards in the database", fontsize=10)
        ax.grid(True, axis="y", alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("Throughput: the service against its direct-SQL floor (same run)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def draw(report: dict[str, Any], directory: Path, prefix: str = "bench-") -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = [latency_chart(report, directory / f"{prefix}latency.png"),
             throughput_chart(report, directory / f"{prefix}throughput.png")]
    return paths


if __name__ == "__main__":
    source = Path(sys.argv[1] if len(sys.argv) > 1 else "bench/results/latest.json")
    for p in draw(json.loads(source.read_text()), Path("docs/img")):
        print(p)
