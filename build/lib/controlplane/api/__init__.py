"""The ModelPool API: typed objects, and the CRDs generated from those same types.

One source of truth: each kind is a set of dataclasses whose fields carry their OpenAPI
constraints (:mod:`controlplane.api.fields`). The CRD schemas are generated from them
(:mod:`controlplane.api.openapi`, :mod:`controlplane.api.crdgen`) and the objects are read from and
written to the API's plain dicts by the same field walk (:mod:`controlplane.api.codec`), so the
Python types and the schemas the API server enforces cannot drift apart.
"""
