"""The image store: verified content, all-or-nothing registration, content stored once,
Range downloads; through the ImageStore and through the real CLI and service."""

from __future__ import annotations

import hashlib
import json
import os

import httpx
import pytest

from tests.conftest import run_cli
from undercloud.config import Home
from undercloud.errors import Conflict, InvalidInput, NotFound
from undercloud.images.store import ImageStore
from undercloud.store import Store


@pytest.fixture
def images(tmp_path):
    home = Home(tmp_path / "home").ensure()
    return ImageStore(home, Store(home.db_url).create_schema())


def put(images: ImageStore, data: bytes) -> str:
    sha = hashlib.sha256(data).hexdigest()
    images.put_blob([data[:10], data[10:]], sha, len(data))
    return sha


def leftovers(images: ImageStore) -> list[str]:
    return sorted(os.listdir(images.blobs)) + sorted(os.listdir(images.tmp))


def test_truncated_and_corrupt_content_is_refused_and_leaves_nothing(images):
    data = os.urandom(100_000)
    sha = hashlib.sha256(data).hexdigest()
    with pytest.raises(InvalidInput, match="truncated: received 50000 of 100000"):
        images.put_blob([data[:50_000]], sha, len(data))
    corrupt = bytearray(data)
    corrupt[500] ^= 1
    with pytest.raises(InvalidInput, match="corrupt") as exc:
        images.put_blob([bytes(corrupt)], sha, len(data))
    assert exc.value.where == "sha256"
    with pytest.raises(InvalidInput, match="larger than"):
        images.put_blob([data, b"x"], sha, len(data))
    with pytest.raises(InvalidInput, match="not a sha256"):
        images.put_blob([data], "abc", len(data))
    assert leftovers(images) == []
    with pytest.raises(NotFound, match="upload it first"):
        images.register([{"name": "x", "disk_format": "raw", "sha256": sha}])
    assert images.list() == []


def test_register_batch_links_and_validates_all_or_nothing(images):
    k, r = put(images, b"kernel" * 100), put(images, b"ramdisk" * 100)
    iso = put(images, b"iso" * 100)
    out = images.register([
        {"name": "d-kernel", "disk_format": "aki", "sha256": k},
        {"name": "d-initramfs", "disk_format": "ari", "sha256": r},
        {"name": "d", "disk_format": "iso", "sha256": iso, "properties": {"kernel_id": "#0", "ramdisk_id": "#1"}},
    ])
    assert out[2]["properties"] == {"kernel_id": out[0]["id"], "ramdisk_id": out[1]["id"]}
    assert out[1]["size"] == 700 and out[1]["status"] == "active"
    # one bad item: nothing of the batch is registered, the error names the item and field
    with pytest.raises(InvalidInput) as exc:
        images.register([{"name": "ok", "disk_format": "raw", "sha256": k},
                         {"name": "bad", "disk_format": "vhdx", "sha256": k}])
    assert exc.value.where == "images[1].disk_format"
    with pytest.raises(InvalidInput, match="hypervisor_type"):
        images.register([{"name": "x", "disk_format": "raw", "sha256": k,
                          "properties": {"hypervisor_type": "mainframe"}}])
    assert sorted(i["name"] for i in images.list()) == ["d", "d-initramfs", "d-kernel"]


def test_content_stored_once_and_removed_with_its_last_image(images):
    sha = put(images, b"disk" * 1000)
    vm, bm = images.register([
        {"name": "overcloud-full", "disk_format": "qcow2", "sha256": sha, "properties": {"hypervisor_type": "vm"}},
        {"name": "overcloud-full", "disk_format": "qcow2", "sha256": sha,
         "properties": {"hypervisor_type": "baremetal"}},
    ])
    assert os.listdir(images.blobs) == [sha]
    with pytest.raises(Conflict, match="2 images are named 'overcloud-full'"):
        images.get("overcloud-full")
    assert images.get("overcloud-full", "vm")["id"] == vm["id"]
    images.delete(vm["id"])
    assert os.listdir(images.blobs) == [sha]  # still used by the baremetal image
    images.delete("overcloud-full")  # unique again
    assert leftovers(images) == []
    with pytest.raises(NotFound):
        images.get("overcloud-full")


def test_replace_keeps_other_hypervisor_types_and_drops_old_content(images):
    old = put(images, b"old" * 100)
    new = put(images, b"new" * 100)
    other = put(images, b"ctr" * 100)
    images.register([{"name": "n", "disk_format": "qcow2", "sha256": old, "properties": {"hypervisor_type": "vm"}}])
    ctr = images.register([{"name": "n", "disk_format": "oci", "sha256": other,
                            "properties": {"hypervisor_type": "container"}}])[0]
    images.register([{"name": "n", "disk_format": "qcow2", "sha256": new, "properties": {"hypervisor_type": "vm"}}],
                    replace=True)
    rows = images.list(name="n")
    assert sorted((r["disk_format"], r["checksum"]) for r in rows) == [("oci", other), ("qcow2", new)]
    assert images.get("n", "container")["id"] == ctr["id"]
    assert old not in os.listdir(images.blobs)


