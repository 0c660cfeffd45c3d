"""The console an on-call engineer keeps open, in a real Chromium (Debian's, as test_console_browser.py):
500 firing alerts, 50 of them silenced, one with a 5 KB label value without spaces. The default view
shows the 450 unhandled ones grouped by node, with no horizontal scroll at 1440 and 390 px; the filter
form (a plain GET) narrows it to a node; the silenced ones are one filter away, marked with who, until
when and why; the list page refreshes itself. One browser and one daemon for the module."""

from __future__ import annotations

import os
from pathlib import Path

import headless_chromium
import httpx
import pytest
import yaml
from monitor_http import RunningDaemon, Targets, wait_for

TOKEN = "s3cret-oncall"
NODES = 20
LONG = "x" * 5120  # one label value of 5 KB without a space

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not headless_chromium.INSTALLED, reason=headless_chromium.NOT_INSTALLED),
]


@pytest.fixture(scope="module")
def browser():
    pytest.importorskip("selenium.webdriver")
    driver = headless_chromium.start(1440, 900, page_load_timeout_s=60)
    yield driver
    driver.quit()


def _alerts() -> list[dict]:
    out = []
    for i in range(500):
        labels = {"alertname": "NodeTrouble", "severity": ("P1", "P2", "P3")[i % 3], "node": f"gpu-{i % NODES:02d}",
                  "run": f"ppo-{i % 4}", "slot": str(i)}
        if i < 50:
            labels["team"] = "muted"
        if i == 499:
            labels["blob"] = LONG
        out.append({"status": "firing", "labels": labels, "annotations": {"summary": f"trouble #{i}"},
                    "startsAt": "2026-01-01T00:00:00Z"})
    return out


@pytest.fixture(scope="module")
def oncall(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("oncall")
    targets = Targets()
    (tmp / "rules.yaml").write_text(yaml.safe_dump({"rules": [
        {"alert": "RolloutBufferTooBig", "severity": "P3", "select": "verl_rollout_buffer_size",
         "detector": {"type": "threshold", "op": ">", "value": 1e9}, "summary": "buffer"}]}))
    (tmp / "alerting.yaml").write_text(yaml.safe_dump({
        "receivers": [{"name": "hook", "type": "webhook", "url": f"{targets.url}/hook"}], "route": {"receiver": "hook"}}))
    cfg = {"listen": "127.0.0.1:0", "state_db": str(tmp / "state" / "state.db"), "eval_interval": "0.2s",
           "rules": ["rules.yaml"], "cluster": "oncall-test", "bearer_token": TOKEN, "notify_config": "alerting.yaml",
           "targets": [{"name": "trainer", "url": f"{targets.url}/good", "node": "gpu-04", "interval": "0.5s"}]}
    (tmp / "monitor.yaml").write_text(yaml.safe_dump(cfg))
    d = RunningDaemon(tmp / "monitor.yaml")
    auth = {"Authorization": f"Bearer {TOKEN}"}
    r = httpx.post(f"{d.url}/api/v1/alertmanager/webhook", headers=auth, json={"version": "4", "alerts": _alerts()},
                   timeout=30)
    assert r.status_code == 200, r.text
    made = httpx.post(f"{d.url}/api/v1/silences", headers=auth, json={
        "matchers": ['team="muted"'], "duration": "2h", "comment": "known flaky rack, ticket OPS-7", "createdBy": "alice"})
    assert made.status_code == 200
    yield d, auth, made.json()["silenceID"]
    d.stop()
    targets.close()


def _log_in(browser, url: str) -> None:  # noqa: ANN001
    from selenium.webdriver.common.by import By

    browser.get(f"{url}/login")
    browser.find_element(By.ID, "token").send_keys(TOKEN)
    browser.find_element(By.ID, "login").click()
    assert wait_for(lambda: browser.get_cookie("verl_monitor_session") is not None, 15)


def _shot(browser, name: str) -> None:  # noqa: ANN001
    """``VERL_CONSOLE_SHOTS=<dir>``: keep a screenshot of each page there."""
    if os.environ.get("VERL_CONSOLE_SHOTS"):
        out = Path(os.environ["VERL_CONSOLE_SHOTS"])
        out.mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(out / f"oncall-{name}.png"))


