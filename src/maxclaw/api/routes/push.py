"""Push: devices (register, list, forget), client config, and actions taken on a notification."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Body, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from maxclaw.api.deps import Services, UserPrincipal, user_principal
from maxclaw.api.responses import ERRORS
from maxclaw.errors import Invalid
from maxclaw.wire.models import Decision, Device, Devices, PushConfig, PushQueued

router = APIRouter(prefix="/v1/push", responses=ERRORS)

HEX = r"^[0-9A-Fa-f]{16,400}$"


class WebPushKeys(BaseModel):
    p256dh: str = Field(min_length=1, max_length=200)
    auth: str = Field(min_length=1, max_length=100)


class WebPushDevice(BaseModel):
    """A browser's ``PushSubscription.toJSON()`` plus the platform."""

    model_config = ConfigDict(extra="ignore")
    platform: Literal["webpush"]
    endpoint: str = Field(min_length=1, max_length=2048)
    keys: WebPushKeys


class ApnsDevice(BaseModel):
    model_config = ConfigDict(extra="ignore")
    platform: Literal["apns"]
    token: str = Field(min_length=1, max_length=400)
    topic: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9.\-]{0,199}$")  # the app's bundle id
    environment: Literal["sandbox", "production"] = "production"
    live_activity_token: str | None = Field(default=None, pattern=HEX)
    # ActivityKit's push-to-start token: lets the server start the Live Activity itself
    live_activity_start_token: str | None = Field(default=None, pattern=HEX)


class WebhookDevice(BaseModel):
    model_config = ConfigDict(extra="ignore")
    platform: Literal["webhook"]
    url: str = Field(min_length=1, max_length=2048)
    secret: str = Field(min_length=16, max_length=512)


class LogDevice(BaseModel):
    """Development: pushes for this device are written to the server's log."""

    model_config = ConfigDict(extra="ignore")
    platform: Literal["log"]


NewDevice = Annotated[WebPushDevice | ApnsDevice | WebhookDevice | LogDevice,
                   Field(discriminator="platform")]


class PushAction(BaseModel):
    """With a bearer token: ``decision_id``; from a notification: its ``action_token``."""

    model_config = ConfigDict(extra="ignore")
    decision_id: int | None = None
    action_token: str | None = Field(default=None, min_length=1, max_length=200)
    action: str = Field(min_length=1, max_length=300)
    text: str | None = None


@router.post("/devices", status_code=201, response_model=Device,
             response_model_exclude_unset=True)
async def register_device(device: Annotated[NewDevice, Body()], who: UserPrincipal,
                          services: Services) -> Device:
    return Device.model_validate(await services.push.register_device(who, device.model_dump()))


@router.get("/devices", response_model=Devices, response_model_exclude_unset=True)
async def list_devices(who: UserPrincipal, services: Services) -> Devices:
    return Devices.model_validate({"devices": await services.push.list_devices(who)})


@router.delete("/devices/{device_id}", status_code=204)
async def delete_device(device_id: str, who: UserPrincipal, services: Services) -> Response:
    await services.push.delete_device(who, device_id)
    return Response(status_code=204)


class PushTest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    device_id: int | None = None


@router.post("/test", status_code=202, response_model=PushQueued,
             response_model_exclude_unset=True)
async def send_test(who: UserPrincipal, services: Services,
                    body: PushTest | None = None) -> PushQueued:
    """A test notification to every device of the user, or to ``device_id``."""
    return PushQueued.model_validate(await services.push.send_test(
        who, body.device_id if body is not None else None))


@router.get("/config", response_model=PushConfig, response_model_exclude_unset=True)
async def push_config(who: UserPrincipal, services: Services) -> PushConfig:
    return PushConfig.model_validate(services.push.client_config())


@router.post("/actions", response_model=Decision, response_model_exclude_unset=True)
async def act(body: PushAction, request: Request, services: Services) -> Decision:
    """An answer from a notification: its action token alone is enough (a service worker or
    an app extension holds no bearer token); without one, a user's bearer token and
    ``decision_id``."""
    if body.action_token is not None:
        token = body.action_token
        address = request.client.host if request.client else None
        # an action token is a bearer credential: guesses count like refused bearer tokens
        return Decision.model_validate(await services.quotas.authenticating(
            address, lambda: services.push.act_with_token(token, body.action, body.text,
                                                          body.decision_id)))
    who = await user_principal(request)
    if body.decision_id is None:
        raise Invalid.at(["body", "decision_id"], "send decision_id (or an action_token)")
    return Decision.model_validate(await services.push.act(who, body.decision_id, body.action,
                                                           body.text))
