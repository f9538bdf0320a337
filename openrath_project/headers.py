"""Response headers of every page and API answer that Django's own middleware does not set.

* ``Permissions-Policy``: no page of the product uses the camera, the microphone, the location
  or any other powerful browser feature, so every one of them is denied to the page and to
  anything it could embed (``OPENRATH_PERMISSIONS_POLICY`` replaces the value).
* ``Cache-Control: no-store`` (Django's ``add_never_cache_headers``) on every authenticated
  answer under ``/api/`` and ``/console/``: tenant data never stays in a browser's or a proxy's
  cache (the admin's views already send it).

The Content-Security-Policy itself is django-csp's middleware (``CONTENT_SECURITY_POLICY`` in
the settings).
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils.cache import add_never_cache_headers

Handler = Callable[[HttpRequest], HttpResponse]

#: Powerful features no page of the product uses: denied everywhere (``()`` is "no origin").
DEFAULT_PERMISSIONS_POLICY = ", ".join(
    f"{feature}=()"
    for feature in (
        "accelerometer",
        "autoplay",
        "camera",
        "display-capture",
        "encrypted-media",
        "geolocation",
        "gyroscope",
        "magnetometer",
        "microphone",
        "midi",
        "payment",
        "picture-in-picture",
        "publickey-credentials-get",
        "screen-wake-lock",
        "usb",
        "xr-spatial-tracking",
    )
)
NO_STORE_PREFIXES = ("/api/", "/console/")


def _authenticated(request: HttpRequest) -> bool:
    if getattr(request, "principal", None) is not None or "HTTP_AUTHORIZATION" in request.META:
        return True
    user = getattr(request, "user", None)
    return bool(user is not None and user.is_authenticated)


class SecurityHeadersMiddleware:
    def __init__(self, get_response: Handler) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        policy = str(getattr(settings, "OPENRATH_PERMISSIONS_POLICY", DEFAULT_PERMISSIONS_POLICY))
        if policy and not response.has_header("Permissions-Policy"):
            response["Permissions-Policy"] = policy
        if (
            request.path.startswith(NO_STORE_PREFIXES)
            and "no-store" not in response.get("Cache-Control", "")
            and _authenticated(request)
        ):
            add_never_cache_headers(response)
        return response
