"""The memory evaluation as a picture: recall and perplexity against the ring's budget, one
line per policy, the full cache as a dashed ceiling (`channel eval memory --plot FILE.png`).

matplotlib is the `plot` extra (pip install 'channel[plot]'); it is imported only here, so the
evaluation itself never needs it.
"""

from __future__ import annotations

from pathlib import Path

from ..fileio import atomic_output

PANELS = (("answer_logprob", "answer log-probability (per token)"),
          ("recall_exact", "exact recall"),
          ("ppl", "perplexity (natural text)"))


def plot_memory(result: dict, path: Path) -> None:
    """Write `result` (evaluate_memory's JSON shape) as a PNG at `path`, atomically."""
    import matplotlib  # noqa: PLC0415 - optional (the caller checked it is there)

    matplotlib.use("Agg")  # no display: files only
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, axes = plt.subplots(1, len(PANELS), figsize=(13, 4), constrained_layout=True)
    try:
        for ax, (key, label) in zip(axes, PANELS):
            for name, budgets in result["policies"].items():
                xs = sorted(budgets, key=float)
                style = "-" if name == result["default"] else "--"
                ax.plot([float(b) * 100 for b in xs], [budgets[b][key] for b in xs],
                        marker="o", linestyle=style,
                        label=f"{name} (default)" if name == result["default"] else name)
            ax.axhline(result["full"][key], color="black", linestyle=":", label="full cache")
            ax.set_xlabel("ring budget (% of the conversation)")
            ax.set_title(label)
            ax.grid(alpha=0.3)
        axes[0].legend(fontsize="small")
        fig.suptitle("What the ring remembers: channel eval memory")
        with atomic_output(path) as f:
            fig.savefig(f, format="png", dpi=110)
    finally:
        plt.close(fig)
