# The two commands a new user needs: `make run` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PORT ?= 8000
# The suite runs against the real PostgreSQL (and Redis) it needs; override to point elsewhere.
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/test
# The suite runs in this many processes (pytest-xdist, tests/parallel.py): most of its time is
# system tests waiting on real processes and clocks, not the CPU. 0 runs everything in this
# process (one file, a debugger).
TEST_PROCESSES ?= 3
# Compiled bytecode (and pytest's rewritten test modules) is kept under var/pycache, outside the
# source tree: without it every test process (and every server a test starts) compiles the
# project from source again, a third of make test-fast's time (bench/README.md, "The fast loop").
unexport PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX ?= $(CURDIR)/var/pycache

.PHONY: install run serve relay test test-fast lint docs bench clean wire

$(VENV)/.installed: requirements.txt requirements-dev.txt sdk/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.txt -e ./sdk
	touch $@

install: $(VENV)/.installed

# Local runs sign sessions with a random key generated once under VAR_DIR (mode 0600), which
# later manage.py commands in this checkout read too; a deployment sets SECRET_KEY instead
# (docs/security.md, "Secret key"; controlplane/secret_key.py).
LOCAL_SECRET_KEY = $(or $(VAR_DIR),var)/secret_key
run test test-fast lint bench: $(LOCAL_SECRET_KEY)
$(LOCAL_SECRET_KEY): | $(VENV)/.installed
	$(PY) -m controlplane.secret_key $@

run: install
	mkdir -p $${VAR_DIR:-var}
	$(PY) manage.py migrate --no-input
	$(PY) manage.py sync_presets
	$(PY) manage.py collectstatic --no-input -v0
	$(PY) -m controlplane.run_local 127.0.0.1:$(PORT)  # web + Celery worker with beat, then the admin's sign-in

# The production web process: the ASGI read front plus Django under granian (chosen by
# measurement, bench/README.md); static files served by granian from var/static.
WEB_WORKERS ?= 2
# Open connections per worker (granian's --backpressure counts connections, idle keep-alive
# ones and held long polls included; its default, backlog / workers, would cap a 2-worker
# server near 1,000 SDK instances): size it above the fleet's connections per worker. The app
# holds at most LONG_POLL_MAX_HELD (16384) long polls per worker. --http 1: the SDK and proxies
# speak HTTP/1.1, and not checking each connection for HTTP/2 halves granian's memory per
# held connection (bench/long_polls.py: 10,000 held polls on 2 workers).
WEB_MAX_REQUESTS ?= 20480
# granian's allocator (jemalloc, built into its extension): freed pages go back to the system at
# once, not ten seconds later, so what a fan-out to the whole fleet frees is not counted
# against the held polls: 18.9-19.3 KB per held poll at the peak after changes, where
# jemalloc's defaults kept 24.2-27.4 (bench/README.md, "The fleet as the SDK polls").
# The Dockerfile and the relay (relay/__main__.py) set the same.
WEB_MALLOC_CONF ?= dirty_decay_ms:0,muzzy_decay_ms:0
serve: install
	$(PY) manage.py collectstatic --no-input -v0
	env _RJEM_MALLOC_CONF=$(WEB_MALLOC_CONF) $(VENV)/bin/granian --interface asgi --host 0.0.0.0 --port $(PORT) --workers $(WEB_WORKERS) \
		--http 1 --no-ws --respawn-failed-workers --backlog $(WEB_MAX_REQUESTS) --backpressure $(WEB_MAX_REQUESTS) \
		--static-path-route /static --static-path-mount $${VAR_DIR:-var}/static \
		controlplane.asgi:application

# A relay (docs/relays.md): the services' read API from UPSTREAM, with no database. Needs a
# service token of the upstream in RELAY_TOKEN.
RELAY_PORT ?= 8100
relay: install
	RELAY_UPSTREAM=$${RELAY_UPSTREAM:-http://127.0.0.1:$(PORT)} $(PY) -m relay --port $(RELAY_PORT)

# The whole suite; it ends with its 30 slowest set-ups and tests, where its time goes.
test: install
	DATABASE_URL=$(TEST_DATABASE_URL) $(PY) -m pytest -n $(TEST_PROCESSES) --dist loadgroup --durations=30 $(PYTEST_ARGS)

# The loop while changing code: every test but the system tests (they start real processes,
# browsers or clusters, or commit for one to read: tests/parallel.py), the property-based ones
# with fewer examples. CI runs the whole suite (`make test`).
test-fast: install
	DATABASE_URL=$(TEST_DATABASE_URL) FUZZ_EXAMPLES=$${FUZZ_EXAMPLES:-20} $(PY) -m pytest -n $(TEST_PROCESSES) \
		--dist loadgroup -m "not system and not slow" $(PYTEST_ARGS)

# ruff (lint and format), mypy (mypy.ini: django-stubs for the apps, strict for the SDK) and
# import-linter (.importlinter: the layers of docs/ARCHITECTURE.md). .ci/run runs it.
lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy controlplane http_api pages read_path commands worker chatops audit presets relay sdk/chainclient
	$(VENV)/bin/lint-imports --no-cache

# The documentation site (mkdocs.yml) into var/site: strict, so a broken link or anchor, or a
# page left out of the nav, fails it. NO_MKDOCS_2_WARNING: Material's banner on every build
# about its end of life (May 2027), which is not about these pages.
docs: install
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

BENCHMARKS = sdk_current.py router_overhead.py breaker_recovery.py stream_overhead.py read_throughput.py select_latency.py propagation.py long_polls.py promises.py provider_health_ingest.py history_pages.py export_history.py signing.py relay.py
bench: install
	for script in $(BENCHMARKS); do echo "== bench/$$script"; $(PY) bench/$$script || exit 1; done
	$(PY) bench/propagation.py --mode poll
	cd sdk-ts && npm ci --no-audit --no-fund && npm run build
	$(PY) bench/propagation.py --client typescript
	CHAINCLIENT_PYTHON=$(PY) node bench/ts_stream_overhead.mjs

# What the control plane and the SDK agree on is written once, in the SDK; the server keeps a
# copy so that it never imports the SDK (tests/test_wire.py fails when the two differ).
wire: presets/wire.py
presets/wire.py: sdk/chainclient/wire.py
	{ echo '# Generated from sdk/chainclient/wire.py by `make wire`: edit that file, then run `make wire`.'; cat $<; } > $@

# The conformance tables in sdk/README.md and sdk-ts/README.md are test runs' output
# (sdk/tests/test_conformance.py and sdk-ts/test/conformance.test.mjs fail when theirs is
# stale): this rewrites both from fresh runs.
conformance: install
	CONFORMANCE_WRITE=1 $(PY) -m pytest -p no:django sdk/tests/test_conformance.py -q
	cd sdk-ts && npm ci --no-audit --no-fund && npm run build && CONFORMANCE_WRITE=1 node --test test/conformance.test.mjs

clean:
	rm -rf $(VENV) var
