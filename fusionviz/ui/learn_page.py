"""Learn page: the concepts of fusion and graph optimization, each tied to a live example.

Each concept names a sample, the passes that show it (by pass-name keywords or category, so a
renamed or added pass is picked up), and a view. *Show me* loads the sample, selects the passes,
runs the pipeline, focuses the graph on the first change those passes made, and opens the view.
The guided tour walks the same steps with next/previous in the sidebar of every page.
"""

from __future__ import annotations

import dataclasses
import logging

import streamlit as st

from fusionviz import errors
from fusionviz.ui import cache, common, state

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Concept:
    """One concept and its live example."""

    key: str
    title: str
    text: str
    samples: tuple[str, ...]  # first one that exists is used
    pass_keys: tuple[str, ...] = ()  # substrings of pass names
    categories: tuple[str, ...] = ()  # whole categories
    view: str = "graph"  # page key from common.PAGES
    compare: str | None = None  # fixed compare choice (e.g. "ort:all"); else the first change
    note: str = ""


CONCEPTS: tuple[Concept, ...] = (
    Concept(
        "operation_fusion", "Operation fusion",
        "Adjacent ops become one kernel, and the tensors between them disappear. Conv → "
        "BatchNormalization → Relu becomes one Conv with folded weights and a fused activation: "
        "`W' = W·γ/σ`, `b' = (b-μ)·γ/σ + β`.",
        ("resnet_ts", "mobilenet", "textbook"),
        pass_keys=("batchnorm", "bn", "conv_act", "conv_relu", "activation", "conv_add", "conv_bias"),
    ),
    Concept(
        "in_place", "In-place operation",
        "A result overwrites its input's buffer when nobody else reads the input. The static memory "
        "plan shows tensor lifetimes: fewer, shorter-lived intermediates mean a lower peak with "
        "buffer reuse. Watch the *Intermediate tensors* and *Peak activations* deltas.",
        ("mobilenet", "resnet_ts"), categories=("simplify", "fuse"), view="passes",
    ),
    Concept(
        "stride_padding", "Stride / padding fusion",
        "An explicit Pad before a Conv is merged into the Conv's own `pads`, so the padded copy "
        "of the input is never written. Blocked layouts (NCHWc) change the memory access pattern "
        "the same way: see the layout pass.",
        ("textbook", "resnet_ts"), pass_keys=("pad",),
    ),
    Concept(
        "pattern", "Pattern optimization",
        "Recognise a pattern and use a tuned kernel: MatMul + Add becomes one Gemm (SGEMM with the "
        "bias in the epilogue); MatMul with a Transpose or a scale becomes FusedMatMul.",
        ("textbook", "bert_ts"), pass_keys=("gemm", "matmul_add", "fuse_matmul_transpose"),
    ),
    Concept(
        "simplification", "Graph simplification",
        "Remove nodes and edges that do nothing: Identity, Dropout at inference, x·1, x+0, no-op "
        "Casts, dead branches, and subgraphs of constants computed ahead of time.",
        ("textbook", "resnet_dynamo"), categories=("simplify",),
    ),
    Concept(
        "node_merging", "Node merging",
        "Adjacent nodes of the same kind merge: Transpose pairs cancel, Reshape/Cast chains collapse, "
        "duplicate subexpressions and initializers become one.",
        ("textbook", "bert_dynamo"),
        pass_keys=("transpose", "reshape", "cast", "eliminate_common_subexpressions", "common_sub", "duplicate", "merge"),
    ),
    Concept(
        "static_compilation", "Static compilation",
        "Optimize once, before run time, and save the result. Here: the graph onnxruntime itself "
        "produces at level 'all' (saved with optimized_model_filepath), drawn beside the original.",
        ("resnet_ts",), categories=("simplify", "fuse"), compare="ort:all",
    ),
    Concept(
        "mixed_precision", "Mixed precision",
        "FP16 or INT8 weights and arithmetic: smaller and often faster, but the numbers change. "
        "Verification reports the error instead of failing; benchmark the variant to see speed vs "
        "error.",
        ("resnet_ts", "mobilenet"), categories=("precision",), view="passes",
    ),
    Concept(
        "compilers", "TensorRT and TVM",
        "Compiler stacks fuse whole regions into generated kernels (TensorRT layers, TVM's operator "
        "fusion into primitive functions) and pick layouts per target. fusionviz works at the ONNX "
        "level: its references are onnxruntime's own levels and the execution providers this machine "
        "has; compare them on the Benchmark page with 'Original under every ORT level'.",
        ("resnet_ts",), categories=("simplify", "fuse"), view="bench",
    ),
)


