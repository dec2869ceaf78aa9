"""The agent's os-apply-config and os-refresh-config semantics (expectations checked
against pystache's JsonRenderer as os-apply-config uses it, and dib-run-parts)."""

from __future__ import annotations

import os
import stat

import pytest

from undercloud.agent import apply as oac
from undercloud.agent.mustache import MustacheError, render
from undercloud.agent.refresh import RefreshError, parts, refresh


@pytest.mark.parametrize("template,context,expected", [
    ("a={{a.b}} n={{n}} l={{l}} m={{missing.x}} t={{t}} f={{f}} z={{z}} d={{d}}",
     {"a": {"b": "x"}, "n": 5, "l": [1, 2], "t": True, "f": False, "z": None, "d": {"k": 1}},
     'a=x n=5 l=[1, 2] m= t=true f=false z= d={"k": 1}'),
    ("{{#items}}\n- {{name}} {{top}}\n{{/items}}\n{{^none}}no{{/none}}\n",
     {"top": "T", "items": [{"name": "p"}, {"name": "q"}]}, "- p T\n- q T\nno\n"),
    ("{{#d}}{{k}}{{/d}}|{{#s}}{{.}}{{/s}}|{{#zero}}Z{{/zero}}|{{#empty}}E{{/empty}}|{{^empty}}NE{{/empty}}",
     {"d": {"k": "v"}, "s": ["x", "y"], "zero": 0, "empty": []}, "v|xy|||NE"),
    ("  {{#a}}\n  in\n  {{/a}}\nend {{{raw}}} {{& raw}} <{{html}}>\n{{! comment }}\nx",
     {"a": True, "raw": "<&>", "html": '"q"'}, '  in\nend <&> <&> <"q">\nx'),
    ("{{a.b.c}}|{{#a}}{{b.c}}{{/a}}|{{x.0}}", {"a": {"b": {"c": 3}}, "x": ["first"]}, "3|3|"),
])
def test_mustache_as_os_apply_config(template, context, expected):
    assert render(template, context) == expected


@pytest.mark.parametrize("bad", ["{{#a}}x", "{{/a}}", "{{#a}}{{/b}}", "{{> partial}}"])
def test_mustache_bad_templates_are_refused(bad):
    with pytest.raises(MustacheError):
        render(bad, {})


def test_merge_later_source_wins_deeply():
    merged = oac.merge_sources([{"a": {"x": 1, "y": 1}, "l": [1]}, {}, {"a": {"y": 2}, "l": [2]}, None])
    assert merged == {"a": {"x": 1, "y": 2}, "l": [2]}


def test_template_tree_with_control_files(tmp_path):
    t, out = tmp_path / "t", tmp_path / "out"
    (t / "etc" / "svc").mkdir(parents=True)
    (t / "etc" / "svc" / "svc.conf").write_text("[db]\nhost={{db.host}}\nport={{db.port}}\n")
    (t / "etc" / "svc" / "svc.conf.oac").write_text("mode: 0640\n")
    (t / "etc" / "empty.conf").write_text("{{nothing}}")
    (t / "etc" / "empty.conf.oac").write_text('{"allow_empty": false}')
    (t / "etc" / "gen.conf").write_text("#!/bin/sh\npython3 -c 'import json,sys; print(json.load(sys.stdin)[\"db\"][\"host\"].upper())'\n")
    (t / "etc" / "gen.conf").chmod(0o755)
    (out / "etc").mkdir(parents=True)
    (out / "etc" / "empty.conf").write_text("old")
    written = oac.apply_config(t, out, oac.merge_sources([{"db": {"host": "a", "port": 1}}, {"db": {"host": "b"}}]))
    assert (out / "etc/svc/svc.conf").read_text() == "[db]\nhost=b\nport=1\n"
    assert stat.S_IMODE((out / "etc/svc/svc.conf").stat().st_mode) == 0o640
    assert not (out / "etc/empty.conf").exists()  # allow_empty false: an empty result deletes
    assert (out / "etc/gen.conf").read_text() == "B\n"  # executable template: JSON on stdin
    assert str(out / "etc/empty.conf") in written
    assert not list(out.rglob(".*"))  # no temporary files left


