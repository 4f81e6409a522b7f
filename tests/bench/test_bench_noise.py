"""Times the measurement cannot tell from zero (chained minus trivial at or below zero, common on CPU): the table
says "below noise" and derives nothing from them; JSON and CSV keep the raw numbers beside a flag."""

import csv
import json
import re

from jax_mscclpp.tools.bench import metrics, report
from jax_mscclpp.tools.bench.sweep import Record


def record(ours, ours_min, lax, lax_min):
    return Record(op="all_reduce", size=1024, count=256, dtype="float32", algorithm="1pa_ll", chosen="1pa_ll",
                  mode="plain", world=8, processes=1, redop="sum", chain=8, iters=3, warmup=1, check="ok",
                  ours_us=ours, ours_min_us=ours_min, ours_max_us=abs(ours) + 1, lax_us=lax, lax_min_us=lax_min,
                  lax_max_us=abs(lax) + 1, ours_busbw=metrics.busbw_gbps("all_reduce", 8, 1024, ours),
                  lax_busbw=metrics.busbw_gbps("all_reduce", 8, 1024, lax), speedup=metrics.speedup(ours, lax),
                  ours_dispatch_us=50.0, lax_dispatch_us=60.0)


def test_below_noise():
    assert metrics.below_noise(-2.0, -3.0) and metrics.below_noise(0.0, 0.0)
    assert metrics.below_noise(0.4, -1.0)  # a positive median, but one chained run cost nothing
    assert not metrics.below_noise(5.0, 4.0) and not metrics.below_noise(None, None)


def test_table_says_below_noise_and_derives_nothing():
    noisy = report.table_row(record(-3.5, -9.0, 0.2, -1.0))
    assert noisy.count("below noise") == 2
    assert "-3.5" not in noisy and not re.search(r"\dx", noisy)  # no time, no speedup
    assert noisy.split()[-5:-2] == ["-", "-", "-"]  # speedup, busbw and lax_bw left empty
    half = report.table_row(record(4.0, 3.0, -1.0, -2.0))
    assert half.count("below noise") == 1 and "4.0" in half and not re.search(r"\dx", half)
    clean = report.table_row(record(4.0, 3.0, 8.0, 7.0))
    assert "below noise" not in clean and "2.00x" in clean and "4.0" in clean and "8.0" in clean


def test_files_keep_the_raw_numbers_and_a_flag(tmp_path):
    records = [record(-3.5, -9.0, 8.0, 7.0), record(4.0, 3.0, 8.0, 7.0)]
    path = report.write_json(str(tmp_path / "r.json"), {"date": "d"}, {}, records)
    rows = json.loads(open(path).read())["records"]
    assert rows[0]["ours_us"] == -3.5 and rows[0]["ours_below_noise"] is True and rows[0]["lax_below_noise"] is False
    assert rows[1]["ours_us"] == 4.0 and rows[1]["ours_below_noise"] is False
    path = report.write_csv(str(tmp_path / "r.csv"), {"date": "d"}, records)
    rows = list(csv.DictReader(open(path)))
    assert rows[0]["ours_us"] == "-3.5" and rows[0]["ours_below_noise"] == "True"