def _sample_for(c: Concept) -> str | None:
    from fusionviz import samples

    names = samples.sample_names()
    return next((s for s in c.samples if s in names), names[0] if names else None)


def passes_for(c: Concept) -> list[str]:
    """The pass names that show concept ``c`` among the registered passes."""
    from fusionviz.passes import all_passes

    out = []
    for p in all_passes():
        n = p.name.lower()
        if p.category.value in c.categories or any(k in n for k in c.pass_keys):
            out.append(p.name)
    return out


def apply(c: Concept) -> str:
    """Set model, passes and view for concept ``c``; return the page key to open."""
    sample = _sample_for(c)
    if sample is None:
        raise errors.ModelLoadError("No sample models are installed, so this example cannot be shown.")
    origin = st.session_state.get(state.ORIGIN) or {}
    names = passes_for(c)
    if origin.get("kind") == "sample" and origin.get("name") == sample:
        state.set_passes(names)
        st.session_state[state.FOCUS] = None
        st.session_state[state.SELECTED] = None
    else:
        state.set_model(cache.load_sample(sample), {"kind": "sample", "name": sample}, passes=names)
    st.session_state[state.COMPARE] = "current"
    if c.compare:
        st.session_state[state.COMPARE] = c.compare
    elif c.view == "graph":
        result = cache.run(state.model(), state.passes(), state.shapes_key())
        for k, rep in enumerate(result.reports, start=1):
            if rep.changes:
                ch = rep.changes[0]
                target = (ch.outputs[0] if ch.outputs else None) or (ch.inputs[0] if ch.inputs else None)
                st.session_state[state.COMPARE] = f"step:{k}"
                st.session_state[state.FOCUS] = target
                st.session_state[state.SELECTED] = target
                break
    st.session_state[state.MESSAGE] = f"{c.title}: {sample} with {len(names)} passes. {c.note}".strip()
    return c.view


def _show(c: Concept) -> None:
    view = apply(c)
    common.switch(view, focus=st.session_state.get(state.FOCUS) if view == "graph" else None)


# ------------------------------------------------------------------ guided tour

TOUR_INTRO = ("Welcome", "This tour walks through what graph optimization does, one concept at a "
              "time, on live sample models. Use Next / Previous in the sidebar; each step sets the "
              "model, the passes and the view.")


def _tour_go(i: int) -> None:
    i = max(0, min(len(CONCEPTS) - 1, i))
    st.session_state[state.TOUR] = i
    _show(CONCEPTS[i])


def tour_sidebar() -> None:
    """The tour's current step with next/previous buttons (app.py draws it in every page's sidebar)."""
    i = st.session_state.get(state.TOUR)
    if i is None:
        return
    c = CONCEPTS[i]
    st.divider()
    st.markdown(f"**Tour {i + 1}/{len(CONCEPTS)}: {c.title}**")
    st.caption(c.text)
    b = st.columns(3)
    if b[0].button("", icon=":material/arrow_back:", key="tour_prev", disabled=i == 0, help="Previous step"):
        _tour_go(i - 1)
    if b[1].button("", icon=":material/arrow_forward:", key="tour_next", disabled=i == len(CONCEPTS) - 1, help="Next step"):
        _tour_go(i + 1)
    if b[2].button("", icon=":material/close:", key="tour_exit", help="End the tour"):
        st.session_state[state.TOUR] = None
        st.rerun()


def body() -> None:
    """The Learn page."""
    st.title("Learn")
    st.markdown("Each concept from the fusion and graph-optimization literature, with a live example. "
                "**Show me** loads a sample, switches on the passes that demonstrate it and opens the "
                "view focused on the first change.")
    t1, t2 = st.columns([1, 3])
    if t1.button("Start the guided tour", icon=":material/play_arrow:", key="tour_start", type="primary", width="stretch"):
        _tour_go(0)
    t2.caption(f"{TOUR_INTRO[1]}")
    for c in CONCEPTS:
        with st.container(border=True):
            left, right = st.columns([5, 1], vertical_alignment="center")
            with left:
                st.markdown(f"**{c.title}**")
                st.markdown(c.text)
                names = passes_for(c)
                sample = _sample_for(c)
                st.caption(f"Example: sample `{sample}` · passes: "
                           + (", ".join(f"`{n}`" for n in names[:8]) + (" …" if len(names) > 8 else "")
                              if names else "none registered yet")
                           + f" · view: {c.view}")
            if right.button("Show me →", key=f"learn_{c.key}", width="stretch"):
                _show(c)
    from fusionviz.ui import case_studies_view  # the article's case studies, measured (own module)

    case_studies_view.section()


def render() -> None:
    """Draw the page under the error guard."""
    common.page("Learn", body)


if __name__ == "__main__":
    render()
