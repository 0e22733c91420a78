"""The core REST API (DRF views, serializers, errors, docs) and the other HTTP edges: the thin layer that parses, calls one action, answers."""
