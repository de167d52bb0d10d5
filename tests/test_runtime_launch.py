"""SkyPilot task YAML (validated by SkyPilot's own schema), notice watchers against a fake
metadata server on 127.0.0.1, fault-schedule parsing and `spottrain run` input errors."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
import yaml

from spottrain.errors import InputError
from spottrain.runtime.faults import load_injection_trace, parse_injections
from spottrain.runtime.skypilot import SkyTask, task_config, task_from_plan, write_task
from spottrain.runtime.watcher import (AwsSpotWatcher, GcpPreemptionWatcher, parse_aws_instance_action,
                                       parse_gcp_preempted, start_watcher)

from sim_plans import make_plan


# 4 x p3.2xlarge spot in us-east-1a
PLAN = make_plan(nodes=4, zone="us-east-1a", deadline_h=None, interval_s=900.0)


def _sky_validate(config: dict) -> None:
    schemas = pytest.importorskip("sky.utils.schemas")
    from sky.utils import common_utils

    common_utils.validate_schema(config, schemas.get_task_schema(), "Invalid task YAML: ")


def test_task_yaml_validates_against_skypilot_schema(tmp_path: Path) -> None:
    task = task_from_plan(PLAN, name="resnet-job", command=["python", "train.py", "--lr", "0.1"],
                          bucket="s3://my-ckpts", env={"SPOTTRAIN_JOB_ID": "resnet-job"})
    path = write_task(task, tmp_path / "task.yaml")
    config = yaml.safe_load(path.read_text())
    _sky_validate(config)
    assert config["num_nodes"] == 4
    assert config["resources"]["use_spot"] is True
    assert config["resources"]["accelerators"] == "V100:1"
    assert config["resources"]["region"] == "us-east-1"
    assert config["file_mounts"]["/spottrain-checkpoints"] == {"mode": "MOUNT", "source": "s3://my-ckpts"}
    assert config["envs"]["SPOTTRAIN_CHECKPOINT_DIR"].startswith("/spottrain-checkpoints/")
    assert config["envs"]["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"
    assert "--rdzv-backend=c10d" in config["run"] and "train.py --lr 0.1" in config["run"]
    with pytest.raises(InputError, match="exists"):
        write_task(task, path)


def test_user_command_cannot_inject_shell(tmp_path: Path) -> None:
    evil = ["python", "train.py", "; rm -rf / #", "$(curl evil)", "`id`"]
    config = task_config(SkyTask(name="job", command=evil, num_nodes=1, accelerators=None, use_spot=True))
    _sky_validate(config)
    torchrun_line = [line for line in config["run"].splitlines() if line.startswith("torchrun")][0]
    assert torchrun_line.endswith(" || rc=$?")  # the script reads the exit code (an input error ends with 87)
    tokens = shlex.split(torchrun_line.removesuffix(" || rc=$?"))
    assert tokens[-6:] == ["-m", "spottrain.runtime.torchrun_guard", *evil[1:]]  # each token verbatim, one argument
    with pytest.raises(InputError, match="job name"):
        task_config(SkyTask(name="x; rm -rf /", command=["python", "t.py"], num_nodes=1, accelerators=None, use_spot=True))
    with pytest.raises(InputError, match="bucket"):
        task_config(SkyTask(name="j", command=["python", "t.py"], num_nodes=1, accelerators=None, use_spot=True,
                            bucket="s3://x; rm -rf /"))


def test_no_credentials_reach_the_spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "SUPERSECRETVALUE")
    monkeypatch.setenv("SPOTTRAIN_JOB_ID", "job")
    with pytest.raises(InputError, match="only SPOTTRAIN_"):
        task_config(SkyTask(name="j", command=["python", "t.py"], num_nodes=1, accelerators=None, use_spot=True,
                            env={"AWS_SECRET_ACCESS_KEY": "x"}))
    plan_path = tmp_path / "plan.json"
    PLAN.save(plan_path)
    out = subprocess.run([sys.executable, "-m", "spottrain.cli.main", "run", "--backend", "skypilot",
                          "--skypilot-mode", "managed-torchrun", "--plan",
                          str(plan_path), "-o", str(tmp_path / "t.yaml"), "--bucket", "my-bucket", "--json", "--",
                          "python", "train.py"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    text = (tmp_path / "t.yaml").read_text()
    assert "SUPERSECRETVALUE" not in text and "SUPERSECRETVALUE" not in out.stdout + out.stderr
    assert json.loads(out.stdout)["launch"].startswith("sky jobs launch")
    _sky_validate(yaml.safe_load(text))


class _Meta(BaseHTTPRequestHandler):
    action: dict | None = None
    preempted = "FALSE"

    def log_message(self, *args: object) -> None:
        pass

    def do_PUT(self) -> None:
        ok = self.path == "/latest/api/token" and self.headers.get("X-aws-ec2-metadata-token-ttl-seconds")
        self.send_response(200 if ok else 400)
        self.end_headers()
        self.wfile.write(b"TOKEN123")

    def do_GET(self) -> None:
        if self.path == "/latest/meta-data/spot/instance-action":
            if self.headers.get("X-aws-ec2-metadata-token") != "TOKEN123":
                self.send_response(401)
                self.end_headers()
                return
            if _Meta.action is None:
                self.send_response(404)
                self.end_headers()
                return
            body = json.dumps(_Meta.action).encode()
        elif self.path == "/computeMetadata/v1/instance/preempted":
            if self.headers.get("Metadata-Flavor") != "Google":
                self.send_response(403)
                self.end_headers()
                return
            body = _Meta.preempted.encode()
        else:
            self.send_response(404)
            self.end_headers()
            return
        self.send_response(200)
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture()
def metadata_server():
    server = HTTPServer(("127.0.0.1", 0), _Meta)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Meta.action, _Meta.preempted = None, "FALSE"
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_aws_watcher_sees_the_interruption_notice(metadata_server: str) -> None:
    w = AwsSpotWatcher(metadata_server)
    assert w.poll() is None  # 404: nothing scheduled
    _Meta.action = {"action": "terminate", "time": "2017-09-18T08:22:00Z"}
    notice = w.poll()
    assert notice is not None and notice.action == "terminate"
    assert notice.deadline_s == parse_aws_instance_action('{"action":"stop","time":"2017-09-18T08:22:00Z"}').deadline_s
    assert notice.deadline_s == 1505722920.0


def test_gcp_watcher_and_background_thread(metadata_server: str) -> None:
    w = GcpPreemptionWatcher(metadata_server)
    assert w.poll() is None
    got: list = []
    stop = start_watcher(w, got.append, interval_s=0.05)
    time.sleep(0.2)
    assert not got
    _Meta.preempted = "TRUE"
    deadline = time.time() + 5
    while not got and time.time() < deadline:
        time.sleep(0.02)
    stop.set()
    assert got and got[0].source == "gcp" and got[0].deadline_s > time.time()
    assert parse_gcp_preempted("FALSE") is None


def test_unreachable_metadata_is_not_a_notice() -> None:
    assert AwsSpotWatcher("http://127.0.0.1:9", timeout_s=0.2).poll() is None


def test_injection_parsing(tmp_path: Path) -> None:
    inj = parse_injections("kill:1@20s,sigterm:2@1m,kill:chief@step40,kill:0@ckpt", workers=4)
    assert [(i.kind, i.worker, i.time_s, i.at_step, i.on_checkpoint) for i in inj] == [
        ("kill", 1, 20.0, None, False), ("sigterm", 2, 60.0, None, False),
        ("kill", "chief", None, 40, False), ("kill", 0, None, None, True)]
    with pytest.raises(InputError, match="KIND:WORKER@TIME"):
        parse_injections("explode:1@3s")
    with pytest.raises(InputError, match="does not exist"):
        parse_injections("kill:7@3s", workers=4)
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps([{"time_s": 5, "worker": 0, "kind": "revoke"}, {"time_s": 2, "worker": 1, "kind": "notice"}]))
    got = load_injection_trace(trace, workers=2)
    assert [(i.time_s, i.kind) for i in got] == [(2.0, "sigterm"), (5.0, "kill")]
    trace.write_text('[{"time_s": "soon"}]')
    with pytest.raises(InputError, match="entry 0"):
        load_injection_trace(trace)


@pytest.mark.parametrize("args, message", [
    (["--backend", "local"], "nothing to run"),
    (["--example", "nope"], "unknown example"),
    (["--example", "mlp", "--inject", "kill:9@1s", "--workers", "2"], "does not exist"),
    (["--example", "mlp", "--policy", "replace-sam"], "did you mean replace-same"),
    (["--example", "mlp", "--backend", "skypilot"], "needs --plan"),
])
def test_cli_input_errors(args: list[str], message: str, tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "spottrain.cli.main", "run", *args], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    assert out.returncode == 2
    assert message in out.stderr and "Traceback" not in out.stderr
