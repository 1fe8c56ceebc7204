"""Pictures of the analyses, drawn with matplotlib (a default dependency, imported lazily).

Each tool builds its pictures as `matplotlib.figure.Figure` objects (no
pyplot, no global figure state) on the Agg canvas; the report saves them.
`NoPlot(reason)` says why a launch has no picture, and `matplotlib_missing()`
why none can be drawn at all; `neutrino report` prints both.
"""

from __future__ import annotations

import numpy as np


class NoPlot(Exception):
    """This result has nothing to draw; the message says why."""


def matplotlib_missing() -> str | None:
    """None when matplotlib can draw, else why not (the import error)."""
    try:
        import matplotlib  # noqa: F401
        from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: F401
    except Exception as e:  # noqa: BLE001 - any failure to import means: no pictures, said once
        return f"matplotlib cannot be imported ({type(e).__name__}: {e}); install it: pip install matplotlib"
    return None


def new_figure(width: float = 10, height: float = 5):
    """A Figure on the Agg canvas (no display, no pyplot state)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=120)
    FigureCanvasAgg(fig)
    return fig


def density_figure(counts: np.ndarray, *, title: str, xlabel: str, ylabel: str, clabel: str,
                   extent: tuple[float, float, float, float], log: bool = True,
                   hlines: list[float] = (), yticks: list[tuple[float, str]] = ()):
    """`counts[x, y]` as a heat map: x to the right, y upwards (`extent` = x0, x1, y0, y1 in axis
    units), empty cells white, a colour bar labelled `clabel` (log scale when `log`)."""
    from matplotlib.colors import LogNorm, Normalize

    counts = np.asarray(counts, dtype=np.float64)
    if counts.size == 0 or not counts.any():
        raise NoPlot("nothing recorded")
    image = np.ma.masked_equal(counts.T, 0)
    fig = new_figure()
    ax = fig.add_subplot()
    top = max(1.0, float(image.max()))
    norm = LogNorm(vmin=1, vmax=top) if log else Normalize(vmin=0, vmax=top)
    shown = ax.imshow(image, origin="lower" if extent[2] < extent[3] else "upper", aspect="auto",
                      interpolation="nearest", cmap="viridis", norm=norm, extent=extent)
    ax.set_facecolor("white")
    for y in hlines:
        ax.axhline(y, color="0.6", linewidth=0.5)
    if yticks:
        ax.set_yticks([p for p, _ in yticks], [label for _, label in yticks], fontsize=7)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    fig.colorbar(shown, ax=ax, label=clabel)
    fig.tight_layout()
    return fig


def save(fig, path: str) -> None:
    fig.savefig(path)
