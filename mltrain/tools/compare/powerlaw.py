"""The compute multiplier: a power law L(C) = E + A·C^(−α) fitted to the tuned frontier, read backwards.

For a run that reaches held-out loss L with C_run FLOPs, C_eq = the single-level FLOPs the fitted
frontier needs for L, M = C_eq / C_run (M > 1: the run needs M times less compute) and the saving is
1 − 1/M. A C_eq outside the FLOPs the frontier was fitted on is an extrapolation, said with how far
beyond the data it reaches; a loss at or below the fitted floor E is reached by no single-level compute.

Fit: scipy.optimize.least_squares on the residuals log L_fit − log L (relative errors, so the few
points at low loss weigh as much as the high ones), with the soft_l1 loss (one odd point does not drag
the curve), E bounded to [0, the lowest frontier loss], α to ALPHA_BOUNDS, started from the best point
of a grid over (E, α). FLOPs are scaled by their geometric mean for the fit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
from scipy.optimize import least_squares

from mltrain.tools.compare.results import PowerLawFit

FIT_LOSS = "soft_l1 on log residuals"
F_SCALE = 0.02  # log residual (about 2% of the loss) beyond which soft_l1 grows linearly, not squared
ALPHA_BOUNDS = (1e-3, 4.0)
MIN_POINTS = 3
MAX_NFEV = 2000
E_AT_BOUND = 1e-3  # E within 0.1% of the lowest loss, or below 0.1% of it, is at its bound
MAX_LOG_FLOPS = math.log(1e300)  # a C_eq beyond this is "unreachable", not a number


@dataclass
class PowerLaw:
    """L(C) = E + a_scaled·(C / c_ref)^(−α), i.e. A = a_scaled·c_ref^α."""

    E: float
    a_scaled: float
    alpha: float
    c_ref: float

    @property
    def A(self) -> float:
        return self.a_scaled * self.c_ref ** self.alpha

    def loss(self, flops: np.ndarray | float) -> np.ndarray | float:
        return self.E + self.a_scaled * (np.asarray(flops, dtype=float) / self.c_ref) ** (-self.alpha)

    def flops_for(self, loss: float) -> Optional[float]:
        """The FLOPs at which the fitted frontier reaches `loss`; None at or below E (unreachable)."""
        if not loss > self.E:
            return None
        log_c = math.log(self.c_ref) + (math.log(self.a_scaled) - math.log(loss - self.E)) / self.alpha
        return math.exp(log_c) if log_c < MAX_LOG_FLOPS else None


@dataclass
class Fit:
    law: Optional[PowerLaw]
    why: Optional[str]  # None when the fit is usable
    n_points: int
    flop_range: Optional[tuple[float, float]]
    rms: Optional[float] = None  # root mean square of the log residuals: how far the points are off the curve
    e_max: Optional[float] = None  # the upper bound E was fitted under (just below the lowest loss)

    @property
    def degenerate(self) -> Optional[str]:
        """Why the fit says little beyond its points (E at one of its bounds, α at one of its bounds, no
        fit at all), or None: such a fit's curve is its bounds' shape, not the data's."""
        if self.law is None or self.why is not None:
            return self.why or "no fit"
        if self.e_max is not None and (self.law.E <= E_AT_BOUND * self.e_max
                                       or self.law.E >= (1 - E_AT_BOUND) * self.e_max):
            return f"the floor E = {self.law.E:.4g} at its bound [0, {self.e_max:.4g}]"
        if any(math.isclose(self.law.alpha, b, rel_tol=1e-3) for b in ALPHA_BOUNDS):
            return f"α = {self.law.alpha:.3g} at its bound"
        return None

    @property
    def available(self) -> bool:
        return self.law is not None and self.why is None

    def as_result(self) -> PowerLawFit:
        """The fit as the report holds it (comparison.json's `fit`)."""
        law = self.law if self.available else None
        return PowerLawFit(self.available, self.why, law.E if law else None, law.A if law else None,
                           law.alpha if law else None, FIT_LOSS, self.n_points, self.rms if law else None,
                           self.degenerate if law else None, (self.flop_range[0], self.flop_range[1]) if self.flop_range else None)


def _residuals(p: np.ndarray, u: np.ndarray, arm: np.ndarray, log_y: np.ndarray) -> np.ndarray:
    """log L_fit − log L of (E, log a, α) and, for the joint fit, log M: the arm's points (`arm` 1) at M·C."""
    e, log_a, alpha = p[:3]
    t = u + arm * p[3] if len(p) > 3 else u
    return np.log(e + np.exp(log_a - alpha * t)) - log_y


def _jacobian(p: np.ndarray, u: np.ndarray, arm: np.ndarray, log_y: np.ndarray) -> np.ndarray:
    e, log_a, alpha = p[:3]
    t = u + arm * p[3] if len(p) > 3 else u
    term = np.exp(log_a - alpha * t)
    pred = e + term
    shift = [-alpha * arm * term / pred] if len(p) > 3 else []
    return np.stack([1 / pred, term / pred, -t * term / pred, *shift], axis=1)


def _started(start: PowerLaw, c_ref: float, e_max: float) -> list[float]:
    """(E, log a, α) of a fitted law as the start of a fit at another FLOPs scale, E below `e_max`."""
    return [min(start.E, e_max * (1 - 1e-6)), math.log(start.a_scaled * (c_ref / start.c_ref) ** -start.alpha),
            start.alpha]


