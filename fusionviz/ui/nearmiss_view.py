"""Near misses on the Graph page: one drawn on the graph, every other one a pick away.

Rules (the code points back to them):

1. A near miss is named ``PASS:INDEX`` (the INDEX-th near miss in that pass's report of the
   current pipeline); the one shown lives in the session (``state.NEAR_MISS``) and the URL
   (``?nearmiss=fold_batchnorm:0``; ``all`` draws every near miss of the selected passes on
   the compared pair, each where its nodes are drawn). A name the current pipeline does not
   have is dropped and said so.
2. Showing one compares the snapshot before that pass with the one after it (``step:K``): the
   near miss's nodes are nodes of the model the pass got. Choosing another pair to compare
   afterwards clears the near miss. Both panes are cut to the site's
   neighbourhood, the matched nodes outlined dashed in violet and the node that blocked the
   rewrite marked pink with the reason in its label (``graphview.build`` rule 7).
3. A banner above the panes says which pass, the reason and the hint, with a button that clears
   it; a picker lists the near misses of every selected pass (the Passes page opens one with
   :func:`show`).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import streamlit as st

from fusionviz.ui import common, state

logger = logging.getLogger(__name__)

URL_PARAM = "nearmiss"
URL_SEEN = "fv_graph_url_nearmiss"
PICK = "graph_nearmiss_pick"
FRESH = "fv_graph_nearmiss_fresh"  # a near miss just chosen (a button, a pick, a link): its step is compared


@dataclasses.dataclass(frozen=True)
class Shown:
    """The near miss drawn (rule 1): its name, the pass, the record and the step it belongs to."""

    ident: str
    pass_name: str
    title: str
    near: Any  # fusionviz.passes.nearmiss.NearMiss
    step: int

    def option(self) -> tuple[tuple[str, ...], str | None, str]:
        """One entry of ``RenderOptions.near_misses`` (rule 2)."""
        return self.near.nodes, self.near.blocker, self.near.reason


ALL = "all"


def listing(result: Any) -> list[Shown]:
    """Every near miss of the pipeline ``result``, pass by pass."""
    out = []
    for k, rep in enumerate(result.reports, start=1):
        for j, near in enumerate(rep.near_misses):
            out.append(Shown(f"{rep.name}:{j}", rep.name, rep.title, near, k))
    return out


def find(result: Any, ident: str | None) -> Shown | None:
    if not ident:
        return None
    return next((s for s in listing(result) if s.ident == ident), None)


def show(ident: str | None, step: int | None = None) -> None:
    """Draw near miss ``ident`` (None: none) on the Graph page (rules 1, 2)."""
    st.session_state[state.NEAR_MISS] = ident or None
    st.session_state[FRESH] = bool(ident)
    if ident and step is not None:
        st.session_state[state.COMPARE] = f"step:{step}"
        st.session_state[state.FOCUS] = None
        st.session_state[state.SELECTED] = None
        st.session_state[state.BODY] = None


def current(result: Any) -> Shown | None:
    """The near miss to draw, or None; a name the pipeline does not have is dropped (rule 1)."""
    ident = st.session_state.get(state.NEAR_MISS)
    if ident == ALL:
        return None
    shown = find(result, ident)
    fresh = st.session_state.pop(FRESH, False)
    if ident and shown is None:
        st.session_state[state.NEAR_MISS] = None
        st.info(f"The near miss `{ident}` is not in the current selection of passes; showing the graph without it.")
    elif shown is not None and st.session_state.get(state.COMPARE) != f"step:{shown.step}":
        if not fresh:  # the person chose another pair to compare: the near miss goes
            st.session_state[state.NEAR_MISS] = None
            return None
        st.session_state[state.COMPARE] = f"step:{shown.step}"
    return shown


def from_url() -> None:
    """A ``?nearmiss=`` the page has not seen yet becomes the near miss shown."""
    wanted = common.url_news(URL_PARAM, URL_SEEN)
    if wanted:
        st.session_state[state.NEAR_MISS] = wanted
        st.session_state[FRESH] = True


def to_url() -> None:
    """The URL says which near miss is drawn: ``nearmiss`` set, or removed."""
    common.to_url(URL_PARAM, st.session_state.get(state.NEAR_MISS), URL_SEEN)


def label(s: Shown) -> str:
    where = f"at {s.near.blocker}" if s.near.blocker else "whole pass"
    return f"{s.pass_name} · {where}: {s.near.reason}"


def overlay(result: Any, shown: Shown | None) -> tuple:
    """``RenderOptions.near_misses`` for both panes: the one shown, or all of them (rule 1)."""
    if shown is not None:
        return (shown.option(),)
    if st.session_state.get(state.NEAR_MISS) == ALL:
        return tuple(s.option() for s in listing(result))
    return ()


_NONE = "(no near miss drawn)"


def _all_label(n: int) -> str:
    return f"All {n} near misses of the selected passes"


def _picked(options: list[Shown]) -> None:
    choice = st.session_state.get(PICK)
    if choice == _all_label(len(options)):
        st.session_state[state.NEAR_MISS] = ALL
        return
    shown = next((s for s in options if label(s) == choice), None)
    show(shown.ident if shown else None, shown.step if shown else None)


def picker(result: Any, shown: Shown | None) -> None:
    """Rule 3: the near misses of every selected pass, to draw one or all."""
    options = listing(result)
    if not options:
        return
    labels = [_NONE, _all_label(len(options))] + [label(s) for s in options]
    if st.session_state.get(state.NEAR_MISS) == ALL:
        st.session_state[PICK] = labels[1]
    else:
        st.session_state[PICK] = label(shown) if shown is not None else _NONE
    st.selectbox(f"Near misses ({len(options)})", labels, key=PICK, on_change=_picked, args=(options,),
                 label_visibility="collapsed",
                 help="Where a selected pass almost rewrote the graph, and what stopped it. Pick one to "
                      "draw it: matched nodes dashed violet, the node that blocked the rewrite pink.")


def banner(shown: Shown | None) -> None:
    """Rule 3: which pass, why it did not fire here, and what would make it fire."""
    if shown is None:
        return
    near = shown.near
    where = f" at **`{near.blocker}`**" if near.blocker else ""
    text = f"**Near miss of {shown.title}** (`{shown.pass_name}`){where}: {near.reason}."
    if near.hint:  # no kernel: nothing here makes it fire; the hint says where it is fused
        text += f" **{'Elsewhere' if near.kind == 'no_kernel' else 'What would make it fire'}:** {near.hint}."
    if near.nodes:
        text += f" Matched so far: {', '.join(f'`{n}`' for n in near.nodes)}."
    cols = st.columns([12, 2], vertical_alignment="center")
    cols[0].warning(text, icon=":material/troubleshoot:")
    if cols[1].button("Clear near miss", key="nearmiss_clear", icon=":material/close:"):
        show(None)
        st.rerun()
