# The two commands a new user needs: `make run` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PORT ?= 8000
# The suite runs against the real PostgreSQL (and Redis) it needs; override to point elsewhere.
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/test
export PYTHONDONTWRITEBYTECODE = 1

.PHONY: install run serve test bench clean

$(VENV)/.installed: requirements.txt requirements-dev.txt sdk/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.txt -e ./sdk
	touch $@

install: $(VENV)/.installed

run: install
	mkdir -p var
	$(PY) manage.py migrate --no-input
	$(PY) manage.py sync_presets
	$(PY) manage.py ensure_local_admin
	$(PY) manage.py runserver --noreload 127.0.0.1:$(PORT)

test: install
	DATABASE_URL=$(TEST_DATABASE_URL) $(PY) -m pytest $(PYTEST_ARGS)

bench: install
	for script in bench/*.py; do echo "== $$script"; $(PY) $$script || exit 1; done

clean:
	rm -rf $(VENV) var
