"""Login throttling: django-axes' lock-out check, for logins that come with a request."""

from __future__ import annotations

from typing import Any

from axes.backends import AxesStandaloneBackend


class LoginThrottleBackend(AxesStandaloneBackend):
    """Refuses a login (even with the right password) while its username and address are locked
    out after too many wrong passwords. Logins from the login form and the admin come with a
    request and are counted; ``authenticate()`` called from code without one (a management
    command, a shell) is not a login over the network and is let through to the next backend."""

    def authenticate(
        self,
        request: Any,
        username: str | None = None,
        password: str | None = None,
        **kwargs: Any,
    ) -> None:
        if request is None:
            return None
        return super().authenticate(request, username=username, password=password, **kwargs)
