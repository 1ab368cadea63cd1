"""Recursive least squares on the residual network's last layer [RES §5].

The regression is ``y = θᵀφ`` with ``φ = [h_last, 1]`` (65) the last hidden activation and ``θ``
(65 × 3) the last layer; the three outputs share one covariance ``P`` (65 × 65) because they share
the regressor. The safeguards that [RES §5.1] found indispensable are all here:

* **prior covariance** ``P₀ = p0·I`` small: the offline layer is trusted, one sample cannot
  overwrite it (``p0`` large fits θ exactly to the first sample — worse than no RLS in hover);
* **warm-up**: the first ``warmup_steps`` updates identify only; :attr:`LastLayerRLS.applied` stays
  the offline layer until then (take-off is the largest and dirtiest sample);
* **trace cap**: when ``tr P`` exceeds ``trace_cap`` P is *scaled* down to it, never reset (under
  single-direction excitation P grows like λ⁻ᵏ in the unexcited directions, and a reset would
  claim total ignorance — the next update would jump just the same);
* **forgetting factor** λ: memory of about ``1/(1 − λ)`` steps;
* **rejection of non-finite samples**: an update whose regressor or target is NaN/inf (seen as a
  non-finite ``φᵀPφ`` or innovation, values the update computes anyway) is skipped whole — θ and
  P stay as they were and :attr:`LastLayerRLS.rejected` counts it. Without this one NaN sample
  makes θ and P NaN for good (``tr P > cap`` is False for NaN, so the cap never acts);
* optional **leak** ``θ ← θ − leak·(θ − θ₀)`` toward the offline layer;
* optional **EFRA** covariance management (``covariance: efra``, Salgado, Goodwin & Middleton
  1988 [EFRA]): ``P⁺ = (P − a·PφφᵀP/(1 + φᵀPφ))/λ + β·I − δ·P²`` keeps every eigenvalue of P
  between bounds set by ``(a, λ, β, δ)`` whatever the excitation: without excitation P settles at
  ``σ*·I`` with ``σ* = (λ⁻¹ − 1 + √((λ⁻¹ − 1)² + 4βδ))/(2δ)`` instead of growing to the cap, and
  directions that are excited keep a finite gain. It costs a full 65 × 65 update (≈ 40 µs);
* **symmetry**: P is stored as one triangle and updated with the BLAS symmetric rank-1 routines
  (``dsymv``/``dsyr``), so it is symmetric by construction — the exact form of the usual
  ``P ← (P + Pᵀ)/2`` safeguard, at no cost. ``λ`` and the cap are kept in a scalar factor
  (``P = s·P̃``), so one update touches P̃ once (rank-1) and costs a few µs.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np
from scipy.linalg.blas import ddot, dgemv, dger, dsymv, dsyr

#: smallest accepted forgetting factor: a memory of ``1/(1 − λ)`` = 2 steps
MIN_FORGETTING = 0.5
#: largest accepted trace cap (and prior covariance per parameter)
MAX_TRACE_CAP = 1e100
#: covariance-management schemes of :class:`RLSConfig`
COVARIANCE_SCHEMES = ("trace_cap", "efra")


def efra_fixed_point(config: RLSConfig) -> float:
    """``σ*``: the eigenvalue EFRA's covariance settles at without excitation (φ = 0), the root of
    ``σ = σ/λ + β − δσ²``; the covariance's level in unexcited directions."""
    eta = 1.0 / config.forgetting - 1.0
    b, d = config.efra_beta, config.efra_delta
    return (eta + math.sqrt(eta * eta + 4.0 * b * d)) / (2.0 * d)


