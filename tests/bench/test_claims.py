"""fusionviz.bench.claims: the words for a time ratio, when a claim is established, fastest or tied."""

from __future__ import annotations

import pytest

from fusionviz.bench import claims
from fusionviz.bench.claims import Entry, fastest, ratio_words, speed_claim, verdict


@pytest.mark.parametrize(("ratio", "words"), [
    pytest.param(0.3853, "2.6× faster (61% less time)", id="ratio_0.385_is_2.6x_faster_not_61pct_faster"),
    pytest.param(0.5, "2.0× faster (50% less time)", id="half_the_time"),
    pytest.param(0.8, "1.25× faster (20% less time)", id="two_decimals_below_2x"),
    pytest.param(1 / 1.1, "1.1× faster (9% less time)", id="trailing_zero_dropped"),
    pytest.param(1.3, "1.3× slower (30% more time)", id="slower"),
    pytest.param(2.0, "2.0× slower (100% more time)", id="twice_the_time"),
    pytest.param(0.97, "1.03× faster (3% less time)", id="small_gain_keeps_two_decimals"),
    pytest.param(0.9996, "1.0004× faster (0.04% less time)", id="tiny_gain_never_reads_1.0x_or_0pct"),
    pytest.param(0.05, "20× faster (95% less time)", id="large_factor_whole"),
    pytest.param(1.0, "the same time", id="equal"),
])
def test_ratio_words(ratio, words):
    assert ratio_words(ratio) == words


def test_a_percentage_is_always_of_time_never_faster():
    for r in (0.1, 0.385, 0.9, 1.1, 3.0):
        text = ratio_words(r)
        assert "% faster" not in text and "% slower" not in text
        assert text.endswith(("less time)", "more time)"))


def test_an_interval_that_holds_1_is_no_measurable_difference():
    # The tune run a user saw: x0.909 of the original, interval [0.543, 1.026].
    text = speed_claim(0.909, 0.543, 1.026)
    assert text == "no measurable difference (ratio 0.909, 95% interval [0.543, 1.026])"
    assert "faster" not in text
    assert verdict(0.909, 0.543, 1.026) == claims.NO_DIFFERENCE
    assert speed_claim(1.2, 0.98, 1.5, with_figures=False) == "no measurable difference"


def test_faster_and_slower_need_the_interval_to_exclude_1():
    assert speed_claim(0.3853, 0.371, 0.402) == \
        "2.6× faster (61% less time; ratio 0.385, 95% interval [0.371, 0.402])"
    assert speed_claim(1.3, 1.2, 1.4, with_figures=False) == "1.3× slower (30% more time)"
    assert verdict(1.3, 1.2, 1.4) == claims.SLOWER and verdict(0.5, 0.4, 0.6) == claims.FASTER


def test_a_ratio_without_an_interval_establishes_nothing():
    assert verdict(0.5, None, None) == claims.NOT_ESTABLISHED
    assert speed_claim(0.5, None, None) == "not established (ratio 0.500, no interval)"
    assert speed_claim(None, None, None) == "not established"


def test_overlapping_intervals_are_tied_not_fastest():
    rank = fastest([Entry("c", 0.7, 0.65, 0.75), Entry("a", 0.5, 0.45, 0.55), Entry("b", 0.52, 0.5, 0.6)])
    assert rank.best.name == "a" and rank.is_tie and rank.names() == ["a", "b"]
    assert rank.describe() == "a and b are tied for fastest (their 95% intervals overlap)"
    assert "the fastest is" not in rank.describe()


def test_apart_intervals_name_one_fastest():
    rank = fastest([Entry("a", 0.5, 0.45, 0.49), Entry("b", 0.52, 0.5, 0.6)])
    assert not rank.is_tie and rank.describe() == "the fastest is a"
    assert fastest([]).describe() == "nothing ran"


def test_join_names():
    assert claims.join_names(["a"]) == "a"
    assert claims.join_names(["a", "b", "c"]) == "a, b and c"
