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
  directions that are excited keep a finite gain — **provided** ``g(S) = (1 − a)S/λ + β − δS² >
  0`` at the bound ``S`` (:func:`efra_bound`: ``max(p0, σ*)`` unless δ is so large that ``f(p) =
  p/λ + β − δp²`` peaks below it; :func:`efra_positive_margin`). With ``p0 ≤ σ*`` this is
  ``a < λ``. Why: ``0 ⪯ PφφᵀP/(1 + φᵀPφ) ⪯ P`` gives ``g(P) ⪯ P⁺ ⪯ f(P)``, both functions of P
  alone (same eigenvectors); so eigenvalues in ``(0, S]`` stay in ``(0, S]``.
  Without it a direction that grew to σ* while unexcited and is then strongly excited drops
  below zero (``a = 1``: to ``β − δσ*²``), and the ``−δP²`` term drives a negative eigenvalue to
  −∞ within a few steps (an overflow). :class:`RLSConfig` refuses such settings. It costs a full
  65 × 65 update (≈ 40 µs);
* **symmetry**: P is stored as one triangle and updated with the BLAS symmetric rank-1 routines
  (``dsymv``/``dsyr``), so it is symmetric by construction — the exact form of the usual
  ``P ← (P + Pᵀ)/2`` safeguard, at no cost. ``λ`` and the cap are kept in a scalar factor
  (``P = s·P̃``), so one update touches P̃ once (rank-1) and costs a few µs.

:class:`RLSLaw` is the algorithm over an explicit :class:`RLSState` (one row per regression):
``update`` for N regressions at once (numpy, its covariance steps compiled one-pass kernels:
:mod:`~residual_quad.controllers.rls_kernels`; P̃ stored full, symmetric by construction as it
only receives symmetric rank-1 terms) and ``update_one`` for one (the BLAS triangle form above);
the same steps, safeguards and counters, results equal to rounding. :class:`LastLayerRLS` runs
one regression and keeps its state (standalone use, analyses, tests).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from scipy.linalg.blas import ddot, dgemv, dger, dsymv, dsyr

from residual_quad.controllers.rls_kernels import efra_covariance, rank1_downdate

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


def efra_bound(config: RLSConfig) -> float:
    """``S``: no eigenvalue of EFRA's P exceeds it, whatever the excitation (module docstring).
    ``S = max(p0, σ*, F)`` with ``F`` the largest ``f(p) = p/λ + β − δp²`` on ``[0, max(p0, σ*)]``
    (``f`` rises up to ``1/(2λδ)``; above ``σ*`` it never raises an eigenvalue)."""
    lam, b, d = config.forgetting, config.efra_beta, config.efra_delta
    start = max(config.p0, efra_fixed_point(config))
    peak = min(start, 1.0 / (2.0 * lam * d))
    return max(start, peak / lam + b - d * peak * peak)


def efra_positive_margin(config: RLSConfig) -> float:
    """``g(S) = (1 − a)S/λ + β − δS²`` at the bound ``S`` (:func:`efra_bound`): ``g`` is concave
    with ``g(0) = β > 0``, so a positive ``g(S)`` keeps every eigenvalue of P in ``(0, S]``
    after any update (module docstring)."""
    top = efra_bound(config)
    a, lam = config.efra_alpha, config.forgetting
    return (1.0 - a) * top / lam + config.efra_beta - config.efra_delta * top * top


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
    efra_alpha: float = 0.9  # a in (0, 1], gain of the rank-1 correction (EFRA only; a < λ)
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
        if self.covariance == "efra" and not efra_positive_margin(self) > 0.0:
            raise ValueError(
                f"rls: EFRA with efra_alpha {self.efra_alpha:g}, forgetting {self.forgetting:g}, "
                f"efra_beta {self.efra_beta:g}, efra_delta {self.efra_delta:g}, p0 {self.p0:g} "
                "can drive P indefinite and then to overflow: it needs (1 − a)S/λ + β − δS² > 0 "
                f"at the eigenvalues' bound S = {efra_bound(self):.4g} (with p0 ≤ σ*: "
                "efra_alpha < forgetting)"
            )


