"""The Model page's op histogram labels every op (not every other one)."""

from __future__ import annotations

import json

from streamlit.testing.v1 import AppTest
from ui_helpers import APP, TIMEOUT, goto

from fusionviz import samples
from fusionviz.summary import summarize


def test_model_page_histogram_has_a_label_per_op():
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.query_params["sample"] = "resnet_ts"
    at.run()
    goto(at, "model")
    hist = summarize(samples.load_sample("resnet_ts").proto).op_histogram
    charts = [json.loads(el.proto.spec) for el in at.get("plotly_chart")]
    spec = next(c for c in charts if c["data"][0].get("orientation") == "h")
    want = sorted(hist, key=lambda op: (-hist[op], op))[:25]
    assert sorted(spec["layout"]["yaxis"]["tickvals"]) == sorted(want)
    assert spec["layout"]["height"] >= 16 * len(want)
