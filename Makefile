# The two commands the README promises. Both bootstrap whatever is missing first.
.PHONY: demo test lint bench bootstrap clean

PY := .venv/bin/python

bootstrap:
	./scripts/bootstrap

test: bootstrap
	$(PY) -m ruff check executor sandbox policies sandloop tests bench
	$(PY) -m mypy
	.venv/bin/lint-imports
	$(PY) -m pytest -q -p no:cacheprovider

demo: bootstrap
	.venv/bin/sandloop run --demo

lint: bootstrap
	$(PY) -m ruff check executor sandbox policies sandloop tests bench
	$(PY) -m mypy
	.venv/bin/lint-imports

bench: bootstrap
	$(PY) bench/shell_overhead.py
	$(PY) bench/loop.py
	$(PY) bench/patch.py
	$(PY) bench/policy.py
	$(PY) bench/computer.py

clean:
	.venv/bin/sandloop gc || true
	rm -rf .build reports
