"""Latency statistics on samples whose answers are known by hand."""

from __future__ import annotations

import pytest

from fusionviz.bench.stats import LatencyStats, compute_stats, median_ci


def test_stats_of_1_to_11():
    s = compute_stats([float(x) for x in range(11, 0, -1)])  # order must not matter
    assert s.n == 11
    assert s.median_ms == 6.0
    assert s.mean_ms == 6.0
    assert s.p10_ms == pytest.approx(2.0)
    assert s.p90_ms == pytest.approx(10.0)
    assert s.iqr_ms == pytest.approx(8.5 - 3.5)
    # Binomial order-statistic interval for n=11: ranks 2 and 10 (coverage 98.8%).
    assert (s.ci_low_ms, s.ci_high_ms) == (2.0, 10.0)
    assert s.unstable  # IQR is 83% of the median


def test_median_interval_for_100_samples_uses_ranks_40_and_61():
    assert median_ci([float(x) for x in range(1, 101)]) == (40.0, 61.0)


def test_tiny_samples_interval_is_the_range():
    s = compute_stats([3.0, 1.0, 2.0])
    assert (s.ci_low_ms, s.median_ms, s.ci_high_ms) == (1.0, 2.0, 3.0)


def test_tight_samples_are_stable_and_spread_ones_are_not():
    tight = compute_stats([10.0 + 0.01 * (i % 7) for i in range(200)])
    assert not tight.unstable
    wide = compute_stats([10.0 * (1 + (i % 2)) for i in range(200)])
    assert wide.unstable


def test_as_dict_has_named_fields():
    d = compute_stats([1.0, 2.0, 3.0, 4.0]).as_dict()
    assert set(d) >= {"median_ms", "mean_ms", "p10_ms", "p90_ms", "iqr_ms", "ci_low_ms", "ci_high_ms", "n", "unstable"}


@pytest.mark.parametrize("bad", [[], [1.0, float("nan")]])
def test_bad_samples_raise(bad):
    with pytest.raises(ValueError):
        compute_stats(bad)


def test_record_is_validated_at_construction():
    with pytest.raises(ValueError):
        LatencyStats(median_ms=5, mean_ms=5, p10_ms=6, p90_ms=7, iqr_ms=1, ci_low_ms=4, ci_high_ms=6,
                     n=3, unstable=False)
