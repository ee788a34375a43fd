from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/", include("webui.api.urls")),
    path("v1/", include("webui.openai.urls")),
    path("", include("webui.page_urls")),
]

# A busy database met outside a view answers 503, like one met inside (webui/middleware.py).
handler500 = "webui.middleware.server_error"
