# Two entry points for a newcomer (see README):
#   make run   -> venv + app on a sample model
#   make test  -> venv + dev deps + chromium (apt, when root) + the whole test suite
PY ?= $(shell command -v python3.11 >/dev/null 2>&1 && echo python3.11 || echo python3)
VENV := .venv
BIN := $(VENV)/bin
PORT ?= 8501

.PHONY: run test venv dev chromium lint samples clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

venv: $(BIN)/python
	$(BIN)/pip install -q -r requirements.txt

dev: $(BIN)/python
	$(BIN)/pip install -q -r requirements-dev.txt

chromium:
	@if [ ! -x /usr/bin/chromium ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "chromium missing: run 'sudo apt-get install -y chromium' (browser tests need it)"; exit 1; fi; \
	fi

run: venv
	$(BIN)/streamlit run app.py --server.port $(PORT) -- --sample resnet_ts

test: dev chromium
	$(BIN)/ruff check fusionviz tests app.py benchmarks sample_models
	FUSIONVIZ_REQUIRE_BROWSER=1 $(BIN)/python -m pytest -q

lint: dev
	$(BIN)/ruff check fusionviz tests app.py

samples: dev
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/python sample_models/make_samples.py

clean:
	rm -rf $(VENV) artifacts .pytest_cache
