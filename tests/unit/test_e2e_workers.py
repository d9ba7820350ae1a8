"""How the e2e tier is shared out among xdist workers (tests/e2e/workers.py): which tests go
together, and which go first."""

from __future__ import annotations

from tests.e2e.workers import LONGEST_FIRST, SPLIT_BY_TEST, rank, unit_of


def test_a_module_is_one_unit() -> None:
    assert unit_of("tests/e2e/test_modelpool.py::test_a") == "tests/e2e/test_modelpool.py"
    assert unit_of("tests/e2e/test_modelpool.py::test_b[x]") == "tests/e2e/test_modelpool.py"


def test_a_split_module_gives_each_test_its_own_unit() -> None:
    module = "tests/e2e/test_storm.py"
    assert module in SPLIT_BY_TEST
    one, other = f"{module}::test_swap_storm[1-proxies]", f"{module}::test_swap_storm[2-proxies]"
    assert unit_of(one) == one
    assert unit_of(other) == other


def test_a_named_group_is_one_unit_across_modules() -> None:
    assert unit_of("tests/e2e/test_a.py::test_x@timed") == "timed"
    assert unit_of("tests/e2e/test_storm.py::test_y[p]@timed") == "timed"


def test_an_at_sign_inside_parameters_is_not_a_group() -> None:
    nodeid = "tests/e2e/test_a.py::test_x[user@host]"
    assert unit_of(nodeid) == "tests/e2e/test_a.py"


def test_the_longest_modules_go_first_in_their_order_and_the_rest_after() -> None:
    first, second = LONGEST_FIRST[0], LONGEST_FIRST[1]
    assert rank(first) == 0
    assert rank(second) == 1
    assert rank(f"{first}::test_swap_storm[1-proxies]") == 0  # a split module's test keeps its rank
    assert rank("tests/e2e/test_quick.py") == len(LONGEST_FIRST)
