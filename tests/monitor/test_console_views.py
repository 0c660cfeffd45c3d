"""Issue 35: what the console's pages show, checked without a browser: an incident's evidence and plot,
silence matchers made from hostile labels, and hostile text autoescaped in the HTML."""

from __future__ import annotations

from alerting.matchers import parse_matcher
from monitor.web import listing, views
from monitor.web.app import _ENV


def test_an_incidents_evidence_and_plot_come_from_its_annotations() -> None:
    row = views.alert_row({"labels": {"alertname": "DataflowCollapse", "severity": "P0", "node": "gpu-08"},
                           "annotations": {"summary": "s", "root_cause": "Reward Model OOM",
                                           "evidence": "reward model RSS 79 GB of 80; batch 64 ; ",
                                           "plot": "http://mon:9105/api/v1/plots/Drift-1.png?exp=1&sig=ab"},
                           "startsAt": "2026-01-01T00:00:00Z", "fingerprint": "0123456789abcdef"},
                          "incident", "firing")
    assert row["evidence"] == ["reward model RSS 79 GB of 80", "batch 64"]
    assert row["plot"] == "/api/v1/plots/Drift-1.png" and row["root_cause"] == "Reward Model OOM"
    assert row["labels"] == {"node": "gpu-08"} and row["severity"] == "P0"
    assert views.plot_path("http://evil/api/v1/plots/../../x.png") == ""


def test_silence_matchers_from_hostile_labels_parse_back_to_the_same_values() -> None:
    labels = {"alertname": "GPUXidError", "node": 'gpu-01" , x="y', "path": "a\\b\nc.*", "gpu": "\u202e3",
              "tail": 'ends with \\"', "severity": "P1"}
    lines = views.matchers_of(labels).splitlines()
    assert len(lines) == 5 and all("\n" not in ln for ln in lines)
    matchers = [parse_matcher(ln) for ln in lines]
    assert all(m.matches(labels) for m in matchers)
    assert not any(m.matches(dict(labels, **{m.name: labels[m.name] + "x"})) for m in matchers)
    assert {m.name: m.value for m in matchers if m.op == "="} == {"alertname": "GPUXidError", "node": 'gpu-01" , x="y'}


def test_hostile_label_text_is_escaped_in_the_pages() -> None:
    hostile = '<script>alert(1)</script>'
    row = views.alert_row({"labels": {"alertname": hostile, "severity": "P1", "x": hostile},
                           "annotations": {"summary": hostile}, "fingerprint": "0123456789abcdef"}, "alert", "firing")
    q = listing.parse_query({})
    html = _ENV.get_template("index.html").render(csrf="c", path="/", token_set=False, cluster=hostile,
                                                   alerts=listing.grouped([row], q), shown=1, q=q, incidents=[],
                                                   silences_on=True, runs=[], updated="", counts={},
                                                   health={"status": "ok", "reasons": [hostile], "series": 0,
                                                           "firing": 1, "uptime_s": 1.0})
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_the_alert_book_lists_recent_resolves_newest_first(tmp_path) -> None:  # noqa: ANN001
    from test_monitor_alerts import feed, make

    from alerting.clock import SimulatedClock

    clock, recs = SimulatedClock(0), []
    p = make(tmp_path, clock, recs)
    try:
        assert p.book.recently_resolved() == []
        for t in range(0, 70, 10):
            feed(p, clock, t, 90)
        assert p.book.recently_resolved() == []  # firing
        for t in range(70, 110, 10):
            feed(p, clock, t, 50)
        [gone] = p.book.recently_resolved()
        assert gone.status == "resolved" and gone.name == "Hot" and gone.ends_at == 100
        row = views.alert_row(gone.to_json(), "alert", "resolved")
        assert row["ended"] == "1970-01-01 00:01:40 UTC" and row["summary"] == "1 at 90.0"
    finally:
        p.close()
