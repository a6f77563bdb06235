"""OpInfo suite, shard 2 of opinfo_suite.SHARDS (see tests/opinfo_suite.py)."""

import opinfo_suite

test_opinfo = opinfo_suite.make_test(2)