def _no_sideways_scroll(browser) -> tuple[int, int]:  # noqa: ANN001
    return browser.execute_script("return [document.documentElement.scrollWidth, window.innerWidth]")


def test_the_api_says_which_alerts_are_silenced_and_by_what(oncall) -> None:  # noqa: ANN001
    d, auth, sid = oncall
    data = httpx.get(f"{d.url}/api/v1/alerts", headers=auth, timeout=30).json()["data"]
    mine = [a for a in data if a["labels"].get("alertname") == "NodeTrouble"]
    assert len(mine) == 500
    muted = [a for a in mine if a["status"]["state"] == "suppressed"]
    assert len(muted) == 50 and all(a["status"]["silencedBy"] == [sid] and a["labels"]["team"] == "muted" for a in muted)
    assert all(a["status"] == {"state": "active", "silencedBy": [], "inhibitedBy": []}
               for a in mine if "team" not in a["labels"])
    # Alertmanager's filters: silenced=false leaves what needs someone, filter= narrows by labels
    unhandled = httpx.get(f"{d.url}/api/v1/alerts", params={"silenced": "false", "filter": 'alertname="NodeTrouble"'},
                          headers=auth, timeout=30).json()["data"]
    assert len(unhandled) == 450
    only = httpx.get(f"{d.url}/api/v1/alerts", params=[("filter", 'node="gpu-07"'), ("filter", 'team="muted"')],
                     headers=auth, timeout=30).json()["data"]
    assert {a["labels"]["slot"] for a in only} == {"7", "27", "47"}
    assert httpx.get(f"{d.url}/api/v1/alerts", params={"filter": "nonsense"}, headers=auth).status_code == 400


def test_the_default_view_hides_the_handled_groups_the_rest_and_fits_both_widths(oncall, browser) -> None:  # noqa: ANN001
    from selenium.webdriver.common.by import By

    d, _, _ = oncall
    _log_in(browser, d.url)
    for width, height in ((1440, 900), (390, 844)):
        browser.set_window_size(width, height)
        browser.get(f"{d.url}/")
        rows = browser.find_elements(By.CSS_SELECTOR, "tr.alert-row")
        assert len(rows) == 450  # 22 or 23 a node: every group lists all of its rows
        groups = browser.find_elements(By.CSS_SELECTOR, "details.group")
        assert len(groups) == NODES
        counts = sum(int(g.get_attribute("textContent").split("·")[1].split()[0]) for g in groups)
        assert counts == 450  # the 50 silenced ones are out of the default view
        assert "450 firing" in browser.find_element(By.CSS_SELECTOR, ".banner").text
        assert "50 silenced or inhibited" in browser.find_element(By.CSS_SELECTOR, ".banner").text
        assert browser.execute_script("return document.body.textContent.indexOf('team=\"muted\"')") == -1
        for g in groups:  # open every group: the page, long label and all, still fits the window
            browser.execute_script("arguments[0].open = true", g)
        scroll, inner = _no_sideways_scroll(browser)
        _shot(browser, f"list-{width}")
        assert scroll <= inner, f"{scroll} px wide in a {inner} px window"
        names = [a.get_attribute("aria-label") for a in browser.find_elements(By.CSS_SELECTOR, "a.btn[href^='/silences/new']")]
        assert len(names) == 450 and len(set(names)) == 450  # each Silence button says which alert


def test_the_filter_form_narrows_to_a_node_without_script(oncall, browser) -> None:  # noqa: ANN001
    from selenium.webdriver.common.by import By

    d, _, _ = oncall
    browser.set_window_size(1440, 900)
    browser.get(f"{d.url}/")
    field = browser.find_element(By.ID, "f-q")
    field.send_keys('node="gpu-07"')
    browser.find_element(By.ID, "filter").click()
    assert wait_for(lambda: "gpu-07" in browser.current_url, 15)
    rows = browser.find_elements(By.CSS_SELECTOR, "tr.alert-row")
    assert len(rows) == 22  # 25 on gpu-07, 3 of them silenced
    assert all("node=\"gpu-07\"" in r.text for r in rows)
    browser.get(f"{d.url}/?q=" + "node%3D%22gpu-07%22&group=run")
    # gpu-07 holds slots 7, 27, ...: all of run ppo-3
    assert [g.text.split()[0] for g in browser.find_elements(By.CSS_SELECTOR, "details.group summary")] == ['run="ppo-3"']


