"""tools/speed_gauge.py: the gauge grows with its workload and prints one line."""

from __future__ import annotations

from tools import speed_gauge


def test_the_gauge_grows_with_its_workload():
    small = min(speed_gauge.gauge_seconds(20_000) for _ in range(3))
    large = min(speed_gauge.gauge_seconds(2_000_000) for _ in range(3))
    assert 0 < small < large


def test_main_prints_one_line(capsys):
    assert speed_gauge.main() == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith("speed gauge: ") and " s (" in line
