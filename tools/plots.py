"""Headless matplotlib for the pictures in img/ (bench, profiles): one way to open and save a figure."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["new_figure", "save_figure"]


def new_figure(width: float = 9, height: float = 4) -> tuple["Figure", "Axes"]:
    """A figure and its axes, drawn without a display (imported late: only the plotting programs need it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(width, height))


def save_figure(figure: "Figure", axes: "Axes", path: Path) -> None:
    """Grid, tight layout, write the PNG (creating its folder) and free the figure."""
    import matplotlib.pyplot as plt

    axes.grid(alpha=0.3)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