def test_the_silenced_ones_are_one_click_away_with_who_until_and_why(oncall, browser) -> None:  # noqa: ANN001
    from selenium.webdriver.common.by import By

    d, _, _ = oncall
    browser.get(f"{d.url}/")
    link = browser.find_element(By.PARTIAL_LINK_TEXT, "50 silenced or inhibited")
    link.click()
    assert wait_for(lambda: "state=handled" in browser.current_url, 15)
    rows = browser.find_elements(By.CSS_SELECTOR, "tr.alert-row")
    assert len(rows) == 50
    _shot(browser, "handled")
    for r in rows[:5]:
        text = r.text
        assert "silenced" in text and "alice" in text and "known flaky rack, ticket OPS-7" in text and "until" in text
    assert not browser.find_elements(By.CSS_SELECTOR, "tr.alert-row a.btn[href^='/silences/new']")


def test_the_list_page_refreshes_itself(oncall, browser) -> None:  # noqa: ANN001
    from selenium.webdriver.common.by import By

    d, _, _ = oncall
    browser.get(f"{d.url}/?q=node%3D%22gpu-03%22&refresh=2")
    meta = browser.find_element(By.CSS_SELECTOR, "meta[http-equiv=refresh]").get_attribute("content")
    assert meta == "2"
    assert "updated" in browser.find_element(By.ID, "updated").text
    browser.execute_script("window.__before_refresh = 1")
    assert wait_for(lambda: browser.execute_script("return window.__before_refresh") is None, 15)
    assert "refresh=2" in browser.current_url
    browser.get(f"{d.url}/silences/new")
    assert not browser.find_elements(By.CSS_SELECTOR, "meta[http-equiv=refresh]")  # never on a form


def test_the_stylesheet_meets_wcag_aa_in_chromium(oncall, browser) -> None:  # noqa: ANN001
    """Every element with text on the alert list: its computed colour against the first opaque
    background behind it is at least 4.5:1."""
    from test_console_contrast import ratio

    d, _, _ = oncall
    browser.set_window_size(1440, 900)
    browser.get(f"{d.url}/?state=all&group=none")
    pairs = browser.execute_script("""
      const out = new Set();
      const bg = el => { for (; el; el = el.parentElement) { const c = getComputedStyle(el).backgroundColor;
                         if (c && c !== 'rgba(0, 0, 0, 0)' && c !== 'transparent') return c; } return 'rgb(255, 255, 255)'; };
      for (const el of document.querySelectorAll('body *')) {
        if (![...el.childNodes].some(n => n.nodeType === 3 && n.textContent.trim())) continue;
        out.add(getComputedStyle(el).color + '|' + bg(el));
      }
      return [...out];""")
    bad = [p for p in pairs if ratio(*p.split("|")) < 4.5]
    assert pairs and not bad, bad


def test_the_alert_with_the_5kb_label_shows_it_whole_without_sideways_scroll(oncall, browser) -> None:  # noqa: ANN001
    d, auth, _ = oncall
    [long] = [a for a in httpx.get(f"{d.url}/api/v1/alerts", headers=auth, timeout=30).json()["data"]
              if a["labels"].get("blob")]
    for width, height in ((1440, 900), (390, 844)):
        browser.set_window_size(width, height)
        browser.get(f"{d.url}/alerts/{long['fingerprint']}")
        assert LONG in browser.execute_script("return document.body.textContent")
        scroll, inner = _no_sideways_scroll(browser)
        _shot(browser, f"long-label-{width}")
        assert scroll <= inner, f"{scroll} px wide in a {inner} px window"


def test_the_other_pages_fit_a_phone(oncall, browser) -> None:  # noqa: ANN001
    d, _, _ = oncall
    browser.set_window_size(390, 844)
    for page in ("/targets", "/rules", "/silences", "/silences/new"):
        browser.get(f"{d.url}{page}")
        scroll, inner = _no_sideways_scroll(browser)
        assert scroll <= inner, f"{page}: {scroll} px wide in a {inner} px window"
