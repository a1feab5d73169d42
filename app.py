"""fusionviz app entry: page config, navigation and the guided tour's sidebar; pages live in fusionviz/ui/.

Run: ``streamlit run app.py -- --sample resnet_ts`` (or ``-- --model PATH``).

Every page has its own URL (/model, /graph, /passes, /bench, /zoo, /learn). The root URL is a hidden
page that opens the Graph page with the query parameters it was given: Streamlit serves the
default page at the root only, so a default Graph page would make /graph a "page not found".
"""

import streamlit as st

from fusionviz.ui import state

st.set_page_config(page_title="fusionviz", page_icon=":material/hub:", layout="wide")
state.init()

GRAPH = st.Page("fusionviz/ui/graph_page.py", title="Graph", icon=":material/account_tree:", url_path="graph")


def _home() -> None:
    """The root URL: the Graph page, keeping the link's query parameters."""
    st.switch_page(GRAPH, query_params={k: st.query_params.get_all(k)[-1] for k in st.query_params})


pages = [
    st.Page(_home, title="fusionviz", url_path="home", default=True, visibility="hidden"),
    st.Page("fusionviz/ui/model_page.py", title="Model", icon=":material/upload_file:", url_path="model"),
    GRAPH,
    st.Page("fusionviz/ui/passes_page.py", title="Passes (what-if)", icon=":material/tune:", url_path="passes"),
    st.Page("fusionviz/ui/bench_page.py", title="Benchmark", icon=":material/speed:", url_path="bench"),
    st.Page("fusionviz/ui/zoo_page.py", title="Zoo", icon=":material/grid_on:", url_path="zoo"),
    st.Page("fusionviz/ui/learn_page.py", title="Learn", icon=":material/school:", url_path="learn"),
]
st.navigation(pages).run()

if st.session_state.get(state.TOUR) is not None:
    from fusionviz.ui import common, learn_page

    with st.sidebar, common.guard("drawing the guided tour"):
        learn_page.tour_sidebar()
