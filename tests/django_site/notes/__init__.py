"""A small Django app with its own models and migrations, in the database the relay lives in;
its second migration runs the relay's (`relay.store.hosting.migrate`)."""
