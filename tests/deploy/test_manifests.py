"""Static checks of deploy/: compose, Dockerfile, Prometheus, Grafana, Kubernetes and the README.

Docker is not available to the suite, so nothing is started: the files are parsed and checked against
each other and against s3stream itself (serve's real flags parse the commands, StoreSettings validates
the options, parse_store_url the URLs, and the dashboard's metric names must exist in a store's
metric registries).
"""

from __future__ import annotations

import inspect
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import typer.main
import yaml

import s3stream
from s3stream.apps.cli import app
from s3stream.apps.cli.runners import serve
from s3stream.base.settings import StoreSettings
from s3stream.objectstore.url import parse_store_url

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "kubernetes"
SERVE_DEFAULT_METRICS_PORT = inspect.signature(serve).parameters["metrics_port"].default

# An exact version: x.y.z (optionally v-prefixed, with a variant suffix) or a MinIO release stamp.
_EXACT_TAG = re.compile(r"^(v?\d+\.\d+\.\d+([-.][A-Za-z0-9.-]+)?|RELEASE\.\d{4}-\d\d-\d\dT\d\d-\d\d-\d\dZ)$")


def _image_pinned(image: str) -> None:
    name, _, digest = image.partition("@")
    assert digest == "" or re.fullmatch(r"sha256:[0-9a-f]{64}", digest), image
    repo, sep, tag = name.rpartition(":")
    assert sep and "/" not in tag and repo, f"image {image!r} has no tag"
    assert tag != "latest" and _EXACT_TAG.match(tag), f"image {image!r} is not pinned to an exact version"


def _compose() -> dict[str, Any]:
    doc = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    assert isinstance(doc, dict)
    return doc


def _k8s() -> dict[str, dict[str, Any]]:
    """Kubernetes objects by kind (one of each kind in deploy/kubernetes)."""
    out: dict[str, dict[str, Any]] = {}
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            assert doc["kind"] not in out, f"two {doc['kind']} objects"
            out[doc["kind"]] = doc
    return out


def _serve_params(args: list[str]) -> dict[str, Any]:
    """``args`` (``serve ...``) parsed by the real ``s3stream serve`` command: unknown flags fail here."""
    assert args[0] == "serve", args
    command = typer.main.get_command(app).commands["serve"]  # type: ignore[attr-defined]
    with command.make_context("serve", list(args[1:])) as sub:
        return dict(sub.params)


