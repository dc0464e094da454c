#!/usr/bin/env python3
"""Draws a soak run (samples.csv from tests/soak.rs): RSS, decision p99 and
CPU over time, with the churn windows shaded. Usage: plot-soak.py DIR"""
import csv
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

out = sys.argv[1]
rows = list(csv.DictReader(open(f"{out}/samples.csv")))
summary = json.load(open(f"{out}/summary.json"))
t = [float(r["seconds"]) / 60 for r in rows]
series = [
    ("RSS (MiB)", [int(r["rss_kib"]) / 1024 for r in rows]),
    ("decision p99 (ms, per 5 s)", [int(r["p99_micros"]) / 1000 for r in rows]),
    ("CPU (% of one core)", [float(r["cpu_percent"]) for r in rows]),
    ("file descriptors / tokio tasks", None),
]
fig, axes = plt.subplots(len(series), 1, figsize=(10, 10), sharex=True)
step = (t[1] - t[0]) if len(t) > 1 else 0
for ax, (label, values) in zip(axes, series):
    for i, r in enumerate(rows):
        if r["churn"] == "1":
            ax.axvspan(t[i] - step, t[i], color="tab:orange", alpha=0.15, lw=0)
    if values is None:
        ax.plot(t, [int(r["fds"]) for r in rows], label="fds")
        ax.plot(t, [int(r["tasks"]) for r in rows], label="tokio tasks")
        ax.plot(t, [int(r["threads"]) for r in rows], label="threads")
        ax.legend(loc="upper right")
    else:
        ax.plot(t, values, color="tab:blue")
    ax.axvline(summary["warmUpSeconds"] / 60, color="grey", ls="--", lw=1)
    ax.set_ylabel(label)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
axes[-1].set_xlabel("minutes (shaded: 2,000 Applications' status churning; dashed: end of warm-up)")
d = summary["decisionMicros"]
fig.suptitle(
    f"driftguard soak, {summary['seconds'] // 60} min behind kube-apiserver, "
    f"{summary['applications']} Applications × {summary['rules'] // summary['applications']} rules\n"
    f"RSS {summary['rssKiB']['afterWarmUp'] / 1024:.0f} → {summary['rssKiB']['end'] / 1024:.0f} MiB; "
    f"p99 {d['quiet']['p99'] / 1000:.2f} ms quiet, {d['churn']['p99'] / 1000:.2f} ms churning; "
    f"{sum(summary['outcomes'].values())} writes, {summary['failures']} failed"
)
fig.tight_layout()
fig.savefig(f"{out}/soak.png", dpi=90)
print(f"{out}/soak.png")