class RLSState(NamedTuple):
    """The state of the RLS, one row per regression (one vehicle: no leading axis, ``θ`` and
    ``P̃`` column-major for BLAS with P̃ in its upper triangle; a batch: P̃ stored full)."""

    theta: np.ndarray  # (n, p, m): the last layer
    Pt: np.ndarray  # (n, p, p): P̃, with P = s·P̃
    s: np.ndarray  # (n,): the scale of P
    steps: np.ndarray  # (n,) int: updates done
    cap_hits: np.ndarray  # (n,) int: times the trace cap scaled P
    rejected: np.ndarray  # (n,) int: updates skipped for a non-finite regressor or target
    last_innovation: np.ndarray  # (n, m): y − θᵀφ before the last update


class RLSLaw:
    """Multi-output RLS with a shared covariance, for ``θ`` of shape (p, m), over an explicit
    :class:`RLSState`.

    Args:
        theta0: the offline last layer; kept as a private read-only copy (every initial state
            starts from it, the leak pulls toward it).
        config: :class:`RLSConfig`.
    """

    # P̃ is rescaled into s when s leaves this range (keeps P̃ well away from under/overflow)
    _RENORM = 1e6
    _BLOCK = 16  # envs per block of EFRA's batched P² (16 × 65 × 65 doubles ≈ 0.5 MB)

    def __init__(self, theta0: np.ndarray, config: RLSConfig | None = None):
        theta0 = np.array(theta0, dtype=float)
        if theta0.ndim != 2:
            raise ValueError(f"theta0 must be 2-D (regressors × outputs), got {theta0.shape}")
        self.config = config or RLSConfig()
        self.n, self.m = theta0.shape
        self._theta0 = theta0.copy()  # private: never handed out writable, never written
        self._theta0.setflags(write=False)
        self._ones = np.ones(self.n)

    @property
    def theta0(self) -> np.ndarray:
        """The offline layer (read-only)."""
        return self._theta0

    # -- state ---------------------------------------------------------------------------------
    def init_state(self, n_envs: int) -> RLSState:
        """The offline layer and the prior covariance ``p0·I`` for ``n_envs`` regressions."""
        N = int(n_envs)
        theta = np.empty((N, self.n, self.m))
        theta[...] = self._theta0
        Pt = np.empty((N, self.n, self.n))
        Pt[...] = np.eye(self.n)
        return RLSState(
            theta=theta,
            Pt=Pt,
            s=np.full(N, float(self.config.p0)),
            steps=np.zeros(N, dtype=np.int64),
            cap_hits=np.zeros(N, dtype=np.int64),
            rejected=np.zeros(N, dtype=np.int64),
            last_innovation=np.zeros((N, self.m)),
        )

    def init_one(self) -> RLSState:
        """The initial state of one regression (column-major arrays for BLAS, scalars)."""
        return RLSState(
            theta=np.asfortranarray(self._theta0.copy()),
            Pt=np.asfortranarray(np.eye(self.n)),
            s=float(self.config.p0),
            steps=0,
            cap_hits=0,
            rejected=0,
            last_innovation=np.zeros(self.m),
        )

    def warmup_done(self, state: RLSState) -> bool | np.ndarray:
        """Whether the estimate is applied (per row for a batch)."""
        return state.steps >= self.config.warmup_steps

    def applied(self, state: RLSState) -> np.ndarray:
        """The layer each row's controller uses (n, p, m): the offline one during warm-up."""
        done = self.warmup_done(state)
        if np.all(done):
            return state.theta
        return np.where(np.asarray(done)[:, None, None], state.theta, self._theta0)

    def applied_one(self, state: RLSState) -> np.ndarray:
        """The layer one regression's controller uses (p, m)."""
        return state.theta if state.steps >= self.config.warmup_steps else self._theta0

    def covariance(self, state: RLSState) -> np.ndarray:
        """``P`` as full symmetric matrices (a copy): (n, p, p) for a batch, (p, p) for one."""
        if np.ndim(state.s) == 0:
            U = np.triu(state.Pt)
            return state.s * (U + np.triu(U, 1).T)
        return state.s[:, None, None] * state.Pt

    def trace(self, state: RLSState) -> float | np.ndarray:
        """``tr P`` (per row for a batch)."""
        if np.ndim(state.s) == 0:
            return state.s * self._trace_t(state.Pt)
        return state.s * np.einsum("nii->n", state.Pt)

    # -- one regression ------------------------------------------------------------------------
    def update_one(
        self, state: RLSState, phi: np.ndarray, y: np.ndarray
    ) -> tuple[RLSState, np.ndarray]:
        """One RLS step with regressor ``phi`` (p,) and target ``y`` (m,); the next state and the
        innovation ``y − θᵀφ`` before the update.

        ``k = Pφ/(λ + φᵀPφ)``, ``θ ← θ + k·eᵀ``, ``P ← (P − k·φᵀP)/λ``, then the leak and the
        trace cap. A sample whose ``φᵀPφ`` or innovation is not finite (NaN/inf in ``phi`` or
        ``y``, or an overflow) changes nothing but :attr:`RLSState.rejected`.
        """
        c = self.config
        if c.covariance == "efra":
            return self._update_efra_one(state, phi, y)
        s = state.s
        Pt = state.Pt
        theta = state.theta
        g = dsymv(1.0, Pt, phi)  # P̃φ  (Pφ = s·g)
        denom = c.forgetting + s * ddot(phi, g)
        e = y - dgemv(1.0, theta, phi, trans=1)  # y − θᵀφ
        if not math.isfinite(denom + ddot(e, e)):  # NaN/inf sample: no update at all
            return state._replace(rejected=state.rejected + 1), e
        theta = dger(s / denom, g, e, a=theta, overwrite_a=1)  # θ += (s/denom)·g·eᵀ
        if c.leak > 0.0:
            theta -= c.leak * (theta - self._theta0)
        # P_new = (s·P̃ − s²·g·gᵀ/denom)/λ = (s/λ)·(P̃ − (s/denom)·g·gᵀ)
        Pt = dsyr(-s / denom, g, a=Pt, overwrite_a=1)
        s /= c.forgetting
        trace = s * self._trace_t(Pt)
        cap_hits = state.cap_hits
        if trace > c.trace_cap:  # scale, never reset
            s *= c.trace_cap / trace
            cap_hits += 1
        if not (1.0 / self._RENORM < s < self._RENORM):  # fold s into P̃
            Pt *= s
            s = 1.0
        new = RLSState(theta, Pt, s, state.steps + 1, cap_hits, state.rejected, e)
        return new, e

    def _update_efra_one(
        self, state: RLSState, phi: np.ndarray, y: np.ndarray
    ) -> tuple[RLSState, np.ndarray]:
        """One EFRA step (see the module docstring); P is kept full in ``P̃`` with ``s = 1``."""
        c = self.config
        P = state.Pt
        s = state.s
        if s != 1.0:  # the prior p0·I: fold the scale in once
            P *= s
            s = 1.0
            P[np.tril_indices(self.n, -1)] = P.T[np.tril_indices(self.n, -1)]
        Pphi = P @ phi
        denom = 1.0 + float(phi @ Pphi)
        theta = state.theta
        e = y - theta.T @ phi
        if not math.isfinite(denom + float(e @ e)):
            return state._replace(Pt=P, s=s, rejected=state.rejected + 1), e
        theta += np.outer((c.efra_alpha / denom) * Pphi, e)
        if c.leak > 0.0:
            theta -= c.leak * (theta - self._theta0)
        P_new = (P - (c.efra_alpha / denom) * np.outer(Pphi, Pphi)) / c.forgetting
        P_new -= c.efra_delta * (P @ P)
        P_new[np.diag_indices(self.n)] += c.efra_beta
        P[...] = 0.5 * (P_new + P_new.T)
        return RLSState(theta, P, s, state.steps + 1, state.cap_hits, state.rejected, e), e

    def _trace_t(self, Pt: np.ndarray) -> float:
        """``tr P̃`` of one regression: a strided BLAS dot over the diagonal (a fraction of
        ``np.trace``'s cost)."""
        return ddot(Pt.reshape(-1, order="F"), self._ones, n=self.n, incx=self.n + 1)

    # -- N regressions -------------------------------------------------------------------------
    def update(
        self, state: RLSState, phi: np.ndarray, y: np.ndarray, mask: np.ndarray | None = None
    ) -> tuple[RLSState, np.ndarray]:
        """:meth:`update_one` for the rows in ``mask`` (n,) bool (default all), regressors
        ``phi`` (n, p), targets ``y`` (n, m); the next state and the innovations (n, m). Rows
        masked out or rejected get a zero gain: their ``θ`` and ``P̃`` are untouched."""
        c = self.config
        N = state.s.shape[0]
        mask = np.ones(N, dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
        if c.covariance == "efra":
            return self._update_efra(state, phi, y, mask)
        s = state.s
        Pt = state.Pt
        theta = state.theta
        g = np.einsum("nij,nj->ni", Pt, phi)  # P̃φ
        denom = c.forgetting + s * np.einsum("ni,ni->n", phi, g)
        e, ok = self._innovation(state, y, phi, denom, mask)
        if not ok.any():
            return state, e
        coef = np.where(ok, s / np.where(ok, denom, 1.0), 0.0)  # zero gain: row untouched
        g = np.where(ok[:, None], g, 0.0)
        e0 = np.where(ok[:, None], e, 0.0)
        theta += coef[:, None, None] * (g[:, :, None] * e0[:, None, :])
        if c.leak > 0.0:
            theta -= (c.leak * ok)[:, None, None] * (theta - self._theta0)
        # P̃ −= coef·g·gᵀ in one compiled pass: an (N, p, p) temporary would cost more in memory
        # traffic and page faults than the arithmetic itself
        gc = coef[:, None] * g
        rank1_downdate(Pt, gc, g)
        s_new = s / c.forgetting
        trace = s_new * np.einsum("nii->n", Pt)
        capped = ok & (trace > c.trace_cap)
        s_new = np.where(capped, s_new * (c.trace_cap / np.where(capped, trace, 1.0)), s_new)
        state.cap_hits[...] += capped
        fold = ok & ~((1.0 / self._RENORM < s_new) & (s_new < self._RENORM))
        if fold.any():
            Pt[fold] *= s_new[fold][:, None, None]
            s_new = np.where(fold, 1.0, s_new)
        state.steps[...] += ok
        return state._replace(s=np.where(ok, s_new, s)), e

    def _innovation(
        self, state: RLSState, y: np.ndarray, phi: np.ndarray, denom: np.ndarray, mask: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """The innovations ``y − θᵀφ`` (n, m) and the rows that update: masked in and finite
        (a non-finite row is counted in ``rejected``); their innovation is recorded."""
        e = y - np.einsum("nij,ni->nj", state.theta, phi)  # y − θᵀφ
        finite = np.isfinite(denom + np.einsum("ni,ni->n", e, e))
        state.rejected[...] += mask & ~finite
        ok = mask & finite
        state.last_innovation[ok] = e[ok]
        return e, ok

    def _update_efra(
        self, state: RLSState, phi: np.ndarray, y: np.ndarray, mask: np.ndarray
    ) -> tuple[RLSState, np.ndarray]:
        """:meth:`_update_efra_one` for the rows in ``mask``: the same fold of the prior's scale
        into ``P̃`` at a row's first update, the same step on the rows that pass."""
        c = self.config
        P = state.Pt
        s = state.s
        fold = mask & (s != 1.0)
        if fold.any():  # the prior p0·I: fold the scale in once (P̃ is stored full)
            P[fold] *= s[fold][:, None, None]
            s[fold] = 1.0
        Pphi = np.einsum("nij,nj->ni", P, phi)
        denom = 1.0 + np.einsum("ni,ni->n", phi, Pphi)
        e, ok = self._innovation(state, y, phi, denom, mask)
        if not ok.any():
            return state, e
        rows = np.flatnonzero(ok)
        k = c.efra_alpha / denom[rows]
        kP = k[:, None] * Pphi[rows]
        theta = state.theta[rows] + kP[:, :, None] * e[rows][:, None, :]
        if c.leak > 0.0:
            theta -= c.leak * (theta - self._theta0)
        state.theta[rows] = theta
        # P⁺ = ½(Q + Qᵀ), Q = (P − k·(Pφ)(Pφ)ᵀ)/λ − δ·P² + β·I: P² by BLAS, the rest in one
        # compiled pass, in cache-sized blocks of rows (the bits do not depend on the block)
        g = Pphi[rows]
        square = np.empty((min(self._BLOCK, rows.size), self.n, self.n))  # one block's P²
        whole = rows.size == P.shape[0]  # every row updates: P²'s blocks read views of P
        for a in range(0, rows.size, self._BLOCK):
            b = min(a + self._BLOCK, rows.size)
            P2 = square[: b - a]
            Pr = P[a:b] if whole else P[rows[a:b]]
            np.matmul(Pr, Pr, out=P2)
            efra_covariance(
                P,
                rows[a:b],
                P2,
                g[a:b],
                k[a:b],
                c.forgetting,
                c.efra_delta,
                c.efra_beta,
            )
        state.steps[...] += ok
        return state, e


class LastLayerRLS:
    """One regression run by :class:`RLSLaw`, keeping its own state (standalone use, analyses
    and tests; controllers keep the state in their state tree instead).

    Args:
        theta0: the offline last layer.
        config: :class:`RLSConfig`.
    """

    def __init__(self, theta0: np.ndarray, config: RLSConfig | None = None):
        self.law = RLSLaw(theta0, config)
        self.config = self.law.config
        self.n, self.m = self.law.n, self.law.m
        self.reset()

    def reset(self) -> None:
        """Back to the offline layer and the prior covariance, as after construction."""
        self.state = self.law.init_one()

    def update(self, phi: np.ndarray, y: np.ndarray) -> np.ndarray:
        """One step (:meth:`RLSLaw.update_one`); returns the innovation before the update."""
        self.state, e = self.law.update_one(self.state, phi, y)
        return e

    @property
    def theta0(self) -> np.ndarray:
        return self.law.theta0

    @property
    def theta(self) -> np.ndarray:
        return self.state.theta

    @property
    def steps(self) -> int:
        return self.state.steps

    @property
    def cap_hits(self) -> int:
        return self.state.cap_hits

    @property
    def rejected(self) -> int:
        return self.state.rejected

    @property
    def last_innovation(self) -> np.ndarray:
        return self.state.last_innovation

    @property
    def warmup_done(self) -> bool:
        return bool(self.law.warmup_done(self.state))

    @property
    def applied(self) -> np.ndarray:
        """The layer the controller uses: the offline one during warm-up, the estimate after."""
        return self.law.applied_one(self.state)

    @property
    def trace(self) -> float:
        """``tr P``."""
        return self.law.trace(self.state)

    @property
    def P(self) -> np.ndarray:
        """The covariance as a full symmetric matrix (a copy; for analysis and tests)."""
        return self.law.covariance(self.state)


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
