"""A small Django project that embeds the relay as the README says: the routes and the operator
page through WSGI (`wsgi.py`, over the threaded service) and through ASGI (`asgi.py`, over the
async service), in front of the app's own views (`views.py`). `site.py` holds what the running
test wires in."""
