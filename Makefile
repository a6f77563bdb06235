# One-command entry points (see README).  `make test` works on a fresh machine:
# it creates the virtual environment, installs pinned dependencies and the
# package (C++ extension built against the installed torch), then runs pytest.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.torchtpu-installed
PYTEST_ARGS ?=

.PHONY: install test demo bench clean

$(STAMP): pyproject.toml setup.py requirements.txt $(wildcard csrc/*.cpp csrc/*.h)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -r requirements.txt
	TORCH_DEVICE_BACKEND_AUTOLOAD=0 $(PY) -m pip install -q --no-build-isolation --no-deps -e .
	touch $@

install: $(STAMP)

# Two pytest processes: each XLA:CPU executable holds memory maps, and a
# worker past vm.max_map_count crashes inside XLA.  Eager kernels are evicted
# (ops/kernel_cache.py), compiled graphs are not, so the compile tests run in
# workers of their own.
COMPILE_TESTS = tests/test_compile.py tests/test_random_compiled_programs.py

test: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist loadfile $(PYTEST_ARGS) $(COMPILE_TESTS)
	$(PY) -m pytest -q -n 2 --dist loadfile $(PYTEST_ARGS) tests $(addprefix --ignore=,$(COMPILE_TESTS))

demo: $(STAMP)
	$(PY) -m torchtpu qualify

bench: $(STAMP)
	$(PY) benchmarks/eager_overhead.py

clean:
	rm -rf build *.egg-info torchtpu/_C*.so $(VENV)
