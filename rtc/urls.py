"""Routes of the RTC API, included under /api/v1/."""

from django.urls import path

from rtc import api

urlpatterns = [
    path("rtc/ice-servers", api.IceServersView.as_view(), name="rtc-ice-servers"),
]
