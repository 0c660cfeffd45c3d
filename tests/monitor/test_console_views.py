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


def _rows(n: int, **labels: str) -> list[dict]:
    return [views.alert_row({"labels": {"alertname": "Hot", "severity": "P2", "node": f"gpu-{i % 3}", **labels},
                             "annotations": {}, "fingerprint": f"{i:016x}",
                             "status": {"state": "active", "silencedBy": ["s1"] if i == 0 else [], "inhibitedBy": []}},
                            "alert", "firing", {"s1": {"id": "s1", "createdBy": "bob", "comment": "why", "ends": "e",
                                                       "ends_in": "in 1h"}}) for i in range(n)]


def test_the_filter_form_reads_matchers_with_commas_inside_values_and_reports_a_bad_one() -> None:
    q = listing.parse_query({"q": '{node="gpu-1", note="a, b \\" c"}', "state": "bogus", "page": "x"})
    assert [str(m) for m in q.matchers] == ['node="gpu-1"', 'note="a, b \\" c"'] and not q.error
    assert q.state == "" and q.page == 1 and q.group == "node"
    assert listing.parse_query({"group": "job"}).group == "run" and listing.parse_query({"group": "x"}).group == "node"
    bad = listing.parse_query({"q": 'node="gpu-1", nonsense'})
    assert "nonsense" in bad.error and [str(m) for m in bad.matchers] == ['node="gpu-1"']
    assert listing.parse_query({"refresh": "0"}).refresh == 0 and listing.parse_query({"refresh": "1"}).refresh == 2


def test_handled_alerts_leave_the_default_view_and_the_filter_narrows() -> None:
    rows = _rows(9)
    assert rows[0]["silenced_by"][0]["createdBy"] == "bob"
    default = listing.selected(rows, listing.parse_query({}))
    assert len(default) == 8 and rows[0] not in default
    assert listing.selected(rows, listing.parse_query({"state": "handled"})) == [rows[0]]
    node1 = listing.selected(rows, listing.parse_query({"q": 'node="gpu-1"'}))
    assert [r["labels"]["node"] for r in node1] == ["gpu-1"] * 3
    assert listing.selected(rows, listing.parse_query({"severity": "P0"})) == []
    # Alertmanager's words: filter= for the matchers, suppressed for handled
    assert listing.selected(rows, listing.parse_query({"filter": 'node="gpu-1"'})) == node1
    assert listing.selected(rows, listing.parse_query({"state": "suppressed"})) == [rows[0]]
    assert listing.selected(rows, listing.parse_query({"state": "silenced"})) == [rows[0]]
    assert listing.selected(rows, listing.parse_query({"state": "inhibited"})) == []


def test_groups_hold_at_most_a_page_and_ungrouped_lists_page() -> None:
    rows = _rows(180)
    by_node = listing.grouped(rows, listing.parse_query({}))
    assert [g["count"] for g in by_node["groups"]] == [60, 60, 60]
    assert all(len(g["rows"]) == listing.PAGE_ROWS and g["more"] == 10 for g in by_node["groups"])
    assert [g["open"] for g in by_node["groups"]] == [True, False, False]  # long: only the first is open
    assert 'node%3D%22gpu-0%22' in by_node["groups"][0]["link"]
    flat = listing.grouped(rows, listing.parse_query({"group": "none", "page": "4"}))
    assert flat["pages"] == 4 and flat["page"] == 4 and len(flat["groups"][0]["rows"]) == 30


def test_a_long_label_value_is_cut_in_the_list_and_whole_on_the_alert() -> None:
    [row] = _rows(1, blob="y" * 5000)
    assert len(row["short_labels"]["blob"]) < 200 and row["labels"]["blob"] == "y" * 5000


