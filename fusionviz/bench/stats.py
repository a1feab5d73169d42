"""Latency statistics as a frozen record (like pytest-benchmark's ``stats.py``).

Rules:

1. Percentiles use linear interpolation between order statistics (numpy's default), so
   ``p10``/``median``/``p90`` of ``1..11`` are ``2``/``6``/``10``.
2. The 95% interval of the median is distribution-free: the order statistics at ranks
   ``n/2 -/+ 1.96*sqrt(n)/2`` (the normal approximation to the binomial count of samples below
   the median). Below 6 samples the interval is the sample range.
3. A result is *unstable* when the spread is large: the IQR is more than 10% of the median, or
   the 95% interval of the median reaches further than about ±5% around it (its full width is
   over 10% of the median; pyperf warns on similar thresholds). A comparison between unstable results should not be trusted below that margin.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Sequence

import numpy as np

logger = logging.getLogger(__name__)

UNSTABLE_IQR_RATIO = 0.10
UNSTABLE_CI_RATIO = 0.05
_Z95 = 1.959963984540054


@dataclasses.dataclass(frozen=True)
class LatencyStats:
    """Summary of per-inference latencies in milliseconds.

    Attributes:
        median_ms: median latency.
        mean_ms: arithmetic mean.
        p10_ms: 10th percentile.
        p90_ms: 90th percentile.
        iqr_ms: interquartile range (p75 - p25).
        ci_low_ms: lower end of the 95% interval of the median.
        ci_high_ms: upper end of the 95% interval of the median.
        n: number of timed runs (warm-up excluded).
        unstable: True when the spread is large (rule 3).
    """

    median_ms: float
    mean_ms: float
    p10_ms: float
    p90_ms: float
    iqr_ms: float
    ci_low_ms: float
    ci_high_ms: float
    n: int
    unstable: bool

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError("LatencyStats needs at least one sample")
        eps = 1e-9 * max(1.0, abs(self.median_ms))
        if not (self.p10_ms - eps <= self.median_ms <= self.p90_ms + eps):
            raise ValueError("LatencyStats: p10 <= median <= p90 violated")
        if not (self.ci_low_ms - eps <= self.median_ms <= self.ci_high_ms + eps):
            raise ValueError("LatencyStats: the median must lie inside its interval")
        if self.iqr_ms < 0:
            raise ValueError("LatencyStats: negative IQR")

    @property
    def ci_halfwidth_pct(self) -> float:
        """Half the width of the median's 95% interval, as a percentage of the median."""
        if self.median_ms <= 0:
            return 0.0
        return 50.0 * (self.ci_high_ms - self.ci_low_ms) / self.median_ms

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def median_ci(sorted_samples: Sequence[float]) -> tuple[float, float]:
    """95% interval of the median from order statistics (rule 2)."""
    n = len(sorted_samples)
    if n == 0:
        raise ValueError("no samples")
    if n < 6:
        return float(sorted_samples[0]), float(sorted_samples[-1])
    half = _Z95 * math.sqrt(n) / 2.0
    lo = max(1, int(math.floor(n / 2.0 - half)))  # 1-based rank
    hi = min(n, int(math.ceil(n / 2.0 + half + 1)))
    return float(sorted_samples[lo - 1]), float(sorted_samples[hi - 1])


def compute_stats(samples_ms: Sequence[float]) -> LatencyStats:
    """Statistics of per-run latencies (milliseconds).

    Args:
        samples_ms: timed runs, warm-up already removed.

    Returns:
        A validated :class:`LatencyStats`.

    Raises:
        ValueError: when ``samples_ms`` is empty or holds non-finite values.
    """
    arr = np.asarray(list(samples_ms), dtype=np.float64)
    if arr.size == 0:
        raise ValueError("no samples")
    if not np.all(np.isfinite(arr)):
        raise ValueError("non-finite latency sample")
    arr.sort()
    p10, p25, med, p75, p90 = (float(x) for x in np.percentile(arr, [10, 25, 50, 75, 90]))
    lo, hi = median_ci(arr)
    lo, hi = min(lo, med), max(hi, med)
    iqr = p75 - p25
    unstable = bool(
        med > 0 and (iqr / med > UNSTABLE_IQR_RATIO or (hi - lo) / med > 2 * UNSTABLE_CI_RATIO)
    )
    return LatencyStats(
        median_ms=med,
        mean_ms=float(arr.mean()),
        p10_ms=p10,
        p90_ms=p90,
        iqr_ms=iqr,
        ci_low_ms=lo,
        ci_high_ms=hi,
        n=int(arr.size),
        unstable=unstable,
    )
