"""Any path under /api/ or /v1 that names nothing is a JSON 404, whatever characters it holds."""

import pytest

pytestmark = pytest.mark.django_db

ODD_PATHS = ("/api/no/such/thing/", "/api/runs/%0A/", "/api/batches/x%0Ay/", "/api/%0A/")


@pytest.mark.parametrize("path", ODD_PATHS)
def test_an_unknown_api_path_is_a_json_404(api_as, project_admin, path):
    response = api_as(project_admin).get(path)
    assert response.status_code == 404
    assert response["Content-Type"].startswith("application/json")


def test_an_unknown_v1_path_with_a_newline_is_a_json_404(client):
    response = client.get("/v1/no/such%0Athing")
    assert response.status_code == 404
    assert response["Content-Type"].startswith("application/json")
