"""The dispatch table: each app registers its frame handlers here, by frame `type`.

A handler is `async def handle_x(conn, frame) -> reply | None`, where `frame` is the inbound
frame validated against the handler's msgspec schema. It returns the reply frame (the gateway
adds `req_id`) or None for fire-and-forget frames, and raises qim.errors.Refused to refuse.

Frames are foreground work unless registered with `foreground=False` (the room family): room
ticks give way to foreground frames while they are handled (qim/node/foreground.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec
from django.utils.module_loading import autodiscover_modules

if TYPE_CHECKING:
    from qim.node.connection import Connection

Reply = dict[str, Any] | None
Handler = Callable[["Connection", Any], Awaitable[Reply]]

@dataclass(frozen=True)
class FrameRoute:
    frame_type: str
    schema: type[msgspec.Struct]
    handler: Handler
    foreground: bool = True


_routes: dict[str, FrameRoute] = {}


def frame_handler(
    frame_type: str, schema: type[msgspec.Struct], *, foreground: bool = True
) -> Callable[[Handler], Handler]:
    """Register `handler` for inbound frames of `frame_type`, validated by `schema`;
    `foreground=False` for frames that room ticks need not give way to."""

    def register(handler: Handler) -> Handler:
        if frame_type in _routes:
            raise RuntimeError(f"frame type {frame_type} registered twice")
        _routes[frame_type] = FrameRoute(frame_type, schema, handler, foreground)
        return handler

    return register


def route_for(frame_type: str) -> FrameRoute | None:
    return _routes.get(frame_type)


def registered_types() -> list[str]:
    return sorted(_routes)


def load_frame_modules() -> None:
    """Import the `frames` module of every installed app that has one (the admin's
    autodiscover pattern), in INSTALLED_APPS order: the core names no app."""
    autodiscover_modules("frames")
