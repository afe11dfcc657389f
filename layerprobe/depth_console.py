"""The `layerprobe depth` summary on stdout (kept beside console.py, whose shared consoles it uses)."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from layerprobe.console import err, out


def print_depth_summary(result: Any) -> None:
    """A DepthResult: the placement line, then per block its label, RMS, relative updates and gradient norm."""
    summary = result.to_dict()["summary"]
    out.print(
        f"[bold]{result.model.id}[/]: {result.placement.summary} "
        f"(over {result.data['positions_averaged']:,} positions)",
        highlight=False,
    )
    table = Table()
    for name in ("block l", "placement", "RMS x^l", "‖Δx‖/‖x‖"):
        table.add_column(name, justify="right" if name != "placement" else "left")
    subs = result.sublayers
    if subs:
        table.add_column("attention", justify="right")
        table.add_column("MLP", justify="right")
    if result.grad is not None:
        table.add_column("‖∇θ_l‖", justify="right")
    for l in range(result.num_layers):
        row = [str(l), result.placement.blocks[l].label, f"{result.rms.mean[l]:.4g}", f"{result.update.mean[l]:.4f}"]
        if subs:
            row += [f"{subs[k]['relative'].mean[l]:.4f}" for k in ("attention", "mlp")]
        if result.grad is not None:
            row.append(f"{result.grad.block[l]:.3g}")
        table.add_row(*row)
    out.print(table)
    growth = summary["rms_growth"]
    growth_text = f"{growth:.3g}×" if growth is not None else "n/a"
    line = f"residual RMS x^{result.num_layers} / x^0 = {growth_text}"
    if result.grad is not None:
        line += f"; {result.grad.loss} loss {result.grad.mean_loss:.4f} over {result.grad.positions:,} positions"
    out.print(line, highlight=False)
    if result.nonfinite_tokens:
        err.print(
            f"[yellow]warning:[/] {result.nonfinite_tokens} positions had NaN/inf states and were "
            "left out (try --dtype float32)"
        )
