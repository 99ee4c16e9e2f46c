"""Schemathesis hooks for Herald's schema fuzzing (loaded through SCHEMATHESIS_HOOKS).

JSON Schema counts `5.0` as an integer; Herald, like most JSON APIs written with typed
decoders, takes integers only as numbers without a fraction or exponent (`5`), and says so in
docs/errors.md. Generated bodies holding such integral floats are dropped rather than sent, so
the checks judge what the API documents.
"""

import schemathesis


def _has_integral_float(value):
    if isinstance(value, bool):
        return False
    if isinstance(value, float):
        return value.is_integer()
    if isinstance(value, dict):
        return any(_has_integral_float(item) for item in value.values())
    if isinstance(value, (list, tuple)):
        return any(_has_integral_float(item) for item in value)
    return False


@schemathesis.hook
def filter_body(context, body):
    return not _has_integral_float(body)


@schemathesis.hook
def filter_query(context, query):
    return not _has_integral_float(query)


@schemathesis.hook
def filter_path_parameters(context, path_parameters):
    return not _has_integral_float(path_parameters)
