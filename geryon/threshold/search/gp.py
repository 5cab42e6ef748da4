"""A small Gaussian process regressor and expected improvement, numpy only (ByteScheduler's tuner, paper 004).

Matern 5/2 kernel (rougher than RBF: iteration time against threshold has steps where a layer changes
class) with a noise term. Targets are standardized, so the signal variance is 1 and the length
scale and noise variance are picked from a small grid by the log marginal likelihood, which with
the handful of points of an online search is cheaper and steadier than gradient fitting.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

LENGTH_SCALES = (0.05, 0.1, 0.2, 0.4, 0.8)
NOISE_VARIANCES = (1e-3, 1e-2, 0.05, 0.2, 0.5)  # in units of the standardized target's variance

_erf = np.vectorize(math.erf, otypes=[float])


def matern52(a: np.ndarray, b: np.ndarray, length_scale: float) -> np.ndarray:
    r = np.sqrt(np.maximum(((a[:, None, :] - b[None, :, :]) ** 2).sum(-1), 0.0)) / length_scale
    s = math.sqrt(5.0) * r
    return (1.0 + s + s * s / 3.0) * np.exp(-s)


@dataclass
class GaussianProcess:
    x: np.ndarray
    mean_y: float
    scale_y: float
    length_scale: float
    noise: float
    _chol: np.ndarray
    _alpha: np.ndarray

    @classmethod
    def fit(cls, x: np.ndarray, y: np.ndarray) -> GaussianProcess:
        x = np.asarray(x, dtype=float)
        y = np.asarray(y, dtype=float)
        mean_y = float(y.mean())
        scale_y = float(y.std())
        if not scale_y > 0:
            # One point or all equal: any positive scale; 1% of the level keeps EI meaningful.
            scale_y = max(abs(mean_y) * 0.01, 1e-12)
        z = (y - mean_y) / scale_y
        best: tuple[float, float, float, np.ndarray, np.ndarray] | None = None
        for length in LENGTH_SCALES:
            k = matern52(x, x, length)
            for noise in NOISE_VARIANCES:
                chol = np.linalg.cholesky(k + noise * np.eye(len(x)))
                alpha = np.linalg.solve(chol.T, np.linalg.solve(chol, z))
                lml = -0.5 * float(z @ alpha) - float(np.log(np.diag(chol)).sum())
                if best is None or lml > best[0]:
                    best = (lml, length, noise, chol, alpha)
        assert best is not None
        _, length, noise, chol, alpha = best
        return cls(x, mean_y, scale_y, length, noise, chol, alpha)

    def predict(self, xs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean and standard deviation of the latent (noise-free) function at `xs`."""
        ks = matern52(np.asarray(xs, dtype=float), self.x, self.length_scale)
        mean = ks @ self._alpha
        v = np.linalg.solve(self._chol, ks.T)
        var = np.maximum(1.0 - (v * v).sum(0), 1e-12)
        return self.mean_y + self.scale_y * mean, self.scale_y * np.sqrt(var)


def expected_improvement(mean: np.ndarray, std: np.ndarray, best: float, xi: float = 0.0) -> np.ndarray:
    """Expected improvement below `best` (we minimize iteration time); `xi` trades toward exploration."""
    improvement = best - mean - xi
    z = improvement / std
    cdf = 0.5 * (1.0 + _erf(z / math.sqrt(2.0)))
    pdf = np.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)
    return np.maximum(improvement * cdf + std * pdf, 0.0)
