"""Charts of a report (matplotlib, PNG): latency distributions and throughput against the floor.

``python -m bench.chart bench/results/latest.json`` redraws them from a saved report.
"""

from __future__ import annotations

import argparse
import json
import textwrap
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt
from matplotlib.ticker import NullFormatter, ScalarFormatter

from bench.report import MODE_NAMES
from bench.stats import QUANTILES

COLORS = {"a": "#1b9e77", "b": "#7570b3", "c": "#d95f02", "x": "#e6ab02", "l": "#666666",
          "a_no_notify": "#66a61e",
          "a_merged": "#e7298a", "a_notify_after_commit": "#a6761d", "c_again": "#fdae6b",
          "c_patched": "#e31a1c"}


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
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.xaxis.set_minor_formatter(NullFormatter())
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
    fig.suptitle("Throughput: the service against its direct-SQL floor and LangGraph (same run)",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


CPU_PARTS = [("postgres", "PostgreSQL backends", "#1f78b4"),
             ("python", "bench process (client + service in-process)", "#b2df8a"),
             ("server", "maxclaw serve (Python)", "#fb9a99"),
             ("load", "HTTP load process", "#fdbf6f")]


def _cpu_bars(ax: Any, points: list[tuple[str, dict[str, Any]]]) -> None:
    """Stacked CPU ms per round trip for each labelled point."""
    for i, (_label, p) in enumerate(points):
        bottom = 0.0
        cpu = p.get("cpu_ms_per_round_trip") or {}
        for key, name, color in CPU_PARTS:
            value = float(cpu.get(key, 0.0))
            ax.bar(i, value, 0.6, bottom=bottom, color=color,
                   label=name if i == 0 or key not in cpu else None)
            bottom += value
        ax.text(i, bottom, f"{bottom:.1f}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(points)), [textwrap.fill(label, 14) for label, _ in points],
                  fontsize=7)
    ax.set_ylabel("CPU ms per round trip")
    ax.grid(True, axis="y", alpha=0.3)


def cpu_chart(report: dict[str, Any], path: Path) -> Path:
    """Where a round trip's CPU goes, per mode, at 16 clients on the first level."""
    level = report["levels"][0]
    n = max(p["clients"] for p in level["round_trip"])
    points = [(MODE_NAMES.get(p["mode"], p["mode"]), p)
              for p in level["round_trip"] + level.get("variants", []) if p["clients"] == n]
    fig, ax = plt.subplots(figsize=(11, 4.8))
    _cpu_bars(ax, points)
    handles, labels = ax.get_legend_handles_labels()
    seen = dict(zip(labels, handles, strict=True))
    ax.legend(seen.values(), seen.keys(), fontsize=8)
    ax.set_title(f"CPU per round trip by process, {n} clients "
                 f"({report['machine']['nproc']} cores: 2,000 ms of CPU per second)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def live_chart(report: dict[str, Any], path: Path) -> Path:
    """Latency CDFs of answer → frame (with and without NOTIFY) and answer → claim."""
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for key, label, color in (("frames", "answer → frame (NOTIFY hint)", "#d95f02"),
                              ("frames_poll_only", "answer → frame (no NOTIFY, 50 ms poll)",
                               "#7570b3"),
                              ("claim", "answer → claim (long poll)", "#1b9e77")):
        item = report.get(key) or {}
        if item.get("latency"):
            extra = f", {item['clients']:,} sockets" if "clients" in item else ""
            _cdf(ax, item["latency"], label + extra, color)
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_formatter(NullFormatter())
    for x, style in ((10, ":"), (50, "--")):
        ax.axvline(x, color="grey", lw=0.8, ls=style)
    ax.set_xlabel("ms from the answer's HTTP response")
    ax.set_ylabel("percentile")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title("Answer → frame and answer → claim (targets: 10 ms p50, 50 ms p99)",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def compare_chart(before: dict[str, Any], after: dict[str, Any], path: Path) -> Path:
    """Before/after a change: CPU per round trip per mode at 16 clients, and throughput."""
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    points = []
    for tag, report in (("before", before), ("after", after)):
        level = report["levels"][0]
        n = max(p["clients"] for p in level["round_trip"])
        for p in level["round_trip"]:
            if p["clients"] == n:
                points.append((f"{p['mode']} {tag}", p))
    _cpu_bars(axes[0], points)
    handles, labels = axes[0].get_legend_handles_labels()
    seen = dict(zip(labels, handles, strict=True))
    axes[0].legend(seen.values(), seen.keys(), fontsize=7)
    axes[0].set_title("CPU per round trip, 16 clients (a floor, b service, c HTTP)",
                      fontsize=10)
    ax = axes[1]
    clients = sorted({p["clients"] for p in before["levels"][0]["round_trip"]})
    width = 0.13
    k = 0
    for tag, report, hatch in (("before", before, "//"), ("after", after, "")):
        for mode in ("a", "b", "c"):
            ys = [next((p["rate_per_s"] for p in report["levels"][0]["round_trip"]
                        if p["mode"] == mode and p["clients"] == n), 0) for n in clients]
            ax.bar([j + k * width for j in range(len(clients))], ys, width, color=COLORS[mode],
                   hatch=hatch, edgecolor="white", label=f"{mode} {tag}")
            k += 1
    ax.set_xticks([j + width * 2.5 for j in range(len(clients))],
                  [f"{n} client{'s' if n > 1 else ''}" for n in clients])
    ax.set_ylabel("round trips / s")
    ax.legend(fontsize=7, ncol=2)
    ax.grid(True, axis="y", alpha=0.3)
    ax.set_title("Throughput (separate runs: compare within a run first)", fontsize=10)
    fig.suptitle(f"Before / after: {before.get('label', '')} → {after.get('label', '')}",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def draw(report: dict[str, Any], directory: Path, prefix: str = "bench-") -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = [latency_chart(report, directory / f"{prefix}latency.png"),
             throughput_chart(report, directory / f"{prefix}throughput.png"),
             cpu_chart(report, directory / f"{prefix}cpu.png")]
    if report.get("frames", {}).get("latency") or report.get("claim", {}).get("latency"):
        paths.append(live_chart(report, directory / f"{prefix}live.png"))
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.chart")
    parser.add_argument("report", type=Path, nargs="?",
                        default=Path("bench/results/latest.json"))
    parser.add_argument("--compare", type=Path, metavar="BEFORE_JSON",
                        help="also draw docs/img/bench-before-after.png against this report")
    parser.add_argument("--out", type=Path, default=Path("docs/img"))
    args = parser.parse_args()
    report = json.loads(args.report.read_text())
    for p in draw(report, args.out):
        print(p)
    if args.compare:
        before = json.loads(args.compare.read_text())
        print(compare_chart(before, report, args.out / "bench-before-after.png"))


if __name__ == "__main__":
    main()
