#!/usr/bin/env python3
"""Draws how cost grows with Applications (issue 39): the in-cluster index
(examples/index_cost CSV) and a fleet's spoke (examples/fleet_cost CSV), one
line per label (before / after). Usage: plot-cost.py INDEX.csv FLEET.csv OUT.png"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def series(path, x, y, scale=1.0):
    """{label: ([x], [y])} from a CSV, skipping empty cells."""
    out = {}
    for r in csv.DictReader(open(path)):
        label = r.get("label") or r.get("version")
        if r.get(y, "") == "":
            continue
        xs, ys = out.setdefault(label, ([], []))
        xs.append(int(r[x]))
        ys.append(float(r[y]) * scale)
    return out


COLORS = {"before": "tab:orange", "after": "tab:blue", "after-scan": "tab:gray", "selector": "tab:green"}
index, fleet, png = sys.argv[1:4]
panels = [
    (index, "apps", "rss_bytes", 1 / 2**20, "in one cluster: RSS (MiB)", False),
    (index, "apps", "change_p50_us", 1, "in one cluster: one Application change, p50 (µs)", True),
    (index, "apps", "decision_p99_us", 1, "in one cluster: decision p99 under churn (µs)", False),
    (fleet, "applications", "rss_kib", 1 / 1024, "spoke: RSS at ready (MiB), 50 deploy here", False),
    (fleet, "applications", "cpu_ms_per_1k_events", 1, "spoke: CPU per 1,000 status events (ms)", False),
    (fleet, "applications", "mb_per_min_at_3min_period", 1, "spoke: watch MB/min at a 3-min status period", False),
]
fig, axes = plt.subplots(2, 3, figsize=(15, 8))
for ax, (path, x, y, scale, title, log) in zip(axes.flat, panels):
    for label, (xs, ys) in sorted(series(path, x, y, scale).items()):
        ax.plot(xs, ys, marker="o", label=label, color=COLORS.get(label))
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("Applications" if path == index else "hub Applications")
    if log:
        ax.set_yscale("log")
    else:
        ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend()
fig.tight_layout()
fig.savefig(png, dpi=90)
