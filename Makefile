# The two commands: `make demo` (install, migrate, seed, serve) and `make test` (the whole suite).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000
# The address the links that seed_demo and the CLI print point at: the served one, unless
# CONDUCTOR_BASE_URL says otherwise (a proxy in front, another host name).
BASE_URL = $(or $(CONDUCTOR_BASE_URL),http://$(HOST):$(PORT))
PY_STAMP := $(VENV)/.installed
JS_STAMP := static/vendor/.installed
# The production path's services (started by .ci/run; on a laptop, point these at yours).
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/postgres
TEST_REDIS_URL ?= redis://127.0.0.1:6379/15
BENCHES := parse engine_overhead concurrency suite stored_overhead check_time celery_throughput graph_render live_latency runs_list load
BENCHES += openai_endpoint export
# Two Daphne processes and two Celery workers, 1,000 websocket clients (PostgreSQL and Redis).
BENCHES += live_fanout
BENCHES += replay
# Two 500-step runs compared: the API's server time and the compare page drawn in Chromium.
BENCHES += compare
# A batch replay of 200 runs through one, then two Celery workers (PostgreSQL and Redis).
BENCHES += batch_replay
# The suite x 4 arms as an experiment (inline, 1 and 2 Celery workers); the scoreboard of 10,000 runs.
BENCHES += experiment
# The snapshot of one 10,000-step run (1% retried, with their attempts): CPU per read and bytes.
BENCHES += run_snapshot
# The suite's code tasks graded in their two sandboxes, one at a time and four at a time.
BENCHES += code_grading

.PHONY: install demo serve test test-fast test-production bench clean lint

install: $(PY_STAMP) $(JS_STAMP)

$(PY_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,lint]'
	touch $@

$(JS_STAMP): package.json package-lock.json scripts/copy_vendor.py
	npm ci --no-audit --no-fund --loglevel=error
	$(BIN)/python scripts/copy_vendor.py
	touch $@

demo: install
	$(BIN)/python manage.py migrate --noinput
	CONDUCTOR_BASE_URL=$(BASE_URL) $(BIN)/python manage.py seed_demo
	$(MAKE) --no-print-directory serve

serve:
	@echo "Serving on http://$(HOST):$(PORT)/ (Ctrl-C stops)"
	$(BIN)/daphne -b $(HOST) -p $(PORT) webui.asgi:application

# Four sessions, the real model's (tests/real_model.py, slow) apart. Playwright's sync API keeps an event loop running in the main thread, which
# Django then takes for an async context, so browser tests never share a process with the rest.
test: install
	$(MAKE) --no-print-directory lint
	$(BIN)/pytest -m "not production and not browser and not real_model" --durations=15
	$(BIN)/pytest -m browser --durations=15
	$(BIN)/pytest -m real_model --durations=15
	$(MAKE) --no-print-directory test-production

test-fast: install
	$(BIN)/pytest -m "not production and not browser and not real_model"

test-production: install
	DATABASE_URL=$(TEST_DATABASE_URL) REDIS_URL=$(TEST_REDIS_URL) DJANGO_SECRET_KEY=test-only \
		CONDUCTOR_EXECUTION=celery \
		$(BIN)/pytest -m production --durations=15

# The checked habits (also run by .pre-commit-config.yaml): ruff's rules and format, mypy --strict
# on the engine and providers (configured in pyproject.toml), ESLint on static/js/.
lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	npx --no-install eslint .

bench: install
	@for b in $(BENCHES); do echo "== bench.$$b"; $(BIN)/python -m bench.$$b || exit 1; done

clean:
	rm -rf $(VENV) node_modules static/vendor .pytest_cache .hypothesis .mypy_cache .ruff_cache
