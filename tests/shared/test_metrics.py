"""Metrics: the documented names are served over real HTTP, the Redis collector, rates, status view."""
from __future__ import annotations

import io
import re
import urllib.request

import pytest

pytest.importorskip("prometheus_client")

from argosy.shared.metrics import (COUNTERS, RateTracker, ServiceMetrics, metrics_from_redis, read_autoscale_decisions,  # noqa: E402
                            record_autoscale, serve_registry)
from argosy.shared.redis_server import free_port  # noqa: E402

NAME_RE = re.compile(r"^argosy_[a-z_]+$")


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        assert r.status == 200
        return r.read().decode()


def samples(text: str) -> dict[str, float]:
    """``{'name{labels}': value}`` of a Prometheus text exposition, labels sorted by name."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            out[canon(key)] = float(value)
    return out


def canon(key: str) -> str:
    if "{" not in key:
        return key
    name, labels = key[:-1].split("{", 1)
    return name + "{" + ",".join(sorted(re.findall(r'[a-z_]+="[^"]*"', labels))) + "}"


def get(s: dict, key: str) -> float:
    return s[canon(key)]


def test_catalogue_follows_prometheus_conventions():
    names = {s.name for s in COUNTERS.values()}
    for n in names:
        assert NAME_RE.match(n) and n.endswith("_total"), n
        if "seconds" in n:
            assert n.endswith("_seconds_total"), n
        if "bytes" in n:
            assert n.endswith("_bytes_total"), n
    for documented in ("argosy_sampler_batches_total", "argosy_sampled_edges_total", "argosy_trainer_idle_seconds_total",
                       "argosy_loader_feature_bytes_total", "argosy_send_stall_seconds_total"):
        assert documented in names
    # every counter services push today has an entry
    for field in ("sampler_batches", "sampled_edges", "remote_neighbors", "sample_seconds", "sampled_seeds",
                  "loader_batches", "feature_bytes", "feature_rows", "remote_feature_rows", "load_seconds",
                  "bad_messages", "reclaimed_batches"):
        assert field in COUNTERS


def test_service_endpoint_serves_documented_names_over_http():
    m = ServiceMetrics("sampler", "sampler-0", "job-a")
    port = m.start_http(free_port())
    try:
        m.inc("batches", 3)                               # role prefix added
        m.inc_many({"sampled_edges": 1200.0, "sample_seconds": 0.25, "not_a_metric": 5})
        m.observe_stall(0.5)
        m.observe_remote_fraction(0.3)
        m.set_queue_depth("sampler_loader", 4)
        text = scrape(port)
    finally:
        m.stop_http()
    s = samples(text)
    lab = 'job="job-a",role="sampler",service_id="sampler-0"'
    assert get(s, f"argosy_sampler_batches_total{{{lab}}}") == 3
    assert get(s, f"argosy_sampled_edges_total{{{lab}}}") == 1200
    assert get(s, f"argosy_sampler_busy_seconds_total{{{lab}}}") == 0.25
    assert get(s, f'argosy_send_stall_seconds_total{{{lab},hop="sampler_loader"}}') == 0.5
    assert get(s, f'argosy_queue_depth{{{lab},hop="sampler_loader"}}') == 4
    assert get(s, f"argosy_batch_remote_fraction_count{{{lab}}}") == 1
    assert canon(f"argosy_heartbeat_timestamp_seconds{{{lab}}}") in s
    assert "# TYPE argosy_sampler_batches_total counter" in text
    assert m.totals == {"sampler_batches": 3.0, "sampled_edges": 1200.0, "sample_seconds": 0.25,
                        "sampler_send_stall_seconds": 0.5}


def test_trainer_idle_and_port_off():
    m = ServiceMetrics("trainer", "trainer-0", "j")
    assert m.start_http(0) is None and m.start_http(None) is None      # off
    m.observe_idle(1.5)
    m.observe_compute(4.5)
    m.inc("batches", 7)
    text = m.exposition()
    assert 'argosy_trainer_idle_seconds_total{job="j",role="trainer",service_id="trainer-0"} 1.5' in text
    assert 'argosy_trainer_compute_seconds_total{job="j",role="trainer",service_id="trainer-0"} 4.5' in text
    assert 'argosy_trainer_batches_total{job="j",role="trainer",service_id="trainer-0"} 7.0' in text
    with pytest.raises(KeyError, match="unknown metric"):
        m.inc("no_such_thing")


def test_metrics_from_redis_over_http(redis_url):
    from argosy.shared.coord import Coordinator
    coord = Coordinator(redis_url, "metrics-http")
    coord.delete_job()
    coord.incr(sampler_batches=12, sampled_edges=3400, feature_bytes=2**20, trainer_idle_seconds=2.0,
               sampler_send_stall_seconds=0.75)
    coord.register("sampler", "sampler-0", {"parts": [0]}, interval=0.2, ttl=5)
    coord.append_epoch({"epoch": 0, "trainer_idle_fraction": 0.25})
    coord.ensure_groups(2)
    coord.publish_work([(0, {"x": 1}), (1, {"x": 2}), (1, {"x": 3})])
    record_autoscale(coord, replicas={"sampler": 3})
    server, port = serve_registry(metrics_from_redis(coord), free_port())
    try:
        import time
        time.sleep(0.5)                               # first heartbeat
        s = samples(scrape(port))
    finally:
        server.shutdown()
        coord.deregister("sampler", "sampler-0")
    assert get(s, 'argosy_sampler_batches_total{job="metrics-http",role="sampler",service_id="all"}') == 12
    assert get(s, 'argosy_sampled_edges_total{job="metrics-http",role="sampler",service_id="all"}') == 3400
    assert get(s, 'argosy_loader_feature_bytes_total{job="metrics-http",role="loader",service_id="all"}') == 2**20
    assert get(s, 'argosy_trainer_idle_seconds_total{job="metrics-http",role="trainer",service_id="all"}') == 2
    assert get(s, 'argosy_send_stall_seconds_total{job="metrics-http",role="sampler",service_id="all",hop="sampler_loader"}') == 0.75
    assert get(s, 'argosy_services_up{job="metrics-http",role="sampler"}') == 1
    assert get(s, 'argosy_work_backlog_items{job="metrics-http"}') == 3
    assert get(s, 'argosy_work_pending_items{job="metrics-http"}') == 0
    assert get(s, 'argosy_epochs_completed{job="metrics-http"}') == 1
    assert get(s, 'argosy_trainer_idle_fraction{job="metrics-http",role="trainer",service_id="all"}') == 0.25
    assert get(s, 'argosy_autoscale_replicas{job="metrics-http",role="sampler"}') == 3
    assert 0 <= get(s, 'argosy_service_heartbeat_age_seconds{job="metrics-http",role="sampler",service_id="sampler-0"}') < 5
    coord.delete_job()
    coord.close()


def test_rate_tracker_windows():
    rt = RateTracker(window=5)
    for t in range(0, 21):
        rt.add(float(t), {"b": 2.0 * t if t <= 10 else 20.0 + 10 * (t - 10)})
    assert rt.rate("b") == pytest.approx(10.0)         # last 5 s: 10 batches/s
    assert rt.rate("b", window=20) == pytest.approx(6.0)
    assert rt.rate("missing") == 0.0
    assert RateTracker().rate("b") == 0.0


def test_status_view_renders_services_rates_and_decisions(redis_url):
    from argosy.shared.coord import Coordinator
    from argosy.shared.status_view import render_status, status_dict, watch_status
    coord = Coordinator(redis_url, "status-view")
    coord.delete_job()
    coord.set_state("running")
    coord.set_phase(epoch=2, phase="train", planned=10)
    coord.register("sampler", "sampler-0", {"parts": [0]}, interval=0.2, ttl=5)
    m = ServiceMetrics("sampler", "sampler-0", "status-view")
    import time
    time.sleep(0.4)
    m.inc("batches", 10)
    m.inc("sample_seconds", 0.5)
    m.publish(coord)
    coord.incr(sampler_batches=10, loader_batches=10, sampled_edges=1000, remote_neighbors=250, feature_bytes=1e6)
    record_autoscale(coord, decision={"t": time.time(), "action": "add", "role": "sampler", "replicas": 2,
                                      "reason": "trainer idle 38% > 10%: add 1 sampler"}, replicas={"sampler": 2})
    text = render_status(coord, time.time())
    assert "job status-view: running" in text and "epoch 2 train" in text
    assert "sampler-0" in text and "alive" in text
    assert "remote fraction 0.250" in text
    assert "trainer idle 38% > 10%: add 1 sampler" in text and "replicas sampler 2" in text
    d = status_dict(coord)
    svc = [s for s in d["services"] if s["id"] == "sampler-0"][0]
    assert svc["batches_per_second"] > 0 and not svc.get("rate_estimated")
    buf = io.StringIO()
    watch_status(coord, interval=0.1, as_json=True, out=buf, iterations=2)
    assert len(buf.getvalue().strip().splitlines()) == 2
    assert read_autoscale_decisions(coord)[0]["role"] == "sampler"
    coord.deregister("sampler", "sampler-0")
    coord.delete_job()
    coord.close()


def test_grafana_dashboard_uses_only_exported_names():
    import json
    from pathlib import Path
    from argosy.shared.metrics import GAUGES, REMOTE_FRACTION
    dash = json.loads((Path(__file__).resolve().parents[2] / "k8s" / "dashboards" / "argosy.json").read_text())
    known = {s.name for s in COUNTERS.values()} | {n for n, _ in GAUGES.values()} | {REMOTE_FRACTION[0]}
    used = set()
    for p in dash["panels"]:
        for t in p["targets"]:
            used |= set(re.findall(r"argosy_[a-z_]+", t["expr"]))
    assert used and used <= known, used - known
    assert "argosy_trainer_idle_seconds_total" in used and "argosy_autoscale_replicas" in used


def test_push_totals_sends_increments_per_scope(redis_url):
    from argosy.shared.coord import Coordinator
    coord = Coordinator(redis_url, "push-totals")
    coord.delete_job()
    m = ServiceMetrics("trainer", "trainer-0", "push-totals")
    assert m.push_totals(coord, (0, "train"), trainer_idle_seconds=1.0, trainer_batches=2)
    assert not m.push_totals(coord, (0, "train"), trainer_idle_seconds=1.5, trainer_batches=3)   # within 1 s
    assert m.push_totals(coord, (0, "train"), force=True, trainer_idle_seconds=2.0, trainer_batches=4)
    assert m.push_totals(coord, (1, "train"), trainer_idle_seconds=0.5, trainer_batches=1)      # new phase: from 0
    assert coord.metrics() == {"trainer_idle_seconds": 2.5, "trainer_batches": 5.0}
    assert m.totals == {"trainer_idle_seconds": 2.5, "trainer_batches": 5.0}
    coord.delete_job()
    coord.close()