def test_the_plot_labels_its_value_axis_and_marks_the_onset(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    import numpy as np
    from matplotlib.axes import Axes

    from monitor.book.plots import render_fit

    seen: dict[str, object] = {}
    real_ylabel, real_vline = Axes.set_ylabel, Axes.axvline
    monkeypatch.setattr(Axes, "set_ylabel", lambda self, text, **kw: seen.setdefault("y", text) and real_ylabel(self, text, **kw))
    monkeypatch.setattr(Axes, "axvline", lambda self, x=0, **kw: seen.setdefault("onset", x) is not None and real_vline(self, x, **kw))
    t = np.arange(0.0, 600.0, 10.0)
    assert render_fit(tmp_path / "p.png", t, t * 0.1, {"onset": 300.0}, "Drift", "verl_kl_divergence") is not None
    assert seen == {"y": "verl_kl_divergence", "onset": (300.0 - 590.0) / 60.0}


def test_an_alert_links_to_its_runbook_grafana_panel_and_query() -> None:
    from types import SimpleNamespace

    from monitor.web import links

    [row] = _rows(1)
    row["annotations"] = {"runbook_url": "https://wiki/runbooks/hot", "runbook": "restart it"}
    cfg = SimpleNamespace(grafana_url="http://grafana:3000", prometheus_url="http://prom:9090")
    found = {x["text"].split(":")[0]: x["href"] for x in links.out_links(cfg, row, 'verl_global_step{job="verl"}')}
    assert found["Runbook"] == "https://wiki/runbooks/hot"
    assert found["Grafana"].startswith("http://grafana:3000/d/verl-ppo-training?viewPanel=")
    assert found["Query"].startswith("http://prom:9090/graph?g0.expr=verl_global_step%7Bjob%3D%22verl%22%7D")
    bare = links.out_links(SimpleNamespace(grafana_url=None, prometheus_url="javascript:alert(1)"), row, "verl_global_step")
    assert [x["href"] for x in bare] == ["https://wiki/runbooks/hot", "/rules#rule-Hot"]  # no Grafana without its URL
    row["annotations"] = {"runbook": "prometheus/README.md#trainerdown"}  # a repository path, joined like chat's
    [book] = links.out_links(cfg, row, "", "https://github.com/o/verl-ops/blob/main")
    assert book == {"text": "Runbook", "href": "https://github.com/o/verl-ops/blob/main/prometheus/README.md#trainerdown"}


def test_a_monitor_without_a_notify_config_says_why_it_offers_no_silence(tmp_path) -> None:  # noqa: ANN001
    import httpx
    import yaml
    from monitor_http import RunningDaemon

    (tmp_path / "monitor.yaml").write_text(yaml.safe_dump({
        "listen": "127.0.0.1:0", "state_db": str(tmp_path / "state.db"), "eval_interval": "0.2s", "targets": []}))
    d = RunningDaemon(tmp_path / "monitor.yaml")
    try:
        listing_page = httpx.get(f"{d.url}/silences").text
        form = httpx.get(f"{d.url}/silences/new").text
        index = httpx.get(f"{d.url}/").text
    finally:
        d.stop()
    for page in (listing_page, form):
        assert "sends them nowhere" in page and "--notify-config" in page
        assert 'action="/silences"' not in page and "New silence</a>" not in page
    assert 'http-equiv="refresh"' in index and 'http-equiv="refresh"' not in form  # lists refresh, forms never


def test_the_timeline_lists_each_delivery_and_its_outcome_in_order() -> None:
    from types import SimpleNamespace

    engine = SimpleNamespace(views=SimpleNamespace(deliveries=lambda fp: [
        {"receiver": "ops-wecom", "status": "firing", "outcome": "delivered", "attempts": 1, "error": "", "at": 1.8e9 + 40},
        {"receiver": "ops-dingtalk", "status": "firing", "outcome": "failed", "attempts": 3,
         "error": "errcode 310000", "at": 1.8e9 + 50}]))
    api = SimpleNamespace(daemon=SimpleNamespace(engine=engine))
    a = {"labels": {"alertname": "Hot", "severity": "P1"}, "fingerprint": "0123456789abcdef",
         "startsAt": "2027-01-15T08:00:00Z", "endsAt": "2027-01-15T08:10:00Z"}
    row = views.alert_row(a, "alert", "resolved")
    events = views.timeline(api, a, row)  # type: ignore[arg-type]
    assert [e["kind"] for e in events] == ["firing", "delivered", "failed", "resolved"]
    assert events[1]["what"] == "firing notification to ops-wecom: delivered"
    assert events[2]["what"] == "firing notification to ops-dingtalk: failed after 3 attempt(s) (errcode 310000)"
