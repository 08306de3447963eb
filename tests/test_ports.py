"""The test ports of parallel pytest-xdist workers never meet: each worker has its own slice of the range."""

from __future__ import annotations

import itertools

from tests.ports import port_range


def _worker(index: int, count: int) -> dict[str, str]:
    return {"PYTEST_XDIST_WORKER": f"gw{index}", "PYTEST_XDIST_WORKER_COUNT": str(count)}


def test_without_xdist_the_session_has_the_whole_range() -> None:
    lowest, highest = port_range({})
    assert lowest == 10_000 and highest >= 11_000
    assert port_range(_worker(0, 1)) == (lowest, highest)


def test_each_worker_has_its_own_slice_inside_the_range() -> None:
    lowest, highest = port_range({})
    for count in (2, 3, 8):
        slices = sorted(port_range(_worker(index, count)) for index in range(count))
        assert slices[0][0] == lowest and slices[-1][1] <= highest
        for (_, end), (start, _) in itertools.pairwise(slices):
            assert end < start  # disjoint
        assert all(end - start >= 1_000 for start, end in slices)
