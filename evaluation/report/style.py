"""How a controller looks in every figure of the report: one colour per controller, a tuned
variant (``<label>_tuned``, as ``rquad tune`` names it) in a darker shade of its default's
colour, dashed as a line and hatched as a bar, listed right after its default; legends placed
outside the axes, so no series, bar or title hides under one; and the axes helpers that keep
labels apart (horizontal bars with their labels on the y axis, log axes labelled 1, 2, 5 × 10^k,
the diverged-run marks in a strip of their own); a line hidden under another that flies alike is
named in the legend.

A matrix with ``pid``/``pid_tuned``, ``geo_rls``/``geo_rls_tuned`` and
``geo_rls_dob``/``geo_rls_dob_tuned`` thus draws three colour families, each a solid default
and a dashed tuned line.
"""

from __future__ import annotations

import math
import textwrap
import zlib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np

matplotlib.use("Agg")
from matplotlib.colors import to_hex, to_rgb  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.legend import Legend  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: E402

COLORS = {
    "pid": "#7f7f7f",
    "geo": "#1f77b4",
    "geo_res": "#2ca02c",
    "geo_rls": "#d62728",
    "geo_rls_dob": "#e7298a",
    "hnewton": "#9467bd",
    "hnewton_rls": "#8c564b",
    "ppo": "#ff7f0e",
    "ppo_res": "#ffbb78",
    "ppo_acc": "#bf5b17",
    "ppo_adapt": "#17becf",
}

#: colours of user labels (not in :data:`COLORS`), picked by a stable hash of the label
USER_COLORS = ("#bcbd22", "#e377c2", "#393b79", "#637939", "#843c39", "#7b4173", "#6b6ecf")

#: the suffix ``rquad tune`` gives a tuned controller's label
TUNED_SUFFIX = "_tuned"
#: share of black mixed into a tuned variant's colour (same hue, darker)
TUNED_SHADE = 0.35
#: a tuned variant's line style and bar hatching; the default's are solid and plain
TUNED_LINESTYLE = "--"
TUNED_HATCH = "///"
#: opacity of a band (the spread over an RL policy's training seeds)
BAND_ALPHA = 0.18
#: two lines closer than this at every point (pixels) are one over the other: the legend says
#: which one hides which (``geo`` and ``hnewton`` fly alike where no limit is active)
COINCIDE_PX = 1.5
#: font size of the legends (points)
LEGEND_FONTSIZE = 8
#: characters per line of the notes a legend carries as its title (how the series are drawn)
LEGEND_NOTE_WIDTH = 40


def default_of(label: str) -> str:
    """The default controller of a tuned label (``geo_rls_tuned`` → ``geo_rls``); any other
    label is its own default."""
    if is_tuned(label):
        return label[: -len(TUNED_SUFFIX)]
    return label


def is_tuned(label: str) -> bool:
    """Whether ``label`` names a tuned variant (ends in :data:`TUNED_SUFFIX`, after a name)."""
    return label.endswith(TUNED_SUFFIX) and len(label) > len(TUNED_SUFFIX)


def _base_color(label: str) -> str:
    if label in COLORS:
        return COLORS[label]
    return USER_COLORS[zlib.crc32(str(label).encode("utf-8")) % len(USER_COLORS)]


def color_of(label: str) -> str:
    """The colour of a controller label: the built-ins' own, else a stable one from
    :data:`USER_COLORS` (the same label gets the same colour in every figure and run); a tuned
    variant gets its default's colour darkened by :data:`TUNED_SHADE`."""
    base = _base_color(default_of(label))
    if not is_tuned(label):
        return base
    return to_hex(tuple((1.0 - TUNED_SHADE) * c for c in to_rgb(base)))


def linestyle_of(label: str) -> str:
    """Solid for a default controller, :data:`TUNED_LINESTYLE` for a tuned variant."""
    return TUNED_LINESTYLE if is_tuned(label) else "-"


def hatch_of(label: str) -> str | None:
    """No hatching for a default controller, :data:`TUNED_HATCH` for a tuned variant."""
    return TUNED_HATCH if is_tuned(label) else None


def paired_order(labels: Iterable[str]) -> list[str]:
    """``labels`` in their order, each tuned variant moved right after its default (when that
    is among them), so a legend lists ``pid, pid_tuned, geo_rls, geo_rls_tuned, …``."""
    labels = list(dict.fromkeys(labels))
    present = set(labels)
    out: list[str] = []
    for label in labels:
        if is_tuned(label) and default_of(label) in present:
            continue  # placed after its default
        out.append(label)
        if (tuned := label + TUNED_SUFFIX) in present:
            out.append(tuned)
    return out


