"""OpInfo suite, shard 0 of opinfo_suite.SHARDS (see tests/opinfo_suite.py),
and checks of the expected-failure list itself."""

import opinfo_suite
from opinfo_suite import CASES, EXPECTED

test_opinfo = opinfo_suite.make_test(0)


def test_expected_failures_name_real_cases():
    """Every line of the expected-failure list names a case that exists."""
    ids = {c.id for c in CASES}
    stale = sorted(k for k in EXPECTED if k not in ids)
    assert not stale, f"tests/opinfo_expected_failures.txt lists unknown cases: {stale}"


def test_expected_failures_have_reasons():
    assert all(r and r != "known failure" for r in EXPECTED.values())


def test_shards_cover_every_case():
    assert {opinfo_suite.shard_of(c) for c in CASES} == set(range(opinfo_suite.SHARDS))
