"""What a measured time ratio lets fusionviz say, in words.

A *ratio* is a variant's time over its baseline's time (the paired ratio of
:func:`fusionviz.bench.whatif.paired_ratio`: the median over interleaved rounds), with the 95%
interval of that median. Every place that shows a speed number in words (the ``bench`` and
``tune`` commands, the Benchmark page's tables and charts, the what-if effects, the case
studies) goes through this module, so one ratio reads the same everywhere.

Rules:

1. **Words for a ratio** (:func:`ratio_words`): a ratio r below 1 means the variant takes r of
   the time: ``2.6× faster (61% less time)`` for r = 0.385; above 1, ``1.3× slower (30% more
   time)`` for r = 1.3. The factor has two decimals below 2× (``1.25× faster`` for r = 0.8),
   one below 10×, none above, and never reads ``1.0×``; the percentage is whole unless it would
   read ``0%``. A percentage is always a share of *time*; "N% faster" is never said
   (for r = 0.385 it would have to mean 61% less time, or 160% more throughput).
2. **A claim needs its interval** (:func:`verdict`, :func:`speed_claim`): "faster" or "slower"
   only when the 95% interval of the ratio excludes 1; an interval that holds 1 reads ``no
   measurable difference (ratio X, 95% interval [a, b])``. A ratio without an interval
   establishes nothing (``not established``).
3. **Fastest or tied** (:func:`fastest`): among several variants compared with one baseline,
   the one with the lowest ratio is *the fastest* only when its interval overlaps no other's;
   otherwise it is *tied* with every variant whose interval overlaps its own, and the tied set
   is named.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence

logger = logging.getLogger(__name__)

FASTER = "faster"
SLOWER = "slower"
NO_DIFFERENCE = "no measurable difference"
NOT_ESTABLISHED = "not established"


def _trim(x: float, decimals: Sequence[int], unit: str) -> str:
    """``x`` with the fewest of ``decimals`` that do not print it as the no-change value
    (``1.0`` for a factor, ``0`` for a percentage); trailing zeros after the first decimal are
    dropped (``1.30`` reads ``1.3``)."""
    dull = 1.0 if unit == "×" else 0.0
    text = ""
    for d in decimals:
        text = f"{x:.{d}f}"
        if "." in text:
            text = text.rstrip("0")
            text += "0" if text.endswith(".") else ""
        if float(text) != dull:
            break
    return text + unit


def _factor(f: float) -> str:
    """Two decimals below 2× (about the 1% step of the percentage beside it), one below 10×."""
    return _trim(f, (0,) if f >= 10 else (1, 2, 3, 4) if f >= 2 else (2, 3, 4), "×")


def _percent(p: float) -> str:
    return _trim(p, (0, 1, 2), "%")


def ratio_words(ratio: float, detail: str = "") -> str:
    """Rule 1: ``2.6× faster (61% less time)``, ``1.3× slower (30% more time)`` or ``the same
    time``.

    Args:
        ratio: variant time / baseline time (positive).
        detail: appended inside the parentheses after ``; `` (e.g. the ratio and its interval).

    Returns:
        The words; they say nothing about whether the difference is established (rule 2).
    """
    more = f"; {detail}" if detail else ""
    if ratio <= 0:
        return f"no ratio{f' ({detail})' if detail else ''}"
    if ratio < 1:
        return f"{_factor(1.0 / ratio)} faster ({_percent(100.0 * (1.0 - ratio))} less time{more})"
    if ratio > 1:
        return f"{_factor(ratio)} slower ({_percent(100.0 * (ratio - 1.0))} more time{more})"
    return f"the same time{f' ({detail})' if detail else ''}"


def figures(ratio: float, ci_low: float | None, ci_high: float | None) -> str:
    """``ratio 0.385, 95% interval [0.371, 0.402]`` (or ``ratio 0.385, no interval``)."""
    if ci_low is None or ci_high is None:
        return f"ratio {ratio:.3f}, no interval"
    return f"ratio {ratio:.3f}, 95% interval [{ci_low:.3f}, {ci_high:.3f}]"


def verdict(ratio: float | None, ci_low: float | None, ci_high: float | None) -> str:
    """Rule 2: :data:`FASTER`, :data:`SLOWER`, :data:`NO_DIFFERENCE` or :data:`NOT_ESTABLISHED`."""
    if ratio is None or ci_low is None or ci_high is None:
        return NOT_ESTABLISHED
    if ci_high < 1.0:
        return FASTER
    if ci_low > 1.0:
        return SLOWER
    return NO_DIFFERENCE


def speed_claim(ratio: float | None, ci_low: float | None, ci_high: float | None, *,
                with_figures: bool = True) -> str:
    """Rules 1 and 2 in one phrase, for a variant against its baseline.

    Args:
        ratio: variant time / baseline time, or None when there is none.
        ci_low: lower end of the ratio's 95% interval (None: no interval).
        ci_high: upper end of the ratio's 95% interval.
        with_figures: add the ratio and its interval (leave them out where they have columns
            of their own).

    Returns:
        ``2.6× faster (61% less time; ratio 0.385, 95% interval [0.371, 0.402])``,
        ``no measurable difference (ratio 1.100, 95% interval [0.543, 1.026])``,
        ``not established (ratio 0.900, no interval)``, or without figures ``2.6× faster (61%
        less time)``, ``no measurable difference``, ``not established``.
    """
    if ratio is None:
        return NOT_ESTABLISHED
    word = verdict(ratio, ci_low, ci_high)
    nums = figures(ratio, ci_low, ci_high) if with_figures else ""
    if word in (FASTER, SLOWER):
        return ratio_words(ratio, nums)
    return f"{word} ({nums})" if nums else word


@dataclasses.dataclass(frozen=True)
class Entry:
    """One contender of a :func:`fastest` comparison: its name and its ratio to the common
    baseline, with the ratio's 95% interval."""

    name: str
    ratio: float
    ci_low: float | None = None
    ci_high: float | None = None

    def low(self) -> float:
        return self.ratio if self.ci_low is None else self.ci_low

    def high(self) -> float:
        return self.ratio if self.ci_high is None else self.ci_high


