"""Interoperability: the real os-collect-config (request collector), os-refresh-config
and os-apply-config from PyPI, pointed at the undercloud's metadata endpoint, render a
template from a deployment's inputs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import run_cli

TEMPLATE = """
heat_template_version: 2018-08-31
parameters:
  port: {type: number, default: 8080}
resources:
  server:
    type: OS::Heat::DeployedServer
    metadata:
      site: {name: lab}
  config:
    type: OS::Heat::StructuredConfig
    properties:
      group: os-apply-config
      config:
        svc:
          port: {get_input: port}
          peers: {get_input: peers}
  deployment:
    type: OS::Heat::StructuredDeployment
    properties:
      config: {get_resource: config}
      server: {get_resource: server}
      signal_transport: NO_SIGNAL
      input_values:
        port: {get_param: port}
        peers: [a, b]
"""


def need_tools():
    for tool in ("os-collect-config", "os-apply-config", "os-refresh-config", "dib-run-parts"):
        if not shutil.which(tool):
            pytest.skip(f"{tool} is not installed (pip install '.[test]')")


def test_os_collect_config_apply_and_refresh_against_the_undercloud(uc_home, tmp_path):
    need_tools()
    (tmp_path / "t.yaml").write_text(TEMPLATE)
    r = run_cli("stack", "create", "s", "-t", str(tmp_path / "t.yaml"), "--wait")
    assert r.returncode == 0, r.stderr
    cfg = json.loads(next((uc_home.path / "agents").glob("*.json")).read_text())
    url = f"{cfg['metadata_url']}?token={cfg['token']}"

    templates, out, base = tmp_path / "templates", tmp_path / "out", tmp_path / "orc"
    (templates / "etc" / "svc").mkdir(parents=True)
    (templates / "etc" / "svc" / "svc.conf").write_text(
        "site={{site.name}}\nport={{svc.port}}\npeers={{#svc.peers}}{{.}},{{/svc.peers}}\n")
    (base / "configure.d").mkdir(parents=True)
    apply = base / "configure.d" / "20-os-apply-config"
    apply.write_text(f"#!/bin/sh\nset -e\nos-apply-config -t {templates} -o {out}\n")
    apply.chmod(0o755)
    # the metadata URL is https: os-collect-config (requests) trusts the undercloud's CA as a
    # node does once it is in its trust store
    assert cfg["metadata_url"].startswith("https://") and cfg["ca"] == uc_home.ca_file.read_text()
    env = dict(os.environ, OS_REFRESH_CONFIG_BASE_DIR=str(base), REQUESTS_CA_BUNDLE=str(uc_home.ca_file))
    cmd = ["os-collect-config", "--one-time", "--config-file", "/dev/null",
           "--cachedir", str(tmp_path / "cache"), "--backup-cachedir", str(tmp_path / "cache.bak"),
           "--request-metadata-url", url,
           "--command", f"os-refresh-config --lockfile {tmp_path / 'orc.lock'}", "request"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (out / "etc/svc/svc.conf").read_text() == "site=lab\nport=8080\npeers=a,b,\n"
    # The cached document is exactly what the undercloud serves, in Heat's shape.
    cached = json.loads((tmp_path / "cache" / "request.json").read_text())
    dep = cached["deployments"][0]
    assert set(dep) >= {"id", "name", "group", "config", "inputs", "outputs", "options"}
    assert dep["config"] == {"svc": {"port": 8080, "peers": ["a", "b"]}}
    assert cfg["token"] not in r.stdout  # os-collect-config does not echo the URL's token

    # A parameter change reaches the node through the same tools.
    r = run_cli("stack", "update", "s", "-t", str(tmp_path / "t.yaml"), "--parameter", "port=9090", "--wait")
    assert r.returncode == 0, r.stderr
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "port=9090" in (out / "etc/svc/svc.conf").read_text()


def test_wrong_token_gets_nothing(uc_home, tmp_path):
    need_tools()
    (tmp_path / "t.yaml").write_text(TEMPLATE)
    r = run_cli("stack", "create", "s", "-t", str(tmp_path / "t.yaml"), "--wait")
    assert r.returncode == 0, r.stderr
    cfg = json.loads(next((uc_home.path / "agents").glob("*.json")).read_text())
    r = subprocess.run(["os-collect-config", "--one-time", "--print", "--config-file", "/dev/null",
                        "--cachedir", str(tmp_path / "c"), "--backup-cachedir", str(tmp_path / "cb"),
                        "--request-metadata-url", cfg["metadata_url"] + "?token=wrong", "request"],
                       capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, REQUESTS_CA_BUNDLE=str(uc_home.ca_file)))
    assert "8080" not in r.stdout
    assert not Path(tmp_path / "c" / "request.json").exists()
