# extproxy: make run (serve on HOST:PORT), make test (the whole suite), make bench.
VENV   := .venv
PY     := $(VENV)/bin/python
HOST   ?= 127.0.0.1
PORT   ?= 8000
PYTHON ?= python3

.PHONY: setup run test bench migrate clean browser

$(VENV)/.installed: requirements.txt requirements-dev.txt package-lock.json
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check -r requirements-dev.txt
	@command -v npm >/dev/null || { echo "make setup: npm is missing: installing Debian's nodejs and npm with apt-get (for the chart library)"; \
		apt-get update -qq && apt-get install -y -qq nodejs npm; }
	npm ci --no-audit --no-fund --silent
	touch $@

setup: $(VENV)/.installed

migrate: setup
	$(PY) manage.py migrate --noinput -v 0

# Three processes: the recorder (drains the spool into the database, at lower priority), the
# shadow process (sends the shadow backends their copies, from the spool, at the lowest
# priority; idle without shadows), both ending when uvicorn does, and uvicorn (serves; hands
# calls to the spool). The connections each port holds open are bounded by the application
# (EXTPROXY_MAX_CONNECTIONS, EXTPROXY_EXTENDER_MAX_CONNECTIONS), not by uvicorn's
# --limit-concurrency, which refuses requests on connections it has already accepted and keeps.
run: migrate
	$(PY) manage.py bootstrap
	$(PY) manage.py recorder --exit-with-parent & \
	$(PY) manage.py shadow --exit-with-parent & \
	exec $(VENV)/bin/uvicorn extproxy.asgi:application --host $(HOST) --port $(PORT) \
		--loop uvloop --http httptools --no-access-log --lifespan on

# The browser tests drive Debian's chromium through Playwright, which never downloads one.
# `make browser` finds it (EXTPROXY_CHROMIUM, else `chromium` on PATH) or, saying so, installs
# Debian's package with apt-get (needs root). `make test` does the same before the suite;
# `make test SKIP_BROWSER=1` leaves the browser tests out instead and changes nothing on the system.
browser:
	@if [ -x "$${EXTPROXY_CHROMIUM:-$$(command -v chromium)}" ]; then \
		echo "make browser: using $${EXTPROXY_CHROMIUM:-$$(command -v chromium)}"; \
	else \
		echo "make browser: chromium not found: installing Debian's chromium with apt-get (SKIP_BROWSER=1 skips the browser tests)"; \
		apt-get update -qq && apt-get install -y -qq chromium; \
	fi

ifeq ($(SKIP_BROWSER),1)
test: setup
	@echo "make test: SKIP_BROWSER=1: the browser tests (marker 'browser') are left out"
	$(VENV)/bin/pytest -m "not browser"
else
test: setup browser
	$(VENV)/bin/pytest
endif

bench: migrate browser
	$(PY) bench/run.py
	$(PY) bench/feed.py
	$(PY) bench/export_bench.py
	$(PY) bench/pages.py
	$(PY) bench/shadow_bench.py
	$(PY) bench/recording.py

clean:
	rm -rf $(VENV) var
