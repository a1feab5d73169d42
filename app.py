"""fusionviz app entry: page config and navigation only; every page lives in fusionviz/ui/.

Run: ``streamlit run app.py -- --sample resnet_ts`` (or ``-- --model PATH``).
"""

import streamlit as st

from fusionviz.ui import state

st.set_page_config(page_title="fusionviz", page_icon=":material/hub:", layout="wide")
state.init()

pages = [
    st.Page("fusionviz/ui/model_page.py", title="Model", icon=":material/upload_file:", url_path="model"),
    st.Page("fusionviz/ui/graph_page.py", title="Graph", icon=":material/account_tree:", url_path="graph", default=True),
    st.Page("fusionviz/ui/passes_page.py", title="Passes (what-if)", icon=":material/tune:", url_path="passes"),
    st.Page("fusionviz/ui/bench_page.py", title="Benchmark", icon=":material/speed:", url_path="bench"),
    st.Page("fusionviz/ui/learn_page.py", title="Learn", icon=":material/school:", url_path="learn"),
]
st.navigation(pages).run()
