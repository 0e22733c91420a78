"""Routes of the rooms API, included under /api/v1/."""

from django.urls import path

from rooms import api

urlpatterns = [
    path("rooms", api.RoomsView.as_view(), name="rooms"),
    path("rooms/<str:room_id>", api.RoomView.as_view(), name="room"),
    path("rooms/<str:room_id>/promote", api.PromoteView.as_view(), name="room-promote"),
]
