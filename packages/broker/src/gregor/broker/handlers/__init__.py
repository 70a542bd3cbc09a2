"""Request handlers, one module per API family; each registers itself with `@handles`.

`gregor.broker.apis.load_handlers()` imports every module here, so a new module needs no
other registration.
"""
