# The two commands the README promises. Both bootstrap whatever is missing first.
#
# `make test` needs a real Docker engine and Chromium: a test that needs a missing one FAILS.
# To run without them on purpose, set SANDLOOP_TESTS_ALLOW_SKIP=1 (e.g.
# `SANDLOOP_TESTS_ALLOW_SKIP=1 make test`); every skip is listed with its reason (-rs).
# After the tests, every bench runs once in --quick mode so none can silently break (quick
# figures are printed, not judged; `make bench` gives the real ones).
.PHONY: demo test lint bench bench-quick bootstrap clean

PY := .venv/bin/python
# Every bench script (report.py is their shared printer, profile.py their sampling profiler: not benches).
BENCHES := $(filter-out bench/report.py bench/profile.py,$(sort $(wildcard bench/*.py)))

bootstrap:
	./scripts/bootstrap

test: bootstrap
	$(PY) -m ruff check executor sandbox policies sandloop tests bench scripts examples
	$(PY) -m mypy
	.venv/bin/lint-imports
	$(PY) -m pytest -q -rsx -p no:cacheprovider
	$(MAKE) --no-print-directory bench-quick

# Only what the demo runs in first (scripts/bootstrap --demo): the default shell image, the
# largest, keeps building in the background, and `make test` waits for it.
demo:
	./scripts/bootstrap --demo
	.venv/bin/sandloop run --demo --report

lint: bootstrap
	$(PY) -m ruff check executor sandbox policies sandloop tests bench scripts examples
	$(PY) -m mypy
	.venv/bin/lint-imports

bench: bootstrap
	@set -e; for b in $(BENCHES); do echo "== $$b"; $(PY) $$b; done

# Runs them all, then fails naming every bench that crashed (one broken bench hides no other).
bench-quick: bootstrap
	@failed=""; for b in $(BENCHES); do echo "== $$b --quick"; $(PY) $$b --quick || failed="$$failed $$b"; done; \
	if [ -n "$$failed" ]; then echo "bench-quick: FAILED:$$failed"; exit 1; fi

clean:
	.venv/bin/sandloop gc || true
	rm -rf .build reports

# Opt-in: the Kubernetes back-end's tests against a REAL cluster instead of the fake API server.
# SANDLOOP_K8S_CONTEXT names a kubeconfig context; SANDLOOP_K8S_IMAGE an image the cluster can pull
# (the sandbox image, pushed: see docs/kubernetes.md); SANDLOOP_K8S_NAMESPACE (default sandloop-test)
# must exist. Tests that reach behind the API server (fake_only) are skipped there.
.PHONY: test-k8s
test-k8s: bootstrap
	@test -n "$$SANDLOOP_K8S_CONTEXT" || { echo "test-k8s: set SANDLOOP_K8S_CONTEXT to a kubeconfig context (docs/kubernetes.md)"; exit 2; }
	$(PY) -m pytest -q -rs -p no:cacheprovider tests/k8s