def hidden_lines(ax: Any) -> dict[str, str]:
    """The labelled lines of ``ax`` that a later labelled line covers at every point (within
    :data:`COINCIDE_PX` pixels, where both are finite): label → the covering line's label."""
    ax.get_xlim(), ax.get_ylim()  # the limits the transform uses, settled
    lines = [ln for ln in ax.get_lines() if not str(ln.get_label()).startswith("_")]
    points = [
        ax.transData.transform(np.column_stack([ln.get_xdata(), ln.get_ydata()]).astype(float))
        for ln in lines
    ]
    out: dict[str, str] = {}
    for i, (line, p) in enumerate(zip(lines, points, strict=True)):
        for later, q in zip(lines[i + 1 :], points[i + 1 :], strict=True):
            if p.shape != q.shape:
                continue
            both = np.isfinite(p).all(axis=1) & np.isfinite(q).all(axis=1)
            if both.any() and np.abs(p[both] - q[both]).max() < COINCIDE_PX:
                out[str(line.get_label())] = str(later.get_label())
                break
    return out


def hidden_notes(panels: Iterable[tuple[str, Any]]) -> dict[str, str]:
    """Legend suffixes of the lines hidden under others (:func:`hidden_lines`) in named panels
    (``(panel name, axes)`` pairs): ``geo`` → ``" (under hnewton in (c), (d))"``, or
    ``" (under hnewton)"`` when it is hidden in every panel that draws it."""
    where: dict[str, dict[str, list[str]]] = {}
    drawn: dict[str, int] = {}
    for panel, ax in panels:
        for line in ax.get_lines():
            drawn[str(line.get_label())] = drawn.get(str(line.get_label()), 0) + 1
        for label, cover in hidden_lines(ax).items():
            where.setdefault(label, {}).setdefault(cover, []).append(panel)

    def place(label: str, cover: str, names: list[str]) -> str:
        every = len(names) == drawn[label]
        return f"under {cover}" + ("" if every else f" in {', '.join(names)}")

    return {
        label: " (" + "; ".join(place(label, c, p) for c, p in covers.items()) + ")"
        for label, covers in where.items()
    }


def series_handle(label: str, band: bool = False, marker: str | None = None) -> object:
    """A legend handle of a controller's series: its line (colour, style, ``marker``) and, with
    ``band``, the shaded spread behind it."""
    line = Line2D([], [], color=color_of(label), ls=linestyle_of(label), lw=1.5, marker=marker)
    if not band:
        return line
    return (Patch(color=color_of(label), alpha=BAND_ALPHA, lw=0), line)


def tuned_note(labels: Iterable[str], bars: bool = False) -> str | None:
    """The legend note on the tuned variants' style when ``labels`` hold one (``bars``: the
    figure has bars too), else ``None``."""
    if not any(is_tuned(label) for label in labels):
        return None
    return "tuned variant (…_tuned): its default's colour, darker, dashed" + (
        "; bars hatched" if bars else ""
    )


def legend_title(notes: Iterable[str | None]) -> str | None:
    """A legend's title from a figure's notes (how its series are drawn), each wrapped at
    :data:`LEGEND_NOTE_WIDTH` characters, so they sit beside the entries they explain; ``None``
    without notes."""
    return "\n".join(textwrap.fill(n, LEGEND_NOTE_WIDTH) for n in notes if n) or None


def figure_legend(
    fig: Figure,
    handles: Sequence[object],
    labels: Sequence[str],
    loc: str = "outside right upper",
    ncol: int = 1,
    title: str | None = None,
) -> Legend:
    """One legend for the whole figure, outside every axes (``fig`` must use the constrained
    layout, which makes room for it): no legend covers a series, a bar or a title. A tuple
    handle (:func:`series_handle` with a band) draws its parts on top of each other."""
    return fig.legend(
        handles,
        labels,
        loc=loc,
        ncols=ncol,
        fontsize=LEGEND_FONTSIZE,
        title=title,
        title_fontsize=LEGEND_FONTSIZE,
        alignment="left",
        frameon=False,
    )


