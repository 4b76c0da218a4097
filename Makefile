# The two set-up commands of the README. Both build .venv/ at the repo root first.
PYTHON ?= python3.11
VENV := .venv
STAMP := $(VENV)/.installed
STORE ?= ./data

.PHONY: serve test lint docs bench

# The compiled codec (Rust, maturin, native/) is the server's fast path; the pure one its fallback.
NATIVE := native/pyproject.toml native/Cargo.toml native/Cargo.lock $(wildcard native/src/*.rs)

# The lake's jars (Maven Central, and jetlake's log store built from log/compactor/logstore/)
# and SeaweedFS's `weed`, the S3 server the lake tests run; both skip what is installed.
LAKE_JARS := scripts/install-lake-jars scripts/lake-jars.pom.xml log/compactor/logstore/pom.xml \
	$(wildcard log/compactor/logstore/src/main/java/io/jetlake/delta/*.java) \
	$(wildcard sql/views_ext/*.java)

$(STAMP): pyproject.toml $(LAKE_JARS) scripts/install-weed scripts/install-nsc scripts/install-node-tools \
	scripts/node/package.json $(NATIVE)
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[dev,lake]'
	$(VENV)/bin/pip install --quiet ./native
	scripts/install-nats-cli $(VENV)/bin/nats
	scripts/install-lake-jars $(VENV)/jars
	scripts/install-weed $(VENV)/bin/weed
	scripts/install-nsc $(VENV)/bin/nsc
	scripts/install-node-tools $(VENV)/node
	touch $(STAMP)

serve: $(STAMP)
	$(VENV)/bin/jetlake serve -js -sd $(STORE) -m 8222 --lake

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict
	$(VENV)/bin/pytest -q -n 2 --dist loadfile --durations=30

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# The docs site (docs/, mkdocs.yml) into site/; --strict fails on a broken link or a page
# missing from the nav.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

bench: $(STAMP)
	$(VENV)/bin/jetlake bench