def test_replace_keeps_what_a_stack_or_keep_still_names(images):
    """Images a deployed set needs (named by a stack's current or previous template and
    parameters, or given in `keep`) survive a newer registration of their name."""
    from undercloud.orchestration.engine.walk import new_root_row
    from undercloud.store.stacks import Stack

    def oci(data: bytes, tag: str, replace: bool = True) -> dict:
        return images.register([{"name": "service-x", "disk_format": "oci", "sha256": put(images, data),
                                 "properties": {"hypervisor_type": "container", "podman_image": tag}}],
                               replace=replace, keep=["localhost/undercloud/service-x:kept"])[0]

    by_tag = oci(b"a" * 100, "localhost/undercloud/service-x:deployed", replace=False)
    by_id = oci(b"b" * 100, "localhost/undercloud/service-x:by-id", replace=False)
    kept = oci(b"c" * 100, "localhost/undercloud/service-x:kept", replace=False)
    row = new_root_row("oc", {"files": {"env.yaml": "parameter_defaults: {XImage: "
                                        "'localhost/undercloud/service-x:deployed'}"}}, {}, "", "CREATE", {})
    row["prev_parameters"] = {"ServiceImageSources": {"r": f"/v1/images/{by_id['id']}/file"}}
    with images.store.session() as s:
        s.add(Stack(**row))
    dropped = oci(b"d" * 100, "localhost/undercloud/service-x:dropped")
    newest = oci(b"e" * 100, "localhost/undercloud/service-x:newest")
    ids = {r["id"] for r in images.list(name="service-x")}
    assert ids == {by_tag["id"], by_id["id"], kept["id"], newest["id"]}
    assert dropped["checksum"] not in os.listdir(images.blobs)
    # ... and an image a stack names is not deleted either: the one line names the stack.
    with pytest.raises(Conflict) as exc:
        images.delete(by_id["id"])
    assert exc.value.message == (f"image service-x ({by_id['id']}) is used by stack oc (what it runs or would "
                                 f"roll back to): update or delete the stack first")
    images.delete(kept["id"])  # `keep` protects from a replacement only
    assert {r["id"] for r in images.list(name="service-x")} == {by_tag["id"], by_id["id"], newest["id"]}


def test_missing_content_shows_as_missing(images):
    sha = put(images, b"x" * 10)
    img = images.register([{"name": "m", "disk_format": "raw", "sha256": sha}])[0]
    os.unlink(images.blob_path(sha))
    assert images.get(img["id"])["status"] == "missing"


# ---- through the service -------------------------------------------------------------
def service(uc_home) -> tuple[str, dict, httpx.Client]:
    """The service's URL (https), the admin headers and a client trusting the home's CA."""
    info = json.loads(run_cli("service", "start", "-f", "json").stdout)
    token = (uc_home.path / "admin.token").read_text().strip()
    return info["url"], {"X-Undercloud-Token": token}, httpx.Client(verify=info["ca"], timeout=30)