def _options(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        assert sep, pair
        out[key] = value
    return out


# ------------------------------------------------------------------------------------------------ files


def test_every_yaml_file_parses_and_the_dashboard_is_json() -> None:
    paths = sorted([*DEPLOY.rglob("*.yml"), *DEPLOY.rglob("*.yaml")])
    assert len(paths) >= 9, paths
    for path in paths:
        docs = list(yaml.safe_load_all(path.read_text()))
        assert docs and all(isinstance(d, dict) for d in docs), path
    dashboard = json.loads((DEPLOY / "grafana" / "dashboards" / "s3stream.json").read_text())
    assert dashboard["uid"] and dashboard["panels"]


def test_readme_json_blocks_parse_and_say_what_aws_needs() -> None:
    text = (DEPLOY / "README.md").read_text()
    blocks = [json.loads(b) for b in re.findall(r"```json\n(.*?)```", text, re.S)]
    policy = next(b for b in blocks if "Statement" in b)
    actions = {a for st in policy["Statement"] for a in st["Action"]}
    assert {"s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:ListBucket", "s3:AbortMultipartUpload"} <= actions
    lifecycle = next(b for b in blocks if "Rules" in b)
    assert all("AbortIncompleteMultipartUpload" in r and "Expiration" not in r for r in lifecycle["Rules"])
    assert "No lifecycle expiry on the data prefix" in text
    for section in ("s3stream local-stack", "docker compose", "kubectl apply -k deploy/kubernetes"):
        assert section in text


# ------------------------------------------------------------------------------------------------ compose


def test_compose_images_are_pinned_and_minio_is_recent_enough() -> None:
    services = _compose()["services"]
    assert {"minio", "create-bucket", "s3stream", "prometheus", "grafana"} <= set(services)
    for name, svc in services.items():
        assert "image" in svc, f"service {name} has no pinned image"
        _image_pinned(svc["image"])
    release = services["minio"]["image"].split(":RELEASE.")[1]
    assert services["minio"]["image"].startswith("minio/minio:") and release[:10] >= "2025-09-07"
    assert services["create-bucket"]["image"].startswith("minio/mc:")
    assert services["s3stream"]["build"] == {"context": "..", "dockerfile": "deploy/Dockerfile"}


def test_dockerfile_is_pinned_slim_python_non_root_and_binds_metrics_publicly() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    bases = re.findall(r"^FROM\s+(\S+)", text, re.M)
    assert bases and all(b.startswith("python:3.11.") and "-slim" in b for b in bases), bases
    for base in bases:
        _image_pinned(base)
    users = re.findall(r"^USER\s+(\S+)", text, re.M)
    assert users and users[-1].split(":")[0] not in ("root", "0")
    for package in ("s3stream", "wal", "cleaner"):
        assert re.search(rf"^COPY {package} ", text, re.M), package
    assert re.search(r'^ENTRYPOINT \["s3stream"\]', text, re.M)
    cmd = json.loads(re.search(r"^CMD (\[.*?\])", text, re.M | re.S).group(1).replace("\\\n", ""))  # type: ignore[union-attr]
    params = _serve_params(cmd)
    assert params["metrics_host"] == "0.0.0.0" and params["metrics_port"] == SERVE_DEFAULT_METRICS_PORT
    assert params["listen"] == "0.0.0.0:9092" and "9092" in re.search(r"^EXPOSE (.*)$", text, re.M).group(1)  # type: ignore[union-attr]
    ignore = (DEPLOY / "Dockerfile.dockerignore").read_text()
    assert "!s3stream/**" in ignore and "!pyproject.toml" in ignore


def test_compose_wiring_lines_up_with_serve_minio_and_prometheus() -> None:
    services = _compose()["services"]
    app_svc = services["s3stream"]
    params = _serve_params(app_svc["command"])
    port = params["metrics_port"]
    assert port == SERVE_DEFAULT_METRICS_PORT and params["metrics_host"] == "0.0.0.0"
    assert f"127.0.0.1:{port}:{port}" in app_svc["ports"]
    # Kafka: bound on every interface inside the container, published on the host's loopback, and
    # advertised as the address host clients use
    assert params["listen"] == "0.0.0.0:9092" and params["advertised_listener"] == "127.0.0.1:9092"
    assert "127.0.0.1:9092:9092" in app_svc["ports"]
    StoreSettings.from_options(_options(params["option"] or []))
    assert _options(params["option"])["wal_dir"].startswith("/var/lib/s3stream/")
    assert any(v.endswith(":/var/lib/s3stream") for v in app_svc["volumes"])

    # The store: bucket created by create-bucket, endpoint = the minio service on its S3 API port.
    url = parse_store_url(app_svc["environment"]["S3STREAM_URL"])
    endpoint = urlsplit(url.params["endpoint_url"])
    minio_cmd = services["minio"]["command"]
    minio_port = int(minio_cmd[minio_cmd.index("--address") + 1].rsplit(":", 1)[1])
    assert (endpoint.hostname, endpoint.port) == ("minio", minio_port)
    assert f"127.0.0.1:{minio_port}:{minio_port}" in services["minio"]["ports"]
    creator = services["create-bucket"]
    assert creator["environment"]["S3STREAM_BUCKET"] == url.bucket_or_path
    assert f"http://minio:{minio_port}" in creator["command"][0]
    assert creator["depends_on"]["minio"]["condition"] == "service_healthy"
    assert app_svc["depends_on"]["create-bucket"]["condition"] == "service_completed_successfully"
    # The same MinIO user on both sides.
    assert app_svc["environment"]["AWS_ACCESS_KEY_ID"] == services["minio"]["environment"]["MINIO_ROOT_USER"]
    assert app_svc["environment"]["AWS_SECRET_ACCESS_KEY"] == services["minio"]["environment"]["MINIO_ROOT_PASSWORD"]

    prom = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    job = next(j for j in prom["scrape_configs"] if j["job_name"] == "s3stream")
    assert job.get("metrics_path", "/metrics") == "/metrics"
    assert job["static_configs"][0]["targets"] == [f"s3stream:{port}"]
    assert "./prometheus/prometheus.yml:/etc/prometheus/prometheus.yml:ro" in services["prometheus"]["volumes"]


def test_grafana_provisioning_points_at_prometheus_and_the_dashboard() -> None:
    services = _compose()["services"]
    grafana = services["grafana"]
    mounts = dict(v.rsplit(":", 1)[0].split(":", 1) for v in grafana["volumes"] if v.startswith("./"))
    assert mounts["./grafana/provisioning"] == "/etc/grafana/provisioning"
    sources = yaml.safe_load((DEPLOY / "grafana/provisioning/datasources/prometheus.yml").read_text())
    source = sources["datasources"][0]
    prom_port = int(services["prometheus"]["ports"][0].rsplit(":", 1)[1])
    assert source["type"] == "prometheus" and source["url"] == f"http://prometheus:{prom_port}"
    providers = yaml.safe_load((DEPLOY / "grafana/provisioning/dashboards/s3stream.yml").read_text())
    path = providers["providers"][0]["options"]["path"]
    assert mounts["./grafana/dashboards"] == path
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home.startswith(path + "/") and (DEPLOY / "grafana/dashboards" / Path(home).name).is_file()
    dashboard = json.loads((DEPLOY / "grafana/dashboards/s3stream.json").read_text())
    uids = {t["datasource"]["uid"] for p in dashboard["panels"] for t in p.get("targets", [])}
    assert uids == {source["uid"]}


# ------------------------------------------------------------------------------------------------ dashboard

_SUFFIXES = {"counter": ("_total", "_created"), "gauge": ("",), "histogram": ("_bucket", "_count", "_sum", "_created")}


def _registered_series(tmp_path: Path) -> set[str]:
    """Every series name a store's registry can expose, once the cleaner has run (its metrics then exist)."""
    with s3stream.open_store("memory://deploy-dashboard", wal_dir=str(tmp_path / "wal")) as store:
        store.create_topic("t", config={"cleanup.policy": "compact"})
        store.partition("t", 0).append([s3stream.Record(b"k", b"v")])
        store.run_retention()
        store.run_cleaner()
        families = list(store.metrics_registry.collect())
    return {f.name + suffix for f in families for suffix in _SUFFIXES[f.type]}


def test_dashboard_metric_names_exist_in_the_registries(tmp_path: Path) -> None:
    series = _registered_series(tmp_path)
    assert "s3stream_cleaner_max_dirty_percent" in series  # the cleaner's metrics did register
    dashboard = json.loads((DEPLOY / "grafana/dashboards/s3stream.json").read_text())
    used: set[str] = set()
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            names = set(re.findall(r"\bs3stream_[a-z0-9_]+", target["expr"]))
            assert names, target["expr"]
            used |= names
    assert used <= series, sorted(used - series)
    areas = {  # what the dashboard must show, by one series each
        "ingest": "s3stream_records_in_total", "ack latency": "s3stream_append_ack_seconds_bucket",
        "flush sizes": "s3stream_wal_object_bytes_bucket", "S3 requests": "s3stream_object_store_requests_total",
        "S3 errors": "s3stream_object_store_errors_total", "segments": "s3stream_segments_sealed_total",
        "cleaner": "s3stream_cleaner_max_dirty_percent", "retention": "s3stream_retention_deleted_segments_total",
    }
    assert {area for area, name in areas.items() if name not in used} == set()
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))


