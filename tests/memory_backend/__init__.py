"""An in-memory backend for the engine's own tests (see ``backend.py``)."""
