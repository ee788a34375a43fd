"""Page routes."""

urlpatterns: list = []