#: how far a horizontal bar axis extends past the longest bar, for the "k/n div." notes
#: (a factor: linear axis, log axis)
BAR_ROOM = (1.3, 4.0)
#: the mark of diverged runs in a sweep figure, and the height of its row (axes fraction)
CRASH_MARKER, CRASH_STEP = "x", 0.05
#: where a log bar axis starts: this factor below the smallest value (its bar keeps a length)
LOG_BAR_FLOOR = 3.0
#: the labelled ticks of a log axis within each decade (1, 2, 5 × 10^k), on an axis of at most
#: this many decades (a wider one labels the powers of ten only)
LOG_TICKS, LOG_DENSE_DECADES = (1.0, 2.0, 5.0), 2.0


def log_axis(axis: Any) -> None:
    """Label a log ``axis`` in plain numbers (``0.02``, not ``2×10⁻²``) at 1, 2 and 5 × 10^k
    when it spans at most :data:`LOG_DENSE_DECADES` decades, else at the powers of ten only;
    other ticks unlabelled, so labels never run into each other (decided when drawn, on the
    final limits)."""

    def label(v: float, _: int) -> str:
        lo, hi = sorted(axis.get_view_interval())
        dense = lo > 0 and math.log10(hi / lo) <= LOG_DENSE_DECADES
        power = abs(math.log10(v) - round(math.log10(v))) < 1e-9
        return f"{v:g}" if dense or power else ""

    axis.set_major_locator(LogLocator(subs=LOG_TICKS))
    axis.set_major_formatter(FuncFormatter(label))
    axis.set_minor_formatter(NullFormatter())


def crash_marks(ax: Any, marks: dict[int, list[tuple[float, int, str]]]) -> None:
    """Mark the diverged runs of a log-scale sweep axis: per category, one :data:`CRASH_MARKER`
    per series with diverged runs (in its colour, the count beside it), stacked in a strip at
    the bottom that the axis' lower limit keeps free of data (the means leave those runs out).
    ``marks``: category index → ``(x, diverged runs, colour)``."""
    rows = max(len(v) for v in marks.values())
    strip = CRASH_STEP * (rows + 0.5)  # axes fraction
    lo, hi = np.log10(ax.get_ylim())
    ax.set_ylim(bottom=10 ** ((lo - strip * hi) / (1.0 - strip)))
    for entries in marks.values():
        for j, (x, n, color) in enumerate(entries):
            xy = (x, CRASH_STEP * (j + 0.5))
            ax.plot(*xy, marker=CRASH_MARKER, color=color, transform=ax.get_xaxis_transform())
            ax.annotate(
                f"{n}",
                xy,
                xycoords=ax.get_xaxis_transform(),
                xytext=(4, 0),
                textcoords="offset points",
                va="center",
                fontsize=7,
                color=color,
            )


def hbars(
    ax: Any,
    names: list[str],
    stats: dict[str, tuple[float, float, float, int]],
    runs: dict[str, int],
    log: bool,
) -> None:
    """Horizontal bars, one per series (labels on the y axis, read left to right): the mean,
    whiskers over training seeds where they differ, ``k/n div.`` beside a series whose runs
    diverged."""
    for i, n in enumerate(names):
        mean, lo, hi, div = stats[n]
        col = color_of(n)
        ax.barh(i, np.nan_to_num(mean), color=col, hatch=hatch_of(n), hatchcolor="white", ec=col)
        if hi > lo:
            ax.errorbar(mean, i, xerr=[[mean - lo], [hi - mean]], fmt="none", ecolor="k", capsize=3)
        if div:  # beside the bar's end (whisker included), or at the left when none flew
            at = ((hi, i), "data") if math.isfinite(hi) else ((0.01, i), ("axes fraction", "data"))
            ax.annotate(
                f"{div}/{runs[n]} div.",
                at[0],
                xycoords=at[1],
                xytext=(4, 0),
                textcoords="offset points",
                va="center",
                fontsize=7,
            )
    finite = [v for n in names for v in stats[n][:3] if math.isfinite(v) and v > 0]
    if log:
        ax.set_xscale("log")
        log_axis(ax.xaxis)
    if finite and log:  # a bar on a log axis starts at its left edge: the smallest one shows
        ax.set_xlim(left=min(finite) / LOG_BAR_FLOOR)
    if finite and any(stats[n][3] for n in names):
        ax.set_xlim(right=max(finite) * BAR_ROOM[1 if log else 0])
    ax.set_yticks(range(len(names)), names, fontsize=8)
    ax.set_ylim(len(names) - 0.5, -0.5)  # the first series on top


def save_figure(fig: Any, path: Path, dpi: int = 110) -> Path:
    """Write ``fig`` to ``path`` (PNG at ``dpi``), close it and return the path."""
    import matplotlib.pyplot as plt

    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path
