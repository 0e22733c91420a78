"""The apps' registrations on the core's hooks (qim/hooks.py, qim/content_types.py), as
Django's start-up leaves them: a missing one would silently drop an app's behaviour."""

from __future__ import annotations

from qim import content_types, hooks
from qim.gateway.dispatch import load_frame_modules, route_for
from reactions.actions import do_delete_reactions
from reactions.queries import attach_summaries
from registry.actions import do_install_builtins
from registry.cache import registry_cache


def test_apps_register_their_hooks_once():
    assert list(hooks.message_recalled) == [do_delete_reactions]
    assert list(hooks.history_rendered) == [attach_summaries]
    assert list(hooks.tenant_created) == [do_install_builtins]
    assert content_types._type_registry is registry_cache


def test_registering_again_is_a_no_op_and_order_is_kept():
    hook: hooks.Hook = hooks.Hook("example")
    first, second = (lambda: 1), (lambda: 2)
    assert hook.register(first) is first
    hook.register(second)
    hook.register(first)
    assert list(hook) == [first, second]


def test_every_app_frames_module_is_discovered():
    load_frame_modules()  # idempotent: the modules are imported once
    for frame_type, module in [("SEND", "qim.frames.messaging"), ("ROOM_JOIN", "rooms.frames"),
                               ("REACT", "reactions.frames"), ("REGISTRY_GET", "registry.frames"),
                               ("RTC_SIGNAL", "rtc.frames")]:
        route = route_for(frame_type)
        assert route is not None and route.handler.__module__ == module, frame_type