@dataclass(frozen=True)
class RLSConfig:
    """RLS settings (YAML section ``rls`` of ``configs/residual.yaml``).

    ``p0`` and ``trace_cap`` are in the units of the last layer, i.e. of the normalized target
    ``(Δa − y_mean)/output_scale`` (dimensionless).

    Accepted ranges, chosen so that no setting can overflow: ``0 < p0 ≤ trace_cap``,
    ``0 < trace_cap ≤ 1e100`` (finite), ``0.5 ≤ forgetting ≤ 1``, ``0 ≤ leak < 1``. Why they
    suffice: one update gives ``P⁺ = (P − k·φᵀP)/λ ⪯ P/λ``, so ``tr P⁺ ≤ tr P/λ ≤ cap/λ``
    before the cap scales it back to at most ``cap``; :class:`LastLayerRLS` stores
    ``P = s·P̃`` with ``s`` folded back into ``P̃`` when it leaves ``(1e-6, 1e6)``, so every
    stored number is at most ``1e6·cap/λ ≤ 2e106``, far from the float64 limit (1.8e308). The
    prior trace ``n·p0`` is at most ``n·cap`` for the same reason. ``λ < 0.5`` (a memory under
    two samples) is not least squares any more but a one-sample fit; ``trace_cap = inf`` (or
    no cap) with ``λ < 1`` grows ``tr P`` like ``λ⁻ᵏ`` until it overflows (``λ = 0.5``: 1024
    steps).
    """

    p0: float = 1e-2  # prior covariance per parameter
    forgetting: float = 0.99  # λ, memory ≈ 1/(1 − λ) steps
    trace_cap: float = 1000.0  # cap on tr P (scaled, never reset)
    warmup_steps: int = 100  # identify-only updates before the estimate is applied
    leak: float = 0.0  # per-step pull toward the offline layer, 0 ≤ leak < 1
    # "trace_cap" (the source's: exponential forgetting, tr P scaled back to the cap) or "efra"
    covariance: str = "trace_cap"
    efra_alpha: float = 1.0  # a in (0, 1], gain of the rank-1 correction (EFRA only)
    efra_beta: float = 1e-4  # β > 0, constant covariance injection per step (EFRA only)
    efra_delta: float = 0.002  # δ > 0, quadratic covariance damping per step (EFRA only)

    def __post_init__(self) -> None:
        if self.covariance not in COVARIANCE_SCHEMES:
            raise ValueError(
                f"rls.covariance {self.covariance!r}; valid choices: "
                f"{', '.join(COVARIANCE_SCHEMES)}"
            )
        for name in ("efra_alpha", "efra_beta", "efra_delta"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise ValueError(f"rls.{name} must be a number, got {value!r}")
        if not (0.0 < self.efra_alpha <= 1.0):
            raise ValueError(f"rls.efra_alpha must be in (0, 1], got {self.efra_alpha}")
        for name in ("efra_beta", "efra_delta"):
            if not (0.0 < getattr(self, name) < 1.0):
                raise ValueError(f"rls.{name} must be in (0, 1), got {getattr(self, name)}")
        for name in ("p0", "forgetting", "trace_cap", "leak"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise ValueError(f"rls.{name} must be a number, got {value!r}")
        if not (0 < self.trace_cap <= MAX_TRACE_CAP):  # False for NaN and inf
            raise ValueError(
                f"rls.trace_cap must be finite, > 0 and <= {MAX_TRACE_CAP:g}, got {self.trace_cap}"
            )
        if not (0 < self.p0 <= self.trace_cap):
            raise ValueError(
                f"rls.p0 must be positive, finite and <= rls.trace_cap ({self.trace_cap}), "
                f"got {self.p0}"
            )
        if not (MIN_FORGETTING <= self.forgetting <= 1.0):
            raise ValueError(
                f"rls.forgetting must be in [{MIN_FORGETTING}, 1] (memory 1/(1 − λ) of at least "
                f"2 steps), got {self.forgetting}"
            )
        w = self.warmup_steps
        if isinstance(w, bool) or not isinstance(w, numbers.Real) or not math.isfinite(w):
            raise ValueError(f"rls.warmup_steps must be an integer >= 0, got {w!r}")
        if int(w) != w or w < 0:
            raise ValueError(f"rls.warmup_steps must be an integer >= 0, got {w}")
        if not (0.0 <= self.leak < 1.0):
            raise ValueError(f"rls.leak must be in [0, 1), got {self.leak}")


class LastLayerRLS:
    """Multi-output RLS with a shared covariance, for ``θ`` of shape (n, m).

    Args:
        theta0: the offline last layer; kept as a private copy that :meth:`reset` restores.
        config: :class:`RLSConfig`.
    """

    # P̃ is rescaled into s when s leaves this range (keeps P̃ well away from under/overflow)
    _RENORM = 1e6

    def __init__(self, theta0: np.ndarray, config: RLSConfig | None = None):
        theta0 = np.array(theta0, dtype=float)
        if theta0.ndim != 2:
            raise ValueError(f"theta0 must be 2-D (regressors × outputs), got {theta0.shape}")
        self.config = config or RLSConfig()
        self.n, self.m = theta0.shape
        self._theta0 = theta0.copy()  # private: never handed out, never written
        self._theta0.setflags(write=False)
        self.theta = np.asfortranarray(theta0.copy())  # column-major for BLAS dger/dgemv
        self._Pt = np.asfortranarray(np.eye(self.n))  # upper triangle is P̃ (BLAS, column-major)
        self._Pt_flat = self._Pt.reshape(-1, order="F")  # a view: diagonal at stride n + 1
        self._ones = np.ones(self.n)
        self.reset()

    # -- state ---------------------------------------------------------------------------------
    def reset(self) -> None:
        """Back to the offline layer and the prior covariance, as after construction."""
        c = self.config
        self.theta[...] = self._theta0
        self._Pt[...] = 0.0
        np.fill_diagonal(self._Pt, 1.0)
        self._s = c.p0  # P = s·P̃
        self.steps = 0  # updates done
        self.cap_hits = 0  # times the trace cap scaled P
        self.rejected = 0  # updates skipped for a non-finite regressor or target
        self.last_innovation = np.zeros(self.m)  # y − θᵀφ before the last update

    @property
    def theta0(self) -> np.ndarray:
        """The offline layer (read-only view)."""
        return self._theta0

    @property
    def warmup_done(self) -> bool:
        return self.steps >= self.config.warmup_steps

    @property
    def applied(self) -> np.ndarray:
        """The layer the controller uses: the offline one during warm-up, the estimate after."""
        return self.theta if self.steps >= self.config.warmup_steps else self._theta0

    @property
    def trace(self) -> float:
        """``tr P``."""
        return self._s * self._trace_t()

    @property
    def P(self) -> np.ndarray:
        """The covariance as a full symmetric matrix (a copy; for analysis and tests)."""
        U = np.triu(self._Pt)
        return self._s * (U + np.triu(U, 1).T)

    # -- update --------------------------------------------------------------------------------
    def update(self, phi: np.ndarray, y: np.ndarray) -> np.ndarray:
        """One RLS step with regressor ``phi`` (n,) and target ``y`` (m,); returns the innovation
        ``y − θᵀφ`` before the update.

        ``k = Pφ/(λ + φᵀPφ)``, ``θ ← θ + k·eᵀ``, ``P ← (P − k·φᵀP)/λ``, then the leak and the
        trace cap. A sample whose ``φᵀPφ`` or innovation is not finite (NaN/inf in ``phi`` or
        ``y``, or an overflow) changes nothing: it is counted in :attr:`rejected` and its
        innovation returned.
        """
        c = self.config
        if c.covariance == "efra":
            return self._update_efra(phi, y)
        s = self._s
        Pt = self._Pt
        theta = self.theta
        g = dsymv(1.0, Pt, phi)  # P̃φ  (Pφ = s·g)
        denom = c.forgetting + s * ddot(phi, g)
        e = y - dgemv(1.0, theta, phi, trans=1)  # y − θᵀφ
        if not math.isfinite(denom + ddot(e, e)):  # NaN/inf sample: no update at all
            self.rejected += 1
            return e
        self.last_innovation = e
        dger(s / denom, g, e, a=theta, overwrite_a=1)  # θ += (s/denom)·g·eᵀ
        if c.leak > 0.0:
            theta -= c.leak * (theta - self._theta0)
        # P_new = (s·P̃ − s²·g·gᵀ/denom)/λ = (s/λ)·(P̃ − (s/denom)·g·gᵀ)
        dsyr(-s / denom, g, a=Pt, overwrite_a=1)
        s /= c.forgetting
        trace = s * self._trace_t()
        if trace > c.trace_cap:  # scale, never reset
            s *= c.trace_cap / trace
            self.cap_hits += 1
        if not (1.0 / self._RENORM < s < self._RENORM):  # fold s into P̃
            Pt *= s
            s = 1.0
        self._s = s
        self.steps += 1
        return e

    def _update_efra(self, phi: np.ndarray, y: np.ndarray) -> np.ndarray:
        """One EFRA step (see the module docstring); P is kept full in ``P̃`` with ``s = 1``."""
        c = self.config
        P = self._Pt
        if self._s != 1.0:  # the prior p0·I: fold the scale in once
            P *= self._s
            self._s = 1.0
            P[np.tril_indices(self.n, -1)] = P.T[np.tril_indices(self.n, -1)]
        Pphi = P @ phi
        denom = 1.0 + float(phi @ Pphi)
        e = y - self.theta.T @ phi
        if not math.isfinite(denom + float(e @ e)):
            self.rejected += 1
            return e
        self.last_innovation = e
        self.theta += np.outer((c.efra_alpha / denom) * Pphi, e)
        if c.leak > 0.0:
            self.theta -= c.leak * (self.theta - self._theta0)
        P_new = (P - (c.efra_alpha / denom) * np.outer(Pphi, Pphi)) / c.forgetting
        P_new -= c.efra_delta * (P @ P)
        P_new[np.diag_indices(self.n)] += c.efra_beta
        P[...] = 0.5 * (P_new + P_new.T)
        self.steps += 1
        return e

    def _trace_t(self) -> float:
        """``tr P̃``: a strided BLAS dot over the diagonal (a fraction of ``np.trace``'s cost)."""
        return ddot(self._Pt_flat, self._ones, n=self.n, incx=self.n + 1)


def reference_update(
    P: np.ndarray,
    theta: np.ndarray,
    phi: np.ndarray,
    y: np.ndarray,
    config: RLSConfig,
    theta0: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Textbook full-matrix RLS step (the form of [RES §11.5]), to cross-check
    :class:`LastLayerRLS` in tests. Returns the new ``(P, theta)``; the cap is applied last."""
    Pphi = P @ phi
    k = Pphi / (config.forgetting + phi @ Pphi)
    theta = theta + np.outer(k, y - theta.T @ phi)
    if config.leak > 0.0:
        theta = theta - config.leak * (theta - theta0)
    P = (P - np.outer(k, Pphi)) / config.forgetting
    P = 0.5 * (P + P.T)
    tr = float(np.trace(P))
    if tr > config.trace_cap:
        P = P * (config.trace_cap / tr)
    return P, theta


class BatchedLastLayerRLS:
    """:class:`LastLayerRLS` for N independent envs, vectorized: ``θ`` (N, n, m), ``P = s·P̃``
    with ``P̃`` (N, n, n) stored full (symmetric by construction: it only ever receives symmetric
    rank-1 terms) and ``s`` (N,), one warm-up counter, cap-hit and rejection count per env.

    Same algorithm and safeguards, step for step: the same ``λ``/cap scalar bookkeeping, the
    same rejection of non-finite samples, the same fold of ``s`` into ``P̃``. Rows of an update
    that are masked out (or rejected) get a zero gain, so their ``θ`` and ``P̃`` are untouched.
    Results agree with N :class:`LastLayerRLS` to rounding (BLAS kernels differ). With
    ``covariance: efra`` each row's full ``P`` follows :meth:`LastLayerRLS._update_efra`.
    """

    #: attributes holding one row of state per env (a batch controller restores the rows of an
    #: env whose observation was not finite)
    ROW_STATE: tuple[str, ...] = (
        "theta",
        "_Pt",
        "_s",
        "steps",
        "cap_hits",
        "rejected",
        "last_innovation",
    )
    _RENORM = LastLayerRLS._RENORM
    _BLOCK = 16  # envs per block of the rank-1 update (16 × 65 × 65 doubles ≈ 0.5 MB)

    def __init__(self, theta0: np.ndarray, n_envs: int, config: RLSConfig | None = None):
        theta0 = np.array(theta0, dtype=float)
        if theta0.ndim != 2:
            raise ValueError(f"theta0 must be 2-D (regressors × outputs), got {theta0.shape}")
        self.config = config or RLSConfig()
        self.n, self.m = theta0.shape
        self.n_envs = int(n_envs)
        self._theta0 = theta0.copy()
        self._theta0.setflags(write=False)
        N = self.n_envs
        self.theta = np.empty((N, self.n, self.m))
        self._Pt = np.empty((N, self.n, self.n))
        self._s = np.empty(N)
        self.steps = np.zeros(N, dtype=np.int64)
        self.cap_hits = np.zeros(N, dtype=np.int64)
        self.rejected = np.zeros(N, dtype=np.int64)
        self.last_innovation = np.zeros((N, self.m))
        self.reset()

    def reset(self, index: int | slice = slice(None)) -> None:
        """Back to the offline layer and the prior for the envs ``index`` (default: all)."""
        self.theta[index] = self._theta0
        self._Pt[index] = np.eye(self.n)
        self._s[index] = self.config.p0
        self.steps[index] = 0
        self.cap_hits[index] = 0
        self.rejected[index] = 0
        self.last_innovation[index] = 0.0

    @property
    def theta0(self) -> np.ndarray:
        return self._theta0

    @property
    def warmup_done(self) -> np.ndarray:
        """(N,) bool: the estimate is applied."""
        return self.steps >= self.config.warmup_steps

    @property
    def applied(self) -> np.ndarray:
        """(N, n, m): the layer each env's controller uses (offline during warm-up)."""
        done = self.warmup_done
        if done.all():
            return self.theta
        return np.where(done[:, None, None], self.theta, self._theta0)

    @property
    def trace(self) -> np.ndarray:
        """``tr P`` per env."""
        return self._s * np.einsum("nii->n", self._Pt)

    @property
    def P(self) -> np.ndarray:
        """The covariances (N, n, n) (a copy)."""
        return self._s[:, None, None] * self._Pt

    def update(self, phi: np.ndarray, y: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
        """One RLS step for the envs in ``mask`` (N,) bool (default all), regressors ``phi``
        (N, n), targets ``y`` (N, m); returns the innovations (N, m) before the update.

        Rows with a non-finite ``φᵀPφ`` or innovation change nothing and count in
        :attr:`rejected`, as in :meth:`LastLayerRLS.update`.
        """
        c = self.config
        N = self.n_envs
        mask = np.ones(N, dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
        if c.covariance == "efra":
            return self._update_efra(phi, y, mask)
        s = self._s
        Pt = self._Pt
        theta = self.theta
        g = np.einsum("nij,nj->ni", Pt, phi)  # P̃φ
        denom = c.forgetting + s * np.einsum("ni,ni->n", phi, g)
        e, ok = self._innovation(y, phi, denom, mask)
        if not ok.any():
            return e
        coef = np.where(ok, s / np.where(ok, denom, 1.0), 0.0)  # zero gain: row untouched
        g = np.where(ok[:, None], g, 0.0)
        e0 = np.where(ok[:, None], e, 0.0)
        theta += coef[:, None, None] * (g[:, :, None] * e0[:, None, :])
        if c.leak > 0.0:
            theta -= (c.leak * ok)[:, None, None] * (theta - self._theta0)
        # P̃ −= coef·g·gᵀ in cache-sized blocks of envs: one (N, n, n) temporary would cost
        # more in memory traffic and page faults than the arithmetic itself
        gc = coef[:, None] * g
        for a in range(0, N, self._BLOCK):
            b = a + self._BLOCK
            Pt[a:b] -= gc[a:b, :, None] * g[a:b, None, :]
        s_new = s / c.forgetting
        trace = s_new * np.einsum("nii->n", Pt)
        capped = ok & (trace > c.trace_cap)
        s_new = np.where(capped, s_new * (c.trace_cap / np.where(capped, trace, 1.0)), s_new)
        self.cap_hits += capped
        fold = ok & ~((1.0 / self._RENORM < s_new) & (s_new < self._RENORM))
        if fold.any():
            Pt[fold] *= s_new[fold][:, None, None]
            s_new = np.where(fold, 1.0, s_new)
        self._s = np.where(ok, s_new, s)
        self.steps += ok
        return e

    def _innovation(
        self, y: np.ndarray, phi: np.ndarray, denom: np.ndarray, mask: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """The innovations ``y − θᵀφ`` (N, 3) and the rows that update: masked in and finite
        (a non-finite row is counted in :attr:`rejected`); their innovation is recorded."""
        e = y - np.einsum("nij,ni->nj", self.theta, phi)  # y − θᵀφ
        finite = np.isfinite(denom + np.einsum("ni,ni->n", e, e))
        self.rejected += mask & ~finite
        ok = mask & finite
        self.last_innovation[ok] = e[ok]
        return e, ok

    def _update_efra(self, phi: np.ndarray, y: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """:meth:`LastLayerRLS._update_efra` for the envs in ``mask``: the same fold of the prior's
        scale into ``P̃`` at a row's first update, the same step on the rows that pass."""
        c = self.config
        P = self._Pt
        fold = mask & (self._s != 1.0)
        if fold.any():  # the prior p0·I: fold the scale in once (P̃ is stored full)
            P[fold] *= self._s[fold][:, None, None]
            self._s[fold] = 1.0
        Pphi = np.einsum("nij,nj->ni", P, phi)
        denom = 1.0 + np.einsum("ni,ni->n", phi, Pphi)
        e, ok = self._innovation(y, phi, denom, mask)
        if not ok.any():
            return e
        rows = np.flatnonzero(ok)
        k = c.efra_alpha / denom[rows]
        kP = k[:, None] * Pphi[rows]
        theta = self.theta[rows] + kP[:, :, None] * e[rows][:, None, :]
        if c.leak > 0.0:
            theta -= c.leak * (theta - self._theta0)
        self.theta[rows] = theta
        Pr = P[rows]
        gg = Pphi[rows][:, :, None] * Pphi[rows][:, None, :]
        P_new = (Pr - k[:, None, None] * gg) / c.forgetting
        P_new -= c.efra_delta * (Pr @ Pr)
        diag = np.arange(self.n)
        P_new[:, diag, diag] += c.efra_beta
        P[rows] = 0.5 * (P_new + P_new.transpose(0, 2, 1))
        self.steps += ok
        return e
