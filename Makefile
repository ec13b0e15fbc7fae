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
	@command -v npm >/dev/null || { apt-get update -qq && apt-get install -y -qq nodejs npm; }
	npm ci --no-audit --no-fund --silent
	touch $@

setup: $(VENV)/.installed

migrate: setup
	$(PY) manage.py migrate --noinput -v 0

run: migrate
	$(PY) manage.py bootstrap
	exec $(VENV)/bin/uvicorn extproxy.asgi:application --host $(HOST) --port $(PORT) \
		--loop uvloop --http httptools --no-access-log --lifespan on

# Debian's chromium for the browser tests (Playwright drives it; it never downloads one).
browser:
	@command -v chromium >/dev/null || { apt-get update -qq && apt-get install -y -qq chromium; }

test: setup browser
	$(VENV)/bin/pytest

bench: migrate browser
	$(PY) bench/run.py
	$(PY) bench/feed.py
	$(PY) bench/export_bench.py
	$(PY) bench/pages.py

clean:
	rm -rf $(VENV) var
