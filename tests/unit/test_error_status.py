"""One error <-> HTTP status map: each error class carries its status (errors.py); the API
answers it, and the clients (the CLI's, a worker forwarding to another) turn it back into
the class."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.conftest import HTTPS
from undercloud import errors
from undercloud.api.app import create_app
from undercloud.api.context import Context
from undercloud.api.guard import PayloadTooLarge
from undercloud.api.workers import FORWARDED_ERRORS
from undercloud.cli.client import ERRORS
from undercloud.config import Home

CLASSES = {
    errors.UndercloudError: 400, errors.NotFound: 404, errors.Conflict: 409, errors.InvalidInput: 400,
    errors.ServiceUnavailable: 503, errors.NeedsFirstBoot: 428, errors.Unauthorized: 401,
    errors.InternalError: 500, PayloadTooLarge: 413,
}


class _SubOfConflict(errors.Conflict):
    pass


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    ctx = Context(Home(tmp_path_factory.mktemp("err") / "uc"))
    app = create_app(ctx)
    raised = {cls.__name__: cls for cls in [*CLASSES, errors.Elsewhere, _SubOfConflict]}

    def boom(name: str):
        cls = raised[name]
        if cls is errors.Elsewhere:
            raise cls("owned by another worker", "w2", "stack")
        raise cls(f"a {name}", "somewhere")

    app.add_api_route("/v1/test-raise/{name}", boom)
    client = TestClient(app, base_url=HTTPS)
    client.headers["X-Undercloud-Token"] = ctx.admin_token
    return client


@pytest.mark.parametrize("cls, status", [*CLASSES.items(), (errors.Elsewhere, 503), (_SubOfConflict, 409)],
                         ids=lambda v: getattr(v, "__name__", str(v)))
def test_the_api_answers_the_error_classes_status(api, cls, status):
    assert cls.status == status
    r = api.get(f"/v1/test-raise/{cls.__name__}")
    assert r.status_code == status
    if cls is not errors.Elsewhere:
        assert r.json() == {"error": f"a {cls.__name__}", "where": "somewhere"}


def test_the_clients_turn_a_status_back_into_its_class():
    assert ERRORS == {404: errors.NotFound, 409: errors.Conflict, 400: errors.InvalidInput,
                      503: errors.ServiceUnavailable}  # any other: UndercloudError
    assert FORWARDED_ERRORS == {400: errors.InvalidInput, 404: errors.NotFound, 409: errors.Conflict,
                                428: errors.NeedsFirstBoot}  # any other: ServiceUnavailable
    for status, cls in [*ERRORS.items(), *FORWARDED_ERRORS.items()]:
        assert cls.status == status


def test_two_classes_of_one_status_are_refused():
    with pytest.raises(ValueError, match="have one status"):
        errors.by_status(errors.InvalidInput, errors.UndercloudError)
