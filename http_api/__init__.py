"""The HTTP API (DESIGN §7) in Django REST framework: chain views, their input fields, the
document schema for OpenAPI, token authentication, the JSON parser and the error handler."""
