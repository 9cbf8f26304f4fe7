"""``/v1/settings``: a person's own settings (locale, time zone, quiet hours, Main's defaults)."""

from __future__ import annotations

from fastapi import APIRouter, Request

from maxclaw.api.deps import Services, UserPrincipal
from maxclaw.api.responses import ERRORS
from maxclaw.wire.models import SettingsPatch, UserSettings

router = APIRouter(prefix="/v1", responses=ERRORS)


@router.get("/settings", response_model=UserSettings)
async def get_settings(request: Request, who: UserPrincipal,
                       services: Services) -> UserSettings:
    """His settings; the first read takes the locale from ``Accept-Language``."""
    return UserSettings.model_validate(await services.prefs.get(
        who.user_id, request.headers.get("accept-language")))


@router.patch("/settings", response_model=UserSettings)
async def patch_settings(body: SettingsPatch, request: Request, who: UserPrincipal,
                         services: Services) -> UserSettings:
    """Change the settings the body names; his open cards' due times follow."""
    patch = body.model_dump(include=body.model_fields_set | set(body.model_extra or {}))
    return UserSettings.model_validate(await services.prefs.patch(
        who.user_id, patch, request.headers.get("accept-language")))
