"""Step 6's rule in step 7's words: the candidate when it beats the single backend to
recommend (onnxruntime level all, unless another backend alone beats it), else that single
backend (see :mod:`fusionviz.tune`)."""

from __future__ import annotations

from collections.abc import Sequence

from fusionviz import errors
from fusionviz.tune.records import CONFIRM_MARGIN, Confirmed, TuneConfig


def _entry(c: Confirmed):
    from fusionviz.bench.claims import Entry

    return Entry(c.config.label(), float(c.ratio), c.ci_low, c.ci_high)


def _beats(a: Confirmed, b: Confirmed) -> bool:
    """Step 6: ``a`` verified, at least :data:`CONFIRM_MARGIN` faster than ``b``, and their 95%
    intervals apart."""
    from fusionviz.bench.claims import overlap

    if not a.verified or a.ratio is None or b.ratio is None:
        return False
    return a.ratio <= b.ratio * (1 - CONFIRM_MARGIN) and not overlap(_entry(a), _entry(b))


def _against_baseline(c: Confirmed) -> str:
    """``c`` against the original @ORT all, in rule 7's words."""
    from fusionviz.bench.claims import FASTER, SLOWER, speed_claim, verdict

    if c.role == "baseline":
        return "is the original under onnxruntime level all"
    words = speed_claim(c.ratio, c.ci_low, c.ci_high)
    if verdict(c.ratio, c.ci_low, c.ci_high) in (FASTER, SLOWER):
        return f"runs {words} than the original @ORT all"
    return f"shows {words} against the original @ORT all"


def _interval(c: Confirmed) -> str:
    from fusionviz.bench.claims import figures

    return figures(float(c.ratio), c.ci_low, c.ci_high)


def recommend(candidate: TuneConfig, confirmation: Sequence[Confirmed]) -> tuple[TuneConfig, str]:
    """Step 6's rule in rule 7's words: the candidate, when it beats the single backend to
    recommend (onnxruntime level all, unless another backend alone beats it); else that single
    backend."""
    from fusionviz.bench.claims import fastest, join_names

    cand = next(c for c in confirmation if c.config == candidate)
    singles = [c for c in confirmation if c.role in ("baseline", "single") and c.verified and c.ratio is not None]
    baseline = next((c for c in singles if c.role == "baseline"), None)
    tied_note = ""
    if baseline is not None:
        better = [c for c in singles if c is not baseline and _beats(c, baseline)]
        best_single = min(better, key=lambda c: c.ratio) if better else baseline
        if better:
            rank = fastest([_entry(c) for c in better])
            if rank.is_tie:
                others = [n for n in rank.names() if n != best_single.config.label()]
                tied_note = (f" (tied with {join_names(others)} alone: 95% intervals that overlap; "
                             f"{best_single.config.label()} has the lowest ratio)")
    else:
        best_single = min(singles, key=lambda c: c.ratio) if singles else None

    if best_single is None:  # nothing single ran verified: keep the candidate only if it did
        if cand.verified and cand.ratio is not None:
            return candidate, f"confirmed: {candidate.label()} {_against_baseline(cand)}"
        raise errors.VerificationError("The confirmation run verified nothing; nothing to recommend.")
    if best_single.role == "baseline":
        single, simpler = "the original under onnxruntime level all", "the original under onnxruntime level all"
    else:
        single = f"{best_single.config.label()} alone, which {_against_baseline(best_single)}{tied_note}"
        simpler = "the single backend"
    if cand.config == best_single.config or _beats(cand, best_single):
        return candidate, f"confirmed: {candidate.label()} {_against_baseline(cand)}"
    if cand.verified and cand.ratio is not None and cand.ratio <= best_single.ratio:
        if cand.ratio > best_single.ratio * (1 - CONFIRM_MARGIN):
            return best_single.config, (
                f"the search's winner {candidate.label()} ran at ratio {cand.ratio:.3f}, within "
                f"{CONFIRM_MARGIN:.0%} of {single}: recommending {simpler} (the simpler deployment; "
                "the difference is within the noise of two runs)")
        return best_single.config, (
            f"the search's winner {candidate.label()} ({_interval(cand)}) shows no measurable difference from "
            f"{single}: their 95% intervals overlap; recommending {simpler} (the simpler deployment)")
    if cand.verified and cand.ratio is not None:
        slower = cand.ci_low is not None and best_single.ci_high is not None and cand.ci_low > best_single.ci_high
        why = (f"was slower ({_interval(cand)}) in the confirmation than" if slower else
               f"shows no measurable difference ({_interval(cand)}) in the confirmation from")
    else:
        why = (f"did not verify ({cand.note}) in the confirmation, unlike" if cand.note
               else "did not run in the confirmation, unlike")
    return best_single.config, f"the search's winner {candidate.label()} {why} {single}: recommending that"

