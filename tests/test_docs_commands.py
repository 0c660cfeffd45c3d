"""Docs that run as written: every shell command in the READMEs below is listed here with how it is
exercised, and a README command missing from the list (or a listed one that left the README) fails.

Each command's programs must exist under the names Debian and this repo ship, each ``--flag`` must be
in the program's own ``--help``; the checks run here, the servers are started on free loopback ports
and must listen on loopback only; the rest point at the test that runs them (which must exist)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from functools import cache
from pathlib import Path

import httpx
import psutil
import pytest

from harness.ports import free_port

ROOT = Path(__file__).resolve().parents[1]
DOCS = ("README.md", "prometheus/README.md", "alerting/README.md", "monitor/README.md")
BIN = Path(sys.executable).parent
RUN, SERVE = "run", "serve"  # run here and expect exit 0 / start, wait ready, check listeners, stop
HA = "tests/e2e/test_ha_pair.py::test_one_message_per_outage_and_its_resolve_while_a_monitor_or_a_peer_dies"
LIVE = "tests/prometheus/test_alertmanager_live.py::test_one_page_per_trainer_sigkill_with_alertmanager_on_both_sides"

# normalised command (shlex tokens joined by spaces, comments dropped) -> RUN, SERVE or the covering test
COVERED: dict[str, str] = {
    # README.md
    "make demo": "tests/e2e/test_demo_smoke.py::test_dataflow_collapse_is_detected_correlated_and_delivered_once",
    "make test": "Makefile",
    "verl-train --config ppo_tiny --metrics-port 8000 --checkpoint-dir runs/ckpt trainer.total_steps=1000000": LIVE,
    "verl-train --config ppo_tiny --metrics-port 8000 trainer.total_steps=1000000 faults.reward_oom_at_step=40":
        "tests/e2e/test_demo_smoke.py::test_dataflow_collapse_is_detected_correlated_and_delivered_once",
    "verl-ops robot wecom --port 9201": "tests/harness/test_robot_command.py::test_the_robot_command_receives_verl_alert_test",
    "verl-alert test --config alerting-standin.yaml --receiver ops-wecom":
        "tests/harness/test_robot_command.py::test_the_robot_command_receives_verl_alert_test",
    "verl-monitor run --rules demo --notify-config alerting-standin.yaml":
        "tests/harness/test_demo_profile.py::test_the_shipped_demo_profile_is_the_demos_and_run_takes_it",
    "curl -s 127.0.0.1:8000/metrics | grep rollout_buffer": LIVE,
    "verl-monitor run": "tests/monitor/test_monitor_one_page.py::test_default_config_watches_the_local_trainer",
    "verl-alert test --config alerting.yaml --receiver ops-wecom":
        "tests/alerting/test_cli.py::test_test_command_ok_and_wrong_secret",
    "verl-monitor run --target 127.0.0.1:8000 --notify-config alerting.yaml":
        "tests/monitor/test_monitor_one_page.py::test_run_without_config_prints_alerts",
    "verl-monitor run --config monitor.yaml":
        "tests/monitor/test_monitor_daemon.py::test_kill_9_and_restart_mid_incident_restores_firing_alert_without_duplicates",
    # README.md "Running two monitors": harness.ha_pair runs each of these from the example configs
    "verl-alert serve --config alerting/examples/ha-delivery.yaml --listen 127.0.0.1:9096": HA,
    "verl-alert serve --config alerting/examples/ha-delivery.yaml --listen 127.0.0.1:9196": HA,
    "prometheus-alertmanager --config.file=prometheus/ha/alertmanager-a.yml --storage.path=runs/ha/am-a "
    "--web.listen-address=127.0.0.1:9093 --cluster.listen-address=127.0.0.1:9094 --cluster.peer=127.0.0.1:9194 "
    "--cluster.advertise-address=127.0.0.1:9094": HA,
    "prometheus-alertmanager --config.file=prometheus/ha/alertmanager-b.yml --storage.path=runs/ha/am-b "
    "--web.listen-address=127.0.0.1:9193 --cluster.listen-address=127.0.0.1:9194 --cluster.peer=127.0.0.1:9094 "
    "--cluster.advertise-address=127.0.0.1:9194": HA,
    "prometheus --config.file=prometheus/ha/prometheus.yml --web.listen-address=127.0.0.1:9090 "
    "--storage.tsdb.path=runs/ha/prometheus": HA,
    "verl-monitor run --config monitor/examples/ha-pair.yaml --replica a --listen 127.0.0.1:9105 "
    "--state-db runs/ha/monitor-a/state.db --peer 127.0.0.1:9106": HA,
    "verl-monitor run --config monitor/examples/ha-pair.yaml --replica b --listen 127.0.0.1:9106 "
    "--state-db runs/ha/monitor-b/state.db --peer 127.0.0.1:9105": HA,
    "python -m harness.ha_pair": HA,
    # prometheus/README.md
    "prometheus --config.file=prometheus/prometheus.yml --web.listen-address=127.0.0.1:9090 "
    "--storage.tsdb.path=runs/prometheus": SERVE,
    "prometheus-alertmanager --config.file=prometheus/alertmanager.yml --web.listen-address=127.0.0.1:9093 "
    "--cluster.listen-address= --storage.path=runs/alertmanager": SERVE,
    "promtool check config prometheus/prometheus.yml": RUN,
    "promtool check rules prometheus/rules/*.yml": RUN,
    "amtool check-config prometheus/alertmanager.yml": RUN,
    "cd prometheus/tests && promtool test rules *.test.yml": RUN,
    # alerting/README.md
    "verl-alert test --config alerting.yaml --receiver ops-dingtalk":
        "tests/alerting/test_cli.py::test_test_command_ok_and_wrong_secret",
    "verl-alert render --alert alert.json --receiver ops-dingtalk --config alerting.yaml --lang zh-CN":
        "tests/alerting/test_cli.py::test_render_en_and_zh",
    'verl-alert silence add alertname="GPUOverTemperature" node=~"gpu-0." --duration 2h --comment why '
    "--db state/alerting.db": "tests/alerting/test_cli.py::test_silence_add_list_expire_on_state_db",
    "verl-alert silence list --db state/alerting.db": "tests/alerting/test_cli.py::test_silence_add_list_expire_on_state_db",
    "verl-alert silence list --api http://127.0.0.1:9105 --token $MONITOR_TOKEN":
        "tests/alerting/test_cli.py::test_silence_against_monitor_api",
    "verl-alert silence expire ID --db state/alerting.db":
        "tests/alerting/test_cli.py::test_silence_add_list_expire_on_state_db",
    # monitor/README.md
    "verl-monitor run --target gpu-08:8000 --target gpu-09:8000 --notify-config alerting.yaml":
        "tests/monitor/test_monitor_one_page.py::test_default_config_watches_the_local_trainer",
    "verl-monitor replay --input export.json --output out.jsonl --notify-config alerting.yaml --cluster llama3-1k-gpu":
        "tests/monitor/test_monitor_replay.py::test_notify_config_delivers_incident_and_drains",
    "verl-monitor --help": RUN,
    # volcengine verl's own trainer (not installed here): the setup line is checked against what the tail reads
    'python -m verl.trainer.main_ppo ... trainer.logger=["console","file"] '
    "+ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH=/shared/logs/exp.jsonl":
        "tests/monitor/test_monitor_verl_daemon.py::test_readme_setup_line_matches_the_sidecar_config",
}
# programs whose flags are checked against their --help (the rest only have to exist)
OURS = {"verl-train", "verl-monitor", "verl-alert", "verl-ckpt", "verl-ops"}
THEIRS = {"prometheus", "promtool", "prometheus-alertmanager", "amtool"}
SHELL = {"curl", "grep", "python"}  # python: volcengine verl's entry point in monitor/README.md


def doc_commands(doc: str) -> list[tuple[str, str]]:
    """(normalised, raw) for every line of every ```bash block, continuation lines joined."""
    out, in_bash, pending = [], False, ""
    for line in (ROOT / doc).read_text(encoding="utf-8").splitlines():
        fence = re.match(r"^```(\w*)\s*$", line)
        if fence:
            in_bash = not in_bash and fence.group(1) in ("bash", "sh", "shell", "console")
            continue
        if not in_bash:
            continue
        pending += line.rstrip("\\") + " " if line.endswith("\\") else line
        if line.endswith("\\"):
            continue
        raw, pending = pending.strip(), ""
        tokens = shlex.split(raw, comments=True)
        if tokens:
            out.append((" ".join(tokens), raw))
    return out


