"""The app's own routes; the relay's are in front of Django (`wsgi.py`, `asgi.py`)."""

from django.urls import path

from django_site import views

urlpatterns = [
    path("api/sessions", views.create),
    path("api/sessions/<str:session_id>/turn", views.turn),
    path("api/sessions/<str:session_id>/turn/end", views.end),
    path("api/sessions/<str:session_id>", views.session),
]
