"""Labelled versions of the pictures, when matplotlib is installed.

The plain PNGs of `png.py` are always written (numpy only, checked pixel by
pixel in the tests); where matplotlib can be imported, a `*_labelled.png` with
axes, ticks, a title and a colour bar is written beside them. matplotlib is
an optional dependency and is imported only when a plot is made.
"""

from __future__ import annotations

import numpy as np


def have_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def labelled_density(path: str, counts: np.ndarray, *, title: str, xlabel: str, ylabel: str,
                     extent: tuple[float, float, float, float] | None = None,
                     hlines: list[float] = (), yticks: list[tuple[float, str]] = (),
                     log: bool = True, clabel: str = "count") -> bool:
    """Write `counts[x, y]` as a labelled heat map; False when matplotlib is missing."""
    if not have_matplotlib() or counts.size == 0:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm

    image = np.ma.masked_equal(np.asarray(counts, dtype=np.float64).T, 0)
    fig, ax = plt.subplots(figsize=(10, 5), dpi=120)
    try:
        norm = LogNorm(vmin=1, vmax=max(1.0, float(image.max()))) if log else None
        shown = ax.imshow(image, origin="lower", aspect="auto", interpolation="nearest",
                          cmap="viridis", norm=norm, extent=extent)
        for y in hlines:
            ax.axhline(y, color="0.6", linewidth=0.5)
        if yticks:
            ax.set_yticks([p for p, _ in yticks], [label for _, label in yticks], fontsize=7)
        ax.set_title(title)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        fig.colorbar(shown, ax=ax, label=clabel)
        fig.tight_layout()
        fig.savefig(path)
    finally:
        plt.close(fig)
    return True
