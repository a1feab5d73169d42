"""fusionviz app entry: page config and navigation only; every page lives in fusionviz/ui/.

Run: ``streamlit run app.py -- --sample resnet_ts`` (or ``-- --model PATH``).
"""

import streamlit as st

from fusionviz.ui import state

st.set_page_config(page_title="fusionviz", page_icon="🔗", layout="wide")
state.init()

pages = [
    st.Page("fusionviz/ui/model_page.py", title="Model", icon="📦", url_path="model"),
    st.Page("fusionviz/ui/graph_page.py", title="Graph", icon="🕸️", url_path="graph", default=True),
    st.Page("fusionviz/ui/passes_page.py", title="Passes (what-if)", icon="🧩", url_path="passes"),
    st.Page("fusionviz/ui/bench_page.py", title="Benchmark", icon="⏱️", url_path="bench"),
    st.Page("fusionviz/ui/learn_page.py", title="Learn", icon="🎓", url_path="learn"),
]
st.navigation(pages).run()
