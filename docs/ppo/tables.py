"""Markdown tables of the PPO measurement (docs/ppo.md) from a sweep's rows.jsonl.

Usage: python docs/ppo/tables.py runs/ppo_eval/rows.jsonl > docs/ppo/tables.md
"""

from __future__ import annotations

import json
import math
import sys
from collections import defaultdict

PAYLOADS = ["none", "light", "heavy", "extra"]
WINDS = ["calm", "breezy", "windy"]
TRAJECTORIES = ["hover", "helix", "figure8"]


def _fmt(rows: list[dict]) -> str:
    crashed = [r for r in rows if r["diverged"]]
    if crashed:
        return "crash (" + ", ".join(sorted({str(r["termination"]) for r in crashed})) + ")"
    return f"{sum(r['rmse'] for r in rows) / len(rows):.3f}"


def main(path: str) -> str:
    rows = [json.loads(line) for line in open(path) if line.strip()]
    by = defaultdict(list)
    for r in rows:
        by[(r["controller"], r["payload"], r["wind"], r["trajectory"])].append(r)
    controllers = sorted({r["controller"] for r in rows}, key=lambda c: (c != "ppo", c))
    out = []
    n = sum(1 for r in rows if r["controller"] == "ppo")
    crashes = [r for r in rows if r["controller"] == "ppo" and r["diverged"]]
    out.append(f"PPO: {len(crashes)} crash(es) in {n} flights.\n")
    out.append("Position RMSE after 3 s (m) of `ppo`, seed 0, per payload × (trajectory, wind):\n")
    head = [f"{t} {w}" for t in TRAJECTORIES for w in WINDS]
    out.append("| payload | " + " | ".join(head) + " |")
    out.append("|---|" + "---:|" * len(head))
    for p in PAYLOADS:
        cells = [_fmt(by[("ppo", p, w, t)]) for t in TRAJECTORIES for w in WINDS]
        out.append(f"| {p}{' (held out)' if p == 'extra' else ''} | " + " | ".join(cells) + " |")
    out.append("")
    out.append(
        "Head to head, mean RMSE over the three winds (m; `crash` if any of them crashed):\n"
    )
    out.append("| payload | trajectory | " + " | ".join(f"`{c}`" for c in controllers) + " |")
    out.append("|---|---|" + "---:|" * len(controllers))
    for p in PAYLOADS:
        for t in TRAJECTORIES:
            cells = [_fmt([r for w in WINDS for r in by[(c, p, w, t)]]) for c in controllers]
            out.append(f"| {p} | {t} | " + " | ".join(cells) + " |")
    out.append("")
    means = []
    for c in controllers:
        ok = [r["rmse"] for r in rows if r["controller"] == c and not r["diverged"]]
        ok = [x for x in ok if x is not None and math.isfinite(x)]
        means.append(f"`{c}` {sum(ok) / max(len(ok), 1):.3f} m over {len(ok)} flights")
    out.append("Mean over all non-crashed flights: " + "; ".join(means) + ".")
    return "\n".join(out)


if __name__ == "__main__":
    print(main(sys.argv[1]))
