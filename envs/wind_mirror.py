"""The vector env's copy of every env's wind samples, read for a whole batch in one indexing."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from residual_quad.envs.disturbances import WindProcess, refill_blocks


class WindMirror:
    """A mirror of the current wind block of ``num_envs`` :class:`WindProcess` es.

    Each env's plant draws its wind from its own :class:`WindProcess` in blocks; the mirror keeps
    a copy of every block and its read position, so the batched physics takes the next period's
    samples of all envs in one fancy index (:meth:`take`). An env whose block runs out takes them
    from its process (which refills exactly when the single env's would) and is mirrored anew, so
    every env sees the very samples its single env would.

    Args:
        num_envs: number of envs.
        process: ``process(i)``: env ``i``'s current wind process (a new one after each reset).
    """

    def __init__(self, num_envs: int, process: Callable[[int], WindProcess]):
        self._process = process
        self._block = np.zeros((num_envs, 0, 3))  # m/s, world
        self._len = np.zeros(num_envs, dtype=np.int64)
        self._pos = np.zeros(num_envs, dtype=np.int64)
        self._src: list[tuple[object, object]] = [(None, None)] * num_envs

    def position(self, i: int) -> int:
        """Env ``i``'s read position in its block (what its process's ``position`` should be
        before the env's own plant flies a period)."""
        return int(self._pos[i])

    def mirror(self, i: int) -> None:
        """Copy env ``i``'s wind block and read position (after its reset, a refill, or a period
        its own plant flew)."""
        proc = self._process(i)
        buf = proc.block
        src_proc, src_buf = self._src[i]
        if src_proc is not proc or src_buf is not buf:
            if len(buf) > self._block.shape[1]:
                grown = np.zeros((len(self._len), len(buf), 3))
                grown[:, : self._block.shape[1]] = self._block
                self._block = grown
            self._block[i, : len(buf)] = buf
            self._len[i] = len(buf)
            self._src[i] = (proc, buf)
        self._pos[i] = proc.position

    def take(self, envs: np.ndarray, n: int) -> np.ndarray:
        """The next ``n`` wind samples of ``envs``, shape ``(len(envs), n, 3)``, m/s, world: the
        samples each env's own process would hand out."""
        pos = self._pos[envs]
        out = np.empty((len(envs), n, 3))
        fits = pos + n <= self._len[envs]
        flat = self._block.reshape(-1, 3)  # a view: sample k of env i is row i·width + k
        start = envs * self._block.shape[1] + pos
        if fits.all():  # one take along the rows (≈ 3× faster than a 2-d fancy index)
            np.take(flat, start[:, None] + np.arange(n), axis=0, out=out, mode="clip")
        else:
            j = np.flatnonzero(fits)
            out[j] = np.take(flat, start[j, None] + np.arange(n), axis=0, mode="clip")
            out[~fits] = self._take_across(envs[~fits], n)
        self._pos[envs[fits]] += n
        return out

    def _take_across(self, envs: np.ndarray, n: int) -> np.ndarray:
        """:meth:`take` for envs whose next ``n`` samples run past their block: the rest of the
        block, then the new blocks, drawn together (:func:`refill_blocks`: bit for bit each
        process's own refill); each env mirrored anew."""
        out = np.empty((len(envs), n, 3))
        procs = [self._process(i) for i in envs.tolist()]
        refill_blocks(procs)  # the mirror still holds each env's old block
        for k, (i, proc) in enumerate(zip(envs.tolist(), procs, strict=True)):
            rest = min(max(int(self._len[i] - self._pos[i]), 0), n)  # left in the old block
            out[k, :rest] = self._block[i, self._pos[i] : self._pos[i] + rest]
            proc.position = 0
            out[k, rest:] = proc.take(n - rest)  # a block shorter than that: its own refills
            self.mirror(i)
        return out