def all_commands() -> dict[str, str]:
    return {norm: raw for doc in DOCS for norm, raw in doc_commands(doc)}


def segments(norm: str) -> list[list[str]]:
    out, cur = [], []
    for tok in shlex.split(norm):
        if tok in ("&&", "|", ";", "||"):
            out.append(cur)
            cur = []
        else:
            cur.append(tok)
    return [*out, cur]


def test_every_readme_command_is_covered() -> None:
    found = set(all_commands())
    missing = sorted(found - set(COVERED))
    stale = sorted(set(COVERED) - found)
    assert not missing, "README commands nobody exercises; add them to COVERED:\n" + "\n".join(missing)
    assert not stale, "COVERED lists commands no README has any more:\n" + "\n".join(stale)


def test_covering_tests_exist() -> None:
    for cmd, how in COVERED.items():
        if "::" not in how:
            continue
        path, name = how.split("::")
        assert (ROOT / path).is_file() and f"def {name}(" in (ROOT / path).read_text(), f"{cmd}: {how} is gone"


def program(name: str) -> str | None:
    local = BIN / name
    return str(local) if local.exists() else shutil.which(name)


@cache
def help_text(*argv: str) -> str:
    res = subprocess.run([*argv, "--help"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    return res.stdout + res.stderr


def _help_for(exe: str, args: list[str]) -> str:
    """Help of the deepest subcommand among the leading words (argparse or kingpin)."""
    words = [a for a in args[:2] if re.fullmatch(r"[a-z][a-z-]*", a)]
    for n in range(len(words), -1, -1):
        text = help_text(exe, *words[:n])
        if "usage" in text.lower() and "unknown" not in text.lower() and "invalid choice" not in text:
            return text
    return help_text(exe)


def test_programs_and_flags_exist() -> None:
    makefile = (ROOT / "Makefile").read_text()
    problems = []
    for norm in COVERED:
        for seg in segments(norm):
            name, args = seg[0], seg[1:]
            if name == "cd":  # a shell builtin: the directory must exist
                if not (ROOT / args[0]).is_dir():
                    problems.append(f"{norm}: no directory {args[0]}")
                continue
            if name == "make":
                problems += [f"{norm}: no make target {t}" for t in args if not re.search(rf"^{t}:", makefile, re.M)]
                continue
            exe = program(name)
            if exe is None:
                problems.append(f"{norm}: program {name} not found (the Debian or venv name? `make promtool` installs prometheus and prometheus-alertmanager)")
                continue
            if name not in OURS | THEIRS:
                assert name in SHELL, f"{norm}: unexpected program {name}; list it in OURS, THEIRS or SHELL"
                continue
            text = _help_for(exe, args)
            for flag in (a.split("=", 1)[0] for a in args if a.startswith("--")):
                if flag not in text:
                    problems.append(f"{norm}: {name} has no flag {flag}")
    assert problems == []


def test_check_commands_run() -> None:
    raw = all_commands()
    for norm, how in COVERED.items():
        if how != RUN:
            continue
        res = subprocess.run(["bash", "-c", raw[norm]], cwd=ROOT, capture_output=True, text=True, timeout=120,
                             env={**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"})
        assert res.returncode == 0, f"{norm}:\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}"


@pytest.mark.slow
def test_documented_servers_start_and_listen_on_loopback_only(tmp_path: Path) -> None:
    """The README's prometheus / prometheus-alertmanager commands, as written except for free ports, run
    from a directory holding the repo's prometheus/: ready, and no listener off loopback (no :9094)."""
    (tmp_path / "prometheus").symlink_to(ROOT / "prometheus")
    for norm, how in COVERED.items():
        if how != SERVE:
            continue
        port = free_port()
        argv = [re.sub(r"127\.0\.0\.1:\d+", f"127.0.0.1:{port}", a) for a in shlex.split(norm)]
        assert argv != shlex.split(norm), f"{norm}: no 127.0.0.1 listen address to move"
        proc = subprocess.Popen([program(argv[0]) or argv[0], *argv[1:]], cwd=tmp_path, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            deadline, ready = time.time() + 30, False
            while time.time() < deadline and proc.poll() is None and not ready:
                try:
                    ready = httpx.get(f"http://127.0.0.1:{port}/-/ready", timeout=2).status_code == 200
                except httpx.HTTPError:
                    time.sleep(0.3)
            assert ready, f"{norm}: not ready ({proc.poll()}): {proc.stderr.read() if proc.poll() is not None else ''}"
            time.sleep(1)  # clustering, when on, binds its gossip port after the web listener
            listening = {(c.laddr.ip, c.laddr.port) for p in [psutil.Process(proc.pid), *psutil.Process(proc.pid).children()]
                         for c in p.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN}
            assert listening and all(ip in ("127.0.0.1", "::1") for ip, _ in listening), (norm, listening)
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=20)