def _grid_start(u: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The best (E, log a, α) of a grid over E and α, log a solved in closed form for each."""
    es = y.min() * np.linspace(0.0, 0.95, 20)
    alphas = np.geomspace(0.01, 2.0, 24)
    e, alpha = es[:, None, None], alphas[None, :, None]
    log_a = np.mean(np.log(y - e) + alpha * u, axis=2, keepdims=True)  # y - e > 0: e < min(y)
    cost = np.sum((np.log(e + np.exp(log_a - alpha * u)) - np.log(y)) ** 2, axis=2)
    i, j = np.unravel_index(np.argmin(cost), cost.shape)
    return np.array([es[i], float(log_a[i, j, 0]), alphas[j]])


def fit_power_law(flops: Sequence[float], losses: Sequence[float], start: Optional[PowerLaw] = None,
                  max_nfev: Optional[int] = None) -> Fit:
    """Fit L(C) = E + A·C^(−α) to (FLOPs, loss) points; see the module's docstring."""
    x, y = np.asarray(flops, dtype=float), np.asarray(losses, dtype=float)
    keep = np.isfinite(x) & np.isfinite(y) & (x > 0) & (y > 0)
    x, y = x[keep], y[keep]
    n_distinct = len(np.unique(x))
    span = (float(x.min()), float(x.max())) if x.size else None
    if n_distinct < MIN_POINTS:
        return Fit(None, f"{n_distinct} frontier point(s) at distinct FLOPs: a power law needs {MIN_POINTS}",
                   int(x.size), span)
    c_ref = float(np.exp(np.mean(np.log(x))))
    u, log_y = np.log(x / c_ref), np.log(y)
    e_max = float(y.min()) * (1 - 1e-9)
    p0 = np.array(_started(start, c_ref, e_max)) if start is not None else _grid_start(u, y)
    lower, upper = [0.0, -50.0, ALPHA_BOUNDS[0]], [e_max, 50.0, ALPHA_BOUNDS[1]]
    p0 = np.clip(p0, lower, upper)
    res = least_squares(_residuals, p0, jac=_jacobian, args=(u, np.zeros_like(u), log_y), bounds=(lower, upper), loss="soft_l1",
                        f_scale=F_SCALE, max_nfev=max_nfev or MAX_NFEV)
    e, log_a, alpha = (float(v) for v in res.x)
    law = PowerLaw(e, math.exp(log_a), alpha, c_ref)
    why = None
    if not res.success:
        why = f"the fit did not converge ({res.message.rstrip('.')})"
    elif any(math.isclose(alpha, b, rel_tol=1e-4) for b in ALPHA_BOUNDS):
        why = f"the fit did not converge: α ran into its bound {alpha:.3g} (the points do not make a power law)"
    return Fit(law, why, int(x.size), span, float(np.sqrt(np.mean(res.fun ** 2))), e_max)


@dataclass
class Reading:
    """One run read on the fitted frontier."""

    flops_eq: Optional[float]  # C_eq; None when its loss is at or below E
    multiplier: Optional[float]  # C_eq / C_run
    beyond_data: Optional[float]  # > 1: how many times past the fitted FLOPs range C_eq lies

    @property
    def extrapolated(self) -> bool:
        return self.beyond_data is not None


def fitted_law(fit: Fit) -> tuple[PowerLaw, tuple[float, float]]:
    """A fit's law and the FLOPs range it was fitted on; ValueError for a fit without them."""
    if fit.law is None or fit.flop_range is None:
        raise ValueError("a run is read on a fitted frontier only")
    return fit.law, fit.flop_range


def read(fit: Fit, flops: float, loss: float) -> Reading:
    law, (lo, hi) = fitted_law(fit)
    c_eq = law.flops_for(loss)
    if c_eq is None:
        return Reading(None, None, None)
    beyond = c_eq / hi if c_eq > hi else (lo / c_eq if c_eq < lo else None)
    return Reading(c_eq, c_eq / flops, beyond)


LOG_M_BOUND = math.log(1e3)  # the joint fit's shift is sought within [1/1000, 1000]


def fit_shift(frontier: tuple[Sequence[float], Sequence[float]], arm: tuple[Sequence[float], Sequence[float]],
              start: PowerLaw, log_m0: float = 0.0) -> Optional[float]:
    """The joint fit: the arm's points are the frontier's curve shifted by a factor M in compute,
    L_arm(C) = L_f(M·C) (one E, A, α for both), fitted to the frontier's and the arm's (FLOPs, loss)
    points at once with the frontier fit's loss on log residuals. M, or None when the fit does not
    converge or M runs into its bound."""
    x = np.concatenate([np.asarray(frontier[0], float), np.asarray(arm[0], float)])
    y = np.concatenate([np.asarray(frontier[1], float), np.asarray(arm[1], float)])
    is_arm = np.concatenate([np.zeros(len(frontier[0])), np.ones(len(arm[0]))])
    keep = np.isfinite(x) & np.isfinite(y) & (x > 0) & (y > 0)
    x, y, is_arm = x[keep], y[keep], is_arm[keep]
    if not is_arm.any() or len(np.unique(x[is_arm == 0])) < MIN_POINTS:
        return None
    c_ref = float(np.exp(np.mean(np.log(x[is_arm == 0]))))
    u, e_max = np.log(x / c_ref), float(y.min()) * (1 - 1e-9)
    lower = [0.0, -50.0, ALPHA_BOUNDS[0], -LOG_M_BOUND]
    upper = [e_max, 50.0, ALPHA_BOUNDS[1], LOG_M_BOUND]
    p0 = np.clip([*_started(start, c_ref, e_max), log_m0], lower, upper)
    res = least_squares(_residuals, p0, jac=_jacobian, args=(u, is_arm, np.log(y)), bounds=(lower, upper),
                        loss="soft_l1", f_scale=F_SCALE, max_nfev=MAX_NFEV)
    log_m = float(res.x[3])
    if not res.success or abs(log_m) >= LOG_M_BOUND * (1 - 1e-6):
        return None
    return math.exp(log_m)
