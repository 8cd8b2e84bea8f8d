"""bench.cprofile_diff: own time per function from a cProfile dump, and what grew against no speculation."""

from __future__ import annotations

import cProfile

from bench.cprofile_diff import grew, median_times, own_times, render


def _busy(n: int) -> int:
    return sum(i * i for i in range(n))


def test_own_times_read_a_dump(tmp_path):
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(3):
        _busy(20000)
    prof.disable()
    prof.dump_stats(tmp_path / "p.prof")
    times = own_times(tmp_path / "p.prof")
    (calls, t), = [v for (file, _, fn), v in times.items() if fn == "_busy" and file.endswith("test_bench_cprofile_diff.py")]
    assert calls == 3 and t > 0


def test_grew_ranks_per_step_growth_and_counts_new_functions():
    base = {("a.py", 1, "f"): (10, 1.0), ("a.py", 2, "g"): (10, 0.5)}
    other = {("a.py", 1, "f"): (10, 1.2), ("a.py", 2, "g"): (10, 0.4), ("b.py", 3, "h"): (5, 0.3)}
    rows = grew(base, other, steps=100, top=2)
    assert rows[0][1] == ("", 0, "total") and abs(rows[0][0] - 4.0) < 1e-9  # +0.4 s over 100 steps: 4 ms each
    assert rows[1][1] == ("", 0, "only with speculation") and abs(rows[1][0] - 3.0) < 1e-9  # h alone
    assert [(round(ms, 6), key, c1, c0) for ms, key, c1, c0 in rows[2:]] == [
        (3.0, ("b.py", 3, "h"), 5, 0), (2.0, ("a.py", 1, "f"), 10, 10)]  # g shrank: not in the top 2
    md = render({"our X": rows}, "python -m bench.cprofile_diff")
    assert "## our X: +4.000 ms per step in all, +3.000 in functions no speculation never calls" in md
    assert "| +3.000 | 5 | 0 | `h` (b.py:3) |" in md


def test_median_times_count_a_run_without_the_function_as_zero():
    runs = [{("a", 1, "f"): (2, 1.0), ("a", 2, "g"): (1, 0.2)}, {("a", 1, "f"): (2, 3.0)}, {("a", 1, "f"): (2, 2.0)}]
    assert median_times(runs) == {("a", 1, "f"): (2, 2.0), ("a", 2, "g"): (1, 0.0)}
