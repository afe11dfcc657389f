"""The least-squares map T of a removed span: what the span adds, as a linear function of what is folded into.

For each calibration position the block before the cut writes c (its MLP output, or attention + MLP in a
parallel block) and the removed span adds y = x^end − x^start. T minimises Σ ||y − T c||² + λ s ||T||²_F,
where s = trace(CᵀC)/d makes `--ridge` λ scale-free (λ = 0.01 shrinks T by about 1 % of the data's own
scale towards 0, i.e. towards plain removal). Only the normal equations are kept: G = Σ c cᵀ and
B = Σ c yᵀ, both d×d in float64, accumulated chunk by chunk, so memory never grows with the tokens.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch

_CHUNK_ROWS = 8192  # positions converted to float64 at once


class NormalEquations:
    """Running G = Σ c cᵀ, B = Σ c yᵀ and Σ ||y||² (float64, on the device of the first chunk)."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.rows = 0
        self.gram: torch.Tensor | None = None
        self.cross: torch.Tensor | None = None
        self.target_square = 0.0

    def add(self, inputs: torch.Tensor, targets: torch.Tensor) -> None:
        """Add positions: `inputs` c and `targets` y, each (..., d); rows with a non-finite value are skipped."""
        import torch

        c = inputs.reshape(-1, self.width)
        y = targets.reshape(-1, self.width).to(c.device)
        for start in range(0, c.shape[0], _CHUNK_ROWS):
            cc = c[start : start + _CHUNK_ROWS].double()
            yy = y[start : start + _CHUNK_ROWS].double()
            finite = torch.isfinite(cc).all(-1) & torch.isfinite(yy).all(-1)
            cc, yy = cc[finite], yy[finite]
            if self.gram is None:
                self.gram = torch.zeros(self.width, self.width, dtype=torch.float64, device=cc.device)
                self.cross = torch.zeros_like(self.gram)
            assert self.cross is not None
            self.gram += cc.T @ cc
            self.cross += cc.T @ yy
            self.target_square += float((yy * yy).sum())
            self.rows += int(cc.shape[0])

    def solve(self, ridge: float = 0.0) -> np.ndarray:
        """T (d×d, float64) with y ≈ T c: the least-squares (ridge) solution of the accumulated equations."""
        if self.gram is None or self.cross is None or self.rows == 0:
            raise ValueError("no calibration positions were added")
        gram = self.gram.cpu().numpy()
        cross = self.cross.cpu().numpy()
        if ridge > 0:
            gram = gram + ridge * (np.trace(gram) / self.width) * np.eye(self.width)
        # lstsq on the normal equations: the exact solution when G is invertible, the minimum-norm one if not.
        solution, *_ = np.linalg.lstsq(gram, cross, rcond=None)
        return np.ascontiguousarray(solution.T)

    def relative_residual(self, transform: np.ndarray) -> float | None:
        """Σ||y − T c||² / Σ||y||² on the calibration positions (1: T explains nothing; 0: everything)."""
        if self.gram is None or self.cross is None or self.target_square <= 0:
            return None
        gram = self.gram.cpu().numpy()
        cross = self.cross.cpu().numpy()
        a = transform.T  # y ≈ c A
        residual = self.target_square - 2 * np.trace(a.T @ cross) + np.trace(a.T @ gram @ a)
        return float(max(residual, 0.0) / self.target_square)
