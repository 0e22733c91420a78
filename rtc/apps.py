"""RTC signalling relay and call lifecycle (design §5). Built by the RTC issue."""

from django.apps import AppConfig


class RtcConfig(AppConfig):
    name = "rtc"

    def ready(self) -> None:
        from rtc.calls import register_call_backend

        register_call_backend()