# ------------------------------------------------------------------------------------------------ kubernetes


def test_kubernetes_statefulset_wiring() -> None:
    objs = _k8s()
    assert {"StatefulSet", "Service", "ConfigMap", "Secret", "Kustomization"} <= set(objs)
    sts, svc, cm, secret = objs["StatefulSet"], objs["Service"], objs["ConfigMap"], objs["Secret"]
    pod = sts["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    _image_pinned(container["image"])
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True

    # The WAL on a PersistentVolume per pod.
    (claim,) = sts["spec"]["volumeClaimTemplates"]
    mount = next(m for m in container["volumeMounts"] if m["name"] == claim["metadata"]["name"])
    assert claim["spec"]["resources"]["requests"]["storage"]

    # Options from the ConfigMap: every $(VAR) is defined there; after expansion serve accepts the args
    # and StoreSettings accepts the options.
    assert container["envFrom"] == [{"configMapRef": {"name": cm["metadata"]["name"]}}]
    data = cm["data"]
    pod_env = {"POD_NAME": "s3stream-0", "POD_NAMESPACE": "default"}  # the downward API's, at run time
    args = [re.sub(r"\$\((\w+)\)", lambda m: {**data, **pod_env}[m.group(1)], a) for a in container["args"]]
    params = _serve_params(args)
    options = _options(params["option"])
    StoreSettings.from_options(options)
    assert options["wal_dir"].startswith(mount["mountPath"] + "/")
    parse_store_url(data["S3STREAM_URL"])

    # Credentials from the Secret, by secretKeyRef.
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"]
            if "secretKeyRef" in e.get("valueFrom", {})}
    assert set(refs) == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
    for name, ref in refs.items():
        assert ref["name"] == secret["metadata"]["name"] and ref["key"] in secret["stringData"], name
        assert "REPLACE" in secret["stringData"][ref["key"]]  # an example: placeholders only
    assert "EXAMPLE" in (K8S / "secret.example.yaml").read_text()

    # The metrics port: serve's flag = containerPort = annotations = Service; probes use it.
    port = params["metrics_port"]
    assert port == SERVE_DEFAULT_METRICS_PORT and params["metrics_host"] == "0.0.0.0"
    cport = next(p for p in container["ports"] if p["name"] == "metrics")
    assert cport["containerPort"] == port
    for annotated in (pod["metadata"]["annotations"], svc["metadata"]["annotations"]):
        assert annotated == {"prometheus.io/scrape": "true", "prometheus.io/port": str(port),
                             "prometheus.io/path": "/metrics"}
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        get = container[probe]["httpGet"]
        assert get["path"] == "/metrics" and get["port"] in (cport["name"], port), probe
    assert container["resources"]["requests"] and container["resources"]["limits"]

    # The Service selects the pods and serves the same ports; Kafka advertises the pod's DNS name.
    assert svc["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert sts["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert sts["spec"]["serviceName"] == svc["metadata"]["name"]
    sports = {p["name"]: p for p in svc["spec"]["ports"]}
    assert sports["metrics"]["port"] == port and sports["metrics"]["targetPort"] in (cport["name"], port)
    assert params["listen"] == "0.0.0.0:9092"
    advertised = next(a for a in container["args"] if a.startswith("--advertised-listener="))
    assert advertised == f"--advertised-listener=$(POD_NAME).{svc['metadata']['name']}.$(POD_NAMESPACE).svc:9092"
    fields = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]
              if "fieldRef" in e.get("valueFrom", {})}
    assert fields == {"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}
    kport = next(p for p in container["ports"] if p["name"] == "kafka")
    assert kport["containerPort"] == 9092 and sports["kafka"]["targetPort"] == "kafka"


def test_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    files = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == files


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")
def test_kubectl_kustomize_renders() -> None:
    result = subprocess.run(["kubectl", "kustomize", str(K8S)], capture_output=True, text=True, timeout=60,
                            check=False)
    assert result.returncode == 0, result.stderr
    kinds = [d["kind"] for d in yaml.safe_load_all(result.stdout)]
    assert sorted(kinds) == ["ConfigMap", "Secret", "Service", "StatefulSet"]
