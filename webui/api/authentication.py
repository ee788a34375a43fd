"""``Authorization: Bearer <key>`` with a /v1 API key, for the REST endpoints that accept one
(the training export): the request acts as the key's user, within the key's project only."""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed

from orchestrator.services.api_keys import api_key_authenticate


class ApiKeyAuthentication(BaseAuthentication):
    """``request.user`` is the key's user and ``request.auth`` the ``ApiKey``; views that accept
    it narrow what they show to ``request.auth.project_id``."""

    def authenticate(self, request):
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() != b"bearer":
            return None
        if len(parts) != 2:
            raise AuthenticationFailed("Send 'Authorization: Bearer <key>'.")
        api_key = api_key_authenticate(key=parts[1].decode("utf-8", "replace"))
        if api_key is None:
            raise AuthenticationFailed("Incorrect API key, or the key was revoked.")
        return api_key.user, api_key

    def authenticate_header(self, request) -> str:
        return 'Bearer realm="api"'


class ApiKeyAuthenticationScheme(OpenApiAuthenticationExtension):
    target_class = "webui.api.authentication.ApiKeyAuthentication"
    name = "apiKey"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A /v1 API key (account page); limited to the key's project.",
        }
