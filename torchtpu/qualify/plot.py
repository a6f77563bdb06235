"""`--plot PATH`: the loss curves of the three modes on one chart (PNG)."""


class PlotUnavailable(Exception):
    pass


def loss_curves(report, path):
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only, no display needed
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise PlotUnavailable(
            "--plot needs matplotlib, which is not installed: pip install matplotlib"
        ) from e
    from .report import MODE_TITLES

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=100)
    styles = {"cpu": ("-", "o"), "eager": ("--", "s"), "compiled": (":", "^")}
    for name, mode in report["modes"].items():
        losses = mode.get("losses") or []
        if losses:
            line, marker = styles.get(name, ("-", None))
            ax.plot(range(len(losses)), losses, line, marker=marker, markersize=4,
                    label=f"{MODE_TITLES[name]}: {mode['status']}")
    q = report["qualify"]
    ax.set_title(f"torchtpu qualify: {q['model']} ({report['result']})")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