@dataclasses.dataclass(frozen=True)
class Ranking:
    """Rule 3's answer.

    Attributes:
        best: the contender with the lowest ratio (None when there was none).
        tied: every contender whose interval overlaps ``best``'s, ``best`` first; one element
            when ``best`` is the fastest outright.
    """

    best: Entry | None
    tied: tuple[Entry, ...] = ()

    @property
    def is_tie(self) -> bool:
        return len(self.tied) > 1

    def names(self) -> list[str]:
        return [e.name for e in self.tied]

    def describe(self) -> str:
        """``the fastest is X`` / ``X and Y are tied for fastest (their 95% intervals overlap)``."""
        if self.best is None:
            return "nothing ran"
        if not self.is_tie:
            return f"the fastest is {self.best.name}"
        return f"{join_names(self.names())} are tied for fastest (their 95% intervals overlap)"


def join_names(names: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    names = list(names)
    if len(names) <= 1:
        return "".join(names)
    return ", ".join(names[:-1]) + f" and {names[-1]}"


def overlap(a: Entry, b: Entry) -> bool:
    """True when the 95% intervals of ``a`` and ``b`` share a point (rule 3)."""
    return a.low() <= b.high() and b.low() <= a.high()


def fastest(entries: Sequence[Entry]) -> Ranking:
    """Rule 3: the fastest of ``entries``, or the set tied with the lowest ratio.

    Args:
        entries: contenders, each with its ratio to one common baseline (an entry without an
            interval is taken at its ratio alone).

    Returns:
        A :class:`Ranking`; ``tied`` is in order of ratio.
    """
    ordered = sorted(entries, key=lambda e: e.ratio)
    if not ordered:
        return Ranking(None, ())
    best = ordered[0]
    return Ranking(best, (best, *(e for e in ordered[1:] if overlap(best, e))))
