"""`make bench` writes its chart whatever a run is missing: skipped and invalid servers, absent values."""

from bench import report



def test_chart_is_written_when_values_are_missing(tmp_path):
    row = {"id": "produce 1,000 x 100 B", "kind": "produce", "primary": "msg_per_s", "unit": "msg/s",
           "higher_is_better": True, "notes": [], "details": [],
           "servers": {
               "moldau": {"valid": True, "metrics": {"msg_per_s": 1000.0}},
               "tansu": {"valid": False, "skipped": "tansu is not installed", "metrics": {}},
               "ceiling": {"valid": False, "reason": "high watermark 999, expected 1000", "metrics": {}},
               "other": {"valid": True, "metrics": {}},
           }}
    result = {"meta": {"started": "now", "cpu_count": 2, "quick": True}, "rows": [row, {**row, "id": "empty",
                                                                                        "servers": {}}]}
    path = tmp_path / "chart.png"
    report.chart(result, path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [report._state_word(row["servers"][s]) for s in ("tansu", "ceiling", "other")] == \
        ["skipped", "invalid", "no value"]
