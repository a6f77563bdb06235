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

test: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist loadfile $(PYTEST_ARGS) tests

demo: $(STAMP)
	$(PY) -m torchtpu qualify

bench: $(STAMP)
	$(PY) benchmarks/eager_overhead.py

clean:
	rm -rf build *.egg-info torchtpu/_C*.so $(VENV)