def test_cli_upload_list_show_download_delete(uc_home, tmp_path):
    data = os.urandom(3 * 2**20 + 17)
    f = tmp_path / "disk.qcow2"
    f.write_bytes(data)
    r = run_cli("image", "upload", str(f), "--name", "mine", "--property", "hypervisor_type=vm",
                "--property", "owner=me", "-f", "json")
    assert r.returncode == 0, r.stderr
    img = json.loads(r.stdout)
    assert img["disk_format"] == "qcow2" and img["size"] == len(data)
    assert img["checksum"] == hashlib.sha256(data).hexdigest()
    assert img["properties"] == {"hypervisor_type": "vm", "owner": "me"}
    rows = json.loads(run_cli("image", "list", "-f", "json").stdout)
    assert [(r["name"], r["hypervisor_type"], r["status"]) for r in rows] == [("mine", "vm", "active")]
    table = run_cli("image", "list").stdout
    for col in ("id", "name", "disk_format", "hypervisor_type", "size", "status"):
        assert col in table
    out = tmp_path / "back.qcow2"
    r = run_cli("image", "download", "mine", "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert out.read_bytes() == data
    # uploading the same content again stores nothing new
    r = run_cli("image", "upload", str(f), "--name", "again", "--property", "hypervisor_type=baremetal")
    assert r.returncode == 0, r.stderr
    assert len(os.listdir(uc_home.path / "images" / "blobs")) == 1
    assert run_cli("image", "delete", "mine", "again").returncode == 0
    assert json.loads(run_cli("image", "list", "-f", "json").stdout) == []
    assert os.listdir(uc_home.path / "images" / "blobs") == []


def test_download_resumes_with_range_and_verifies(uc_home, tmp_path):
    data = os.urandom(2 * 2**20)
    f = tmp_path / "x.raw"
    f.write_bytes(data)
    img = json.loads(run_cli("image", "upload", str(f), "--name", "x", "-f", "json").stdout)
    url, _, api = service(uc_home)
    # served without the admin token, by id; Range gives the rest; the sha256 rides along
    r = api.get(f"{url}/v1/images/{img['id']}/file", headers={"Range": "bytes=1000-"})
    assert r.status_code == 206 and r.content == data[1000:]
    assert r.headers["x-image-sha256"] == img["checksum"]
    out = tmp_path / "out.raw"
    (tmp_path / "out.raw.part").write_bytes(data[:12345])  # an interrupted download
    assert run_cli("image", "download", img["id"], "-o", str(out)).returncode == 0
    assert out.read_bytes() == data and not (tmp_path / "out.raw.part").exists()
    # a .part that does not match the image is caught by the checksum, and removed
    (tmp_path / "bad.raw.part").write_bytes(b"garbage" * 10)
    r = run_cli("image", "download", img["id"], "-o", str(tmp_path / "bad.raw"))
    assert r.returncode == 1 and "expected " + img["checksum"] in r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "bad.raw").exists() and not (tmp_path / "bad.raw.part").exists()


def test_truncated_or_corrupt_upload_over_http_registers_nothing(uc_home):
    url, admin, api = service(uc_home)
    data = os.urandom(500_000)
    sha = hashlib.sha256(data).hexdigest()
    r = api.put(f"{url}/v1/images/blobs/{sha}", params={"size": len(data)}, content=data[:400_000],
                  headers=admin)
    assert r.status_code == 400 and "truncated" in r.json()["error"]
    bad = bytearray(data)
    bad[0] ^= 0xFF
    r = api.put(f"{url}/v1/images/blobs/{sha}", params={"size": len(data)}, content=bytes(bad), headers=admin)
    assert r.status_code == 400 and "corrupt" in r.json()["error"]
    r = api.post(f"{url}/v1/images", json={"name": "t", "disk_format": "raw", "sha256": sha}, headers=admin)
    assert r.status_code == 404
    assert api.get(f"{url}/v1/images", headers=admin).json() == []
    assert os.listdir(uc_home.path / "images" / "blobs") == []
    assert os.listdir(uc_home.path / "images" / "tmp") == []
    # admin routes need the token; downloads of unknown ids are 404
    assert api.get(f"{url}/v1/images").status_code == 401
    assert api.put(f"{url}/v1/images/blobs/{sha}", params={"size": len(data)}, content=data).status_code == 401
    assert os.listdir(uc_home.path / "images" / "blobs") == []
    assert api.get(f"{url}/v1/images/nope/file").status_code == 404


def test_cli_bad_input_is_one_line(uc_home, tmp_path):
    f = tmp_path / "blob.bin"
    f.write_bytes(b"abc")
    cases = [
        (["image", "upload", str(f), "--name", "x"], "give --disk-format"),
        (["image", "upload", str(f), "--name", "x", "--disk-format", "raw", "--property", "novalue"],
         "--property: expected KEY=VALUE"),
        (["image", "upload", str(f), "--name", "x", "--disk-format", "raw", "--checksum", "0" * 64],
         "corrupt or wrong file"),
        (["image", "show", "nosuch"], "no image with id or name 'nosuch'"),
        (["image", "delete", "nosuch"], "no image with id or name 'nosuch'"),
        (["image", "build"], "give an image NAME or --all"),
        (["image", "build", "my-image"], "give --type"),
        (["image", "build", "service-memcached", "--type", "qcow2"], "oci only"),
    ]
    for args, msg in cases:
        r = run_cli(*args)
        assert r.returncode != 0, args
        errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and msg in errors[0], (args, r.stderr)
        assert "Traceback" not in r.stderr


def test_help_teaches_every_image_command():
    for sub in ("", "list", "show", "upload", "delete", "download", "build"):
        r = run_cli("image", *([sub] if sub else []), "--help")
        assert r.returncode == 0 and "Usage:" in r.stdout, sub


def test_not_found_names_what_was_asked_on_one_line(images):
    """Found by the API fuzzer: a hypervisor_type with a newline made a two-line error."""
    with pytest.raises(NotFound) as caught:
        images.get("guest", hypervisor_type="vm\nfake")
    assert str(caught.value).endswith("no image with id or name 'guest' and hypervisor_type 'vm\\nfake'")
    assert "\n" not in str(caught.value)