@pytest.mark.parametrize("control,message", [
    ("mode: 0999\n", "mode"),
    ("colour: red\n", "unrecognised file control key 'colour'"),
    ('{"allow_empty": "yes"}', "allow_empty requires a boolean"),
    ("owner: no-such-user-here\n", "owner 'no-such-user-here' not found"),
    ("just words\n", "expected 'key: value'"),
])
def test_bad_control_files_name_the_file(tmp_path, control, message):
    t = tmp_path / "t"
    t.mkdir()
    (t / "f").write_text("x")
    (t / "f.oac").write_text(control)
    with pytest.raises(oac.ApplyError, match=message) as e:
        oac.apply_config(t, tmp_path / "out", {})
    assert "f.oac" in str(e.value)
    assert not (tmp_path / "out" / "f").exists()  # nothing half-written


def test_failing_template_writes_nothing(tmp_path):
    t = tmp_path / "t"
    t.mkdir()
    (t / "a").write_text("fine")
    (t / "b").write_text("{{#open}}")
    with pytest.raises(oac.ApplyError, match="never closed"):
        oac.apply_config(t, tmp_path / "out", {})
    assert not (tmp_path / "out" / "a").exists()


def _part(d, name, body, mode=0o755):
    d.mkdir(parents=True, exist_ok=True)
    p = d / name
    p.write_text("#!/bin/sh\n" + body + "\n")
    p.chmod(mode)
    return p


def test_run_parts_order_and_filters(tmp_path):
    d = tmp_path / "configure.d"
    log = tmp_path / "log"
    for name in ("20-b", "5-a", "100-c", "x_y"):
        _part(d, name, f"echo {name} >> {log}")
    _part(d, "10-skip.sh", f"echo bad >> {log}")  # '.' not allowed by run-parts
    _part(d, "11-notexec", f"echo bad >> {log}", mode=0o644)
    assert [p.name for p in parts(d)] == ["x_y", "5-a", "20-b", "100-c"]  # numeric, as sort -n
    refresh(tmp_path)
    assert log.read_text().split() == ["x_y", "5-a", "20-b", "100-c"]


def test_refresh_phases_in_order_and_error_d(tmp_path):
    log = tmp_path / "log"
    for phase in ("migration", "post-configure", "configure", "pre-configure"):
        _part(tmp_path / f"{phase}.d", "10-x", f"echo {phase} >> {log}")
    refresh(tmp_path)
    assert log.read_text().split() == ["pre-configure", "configure", "post-configure", "migration"]

    log.unlink()
    _part(tmp_path / "configure.d", "20-fail", "echo broken >&2; exit 3")
    _part(tmp_path / "error.d", "10-err", f"echo error.d >> {log}")
    with pytest.raises(RefreshError, match=r"configure phase: .*20-fail exited with 3: broken"):
        refresh(tmp_path)
    assert log.read_text().split() == ["pre-configure", "configure", "error.d"]  # stopped, error.d ran


def test_refresh_part_timeout(tmp_path):
    _part(tmp_path / "configure.d", "10-hang", "sleep 30")
    with pytest.raises(RefreshError, match="ran past 1 s"):
        refresh(tmp_path, timeout=1)


def test_agent_cli_apply_and_refresh(tmp_path):
    import subprocess
    import sys
    t = tmp_path / "t"
    t.mkdir()
    (t / "motd").write_text("hello {{who}}")
    (tmp_path / "m1.json").write_text('{"who": "a"}')
    (tmp_path / "m2.json").write_text('{"who": "b"}')
    r = subprocess.run([sys.executable, "-m", "undercloud.agent", "apply-config", "-t", str(t), "-o",
                        str(tmp_path / "o"), "-m", str(tmp_path / "m1.json"), str(tmp_path / "m2.json")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "o" / "motd").read_text() == "hello b"
    _part(tmp_path / "base" / "configure.d", "10-x", "exit 4")
    r = subprocess.run([sys.executable, "-m", "undercloud.agent", "refresh-config", "--base",
                        str(tmp_path / "base")], capture_output=True, text=True)
    assert r.returncode == 1
    assert "configure phase" in r.stderr and "Traceback" not in r.stderr
    assert os.path.exists(tmp_path / "base")
