"""Preemption notices from the cloud's instance metadata service.

A watcher's ``poll()`` returns a :class:`Notice` once the instance is scheduled to go away,
else ``None``. :func:`start_watcher` polls in a daemon thread and calls back once; the trainer
treats that exactly like a local SIGTERM (emergency checkpoint, leave at the step boundary).

- AWS (documented at docs.aws.amazon.com, "Spot Instance interruption notices"): IMDSv2 token
  from ``PUT /latest/api/token``, then ``GET /latest/meta-data/spot/instance-action``: 404
  while nothing is scheduled, 200 with ``{"action": "terminate"|"stop"|"hibernate",
  "time": "2017-09-18T08:22:00Z"}`` two minutes before the interruption.
- GCP (cloud.google.com, "Detect if a VM instance was preempted"):
  ``GET /computeMetadata/v1/instance/preempted`` with ``Metadata-Flavor: Google``: ``FALSE``,
  then ``TRUE`` when the 30-second preemption notice starts.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from spottrain.errors import UnknownNameError

AWS_METADATA = "http://169.254.169.254"
GCP_METADATA = "http://metadata.google.internal"
GCP_NOTICE_S = 30.0


@dataclass(frozen=True, kw_only=True)
class Notice:
    source: str
    action: str
    deadline_s: float | None
    """Unix time at which the instance goes away, when the cloud says so."""


class PreemptionWatcher(Protocol):
    def poll(self) -> Notice | None: ...


def parse_aws_instance_action(body: str) -> Notice:
    """Parse the body of ``spot/instance-action``."""
    data = json.loads(body)
    when = data.get("time")
    deadline = datetime.fromisoformat(when.replace("Z", "+00:00")).timestamp() if when else None
    return Notice(source="aws", action=str(data.get("action", "terminate")), deadline_s=deadline)


def parse_gcp_preempted(body: str, *, now_s: float | None = None) -> Notice | None:
    """Parse the body of ``instance/preempted`` (``TRUE`` / ``FALSE``)."""
    if body.strip().upper() != "TRUE":
        return None
    return Notice(source="gcp", action="preempt", deadline_s=(now_s or time.time()) + GCP_NOTICE_S)


class AwsSpotWatcher:
    """Polls the EC2 instance metadata service (IMDSv2)."""

    def __init__(self, base_url: str = AWS_METADATA, *, timeout_s: float = 1.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self._token: str | None = None

    def _get_token(self) -> str:
        req = urllib.request.Request(f"{self.base_url}/latest/api/token", method="PUT",
                                     headers={"X-aws-ec2-metadata-token-ttl-seconds": "21600"})
        with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
            return resp.read().decode().strip()

    def poll(self) -> Notice | None:
        try:
            if self._token is None:
                self._token = self._get_token()
            req = urllib.request.Request(f"{self.base_url}/latest/meta-data/spot/instance-action",
                                         headers={"X-aws-ec2-metadata-token": self._token})
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                return parse_aws_instance_action(resp.read().decode())
        except urllib.error.HTTPError as exc:
            if exc.code == 401:  # token expired: fetch a new one next time
                self._token = None
            return None
        except (urllib.error.URLError, OSError, ValueError):
            return None


class GcpPreemptionWatcher:
    """Polls the GCE metadata server."""

    def __init__(self, base_url: str = GCP_METADATA, *, timeout_s: float = 1.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s

    def poll(self) -> Notice | None:
        req = urllib.request.Request(f"{self.base_url}/computeMetadata/v1/instance/preempted",
                                     headers={"Metadata-Flavor": "Google"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                return parse_gcp_preempted(resp.read().decode())
        except (urllib.error.URLError, OSError, ValueError):
            return None


WATCHERS = {"aws": AwsSpotWatcher, "gcp": GcpPreemptionWatcher}


def make_watcher(cloud: str, base_url: str | None = None) -> PreemptionWatcher:
    try:
        cls = WATCHERS[cloud]
    except KeyError:
        raise UnknownNameError("notice source", cloud, WATCHERS) from None
    return cls(base_url) if base_url else cls()


def start_watcher(watcher: PreemptionWatcher, on_notice: Callable[[Notice], None], *,
                  interval_s: float = 1.0) -> threading.Event:
    """Poll in a daemon thread; call ``on_notice`` once. Set the returned event to stop."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            notice = watcher.poll()
            if notice is not None:
                on_notice(notice)
                return
            stop.wait(interval_s)

    threading.Thread(target=loop, name="spottrain-notice", daemon=True).start()
    return stop
