"""Who may use the REST API: staff write, members of the `api-readers` group read, nobody else.

Anonymous requests are refused before this runs with a 401 and `WWW-Authenticate: Token` (TokenAuthentication
is the first authentication class, so DRF has a challenge to send); a signed-in user without the right is a 403.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rest_framework.permissions import SAFE_METHODS, BasePermission

if TYPE_CHECKING:
    from rest_framework.request import Request
    from rest_framework.views import APIView

API_READERS = "api-readers"


class IsStaffOrApiReader(BasePermission):
    """Staff users (`is_staff`) may do anything; users in the `api-readers` group may GET, HEAD and OPTIONS."""

    message = "Only staff users may use the API."

    def has_permission(self, request: Request, view: APIView) -> bool:
        user = request.user
        if not user or not user.is_authenticated:
            return False
        if user.is_staff:
            return True
        reader = user.groups.filter(name=API_READERS).exists()
        if reader and request.method in SAFE_METHODS:
            return True
        # DRF reads `message` after a refusal: say which right is missing.
        self.message = (
            "This user may only read (it is in the api-readers group): writing needs a staff user."
            if reader
            else "This user has no API access: add it to the api-readers group to read, or make it staff to write."
        )
        return False
