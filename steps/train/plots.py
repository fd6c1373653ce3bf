"""The training curve a person looks at: `loss.csv` and `loss.png` from the loop's step log."""

from __future__ import annotations

from pathlib import Path


def save_curve(log: list[dict], out: Path) -> None:
    (out / "loss.csv").write_text(
        "step,loss,lr,seconds\n"
        + "".join(f"{r['step']},{r['loss']:.6f},{r['lr']:.3e},{r['seconds']:.2f}\n" for r in log)
    )
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot([r["step"] for r in log], [r["loss"] for r in log], marker="o", markersize=3)
    ax.set_xlabel("optimiser step")
    ax.set_ylabel("training loss (summary tokens)")
    ax.set_title("LoRA distillation loss")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "loss.png", dpi=100)
    plt.close(fig)
