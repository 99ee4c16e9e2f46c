"""Schemathesis hooks for Herald's schema fuzzing (loaded through SCHEMATHESIS_HOOKS).

JSON Schema counts `5.0` as an integer; Herald, like most JSON APIs written with typed
decoders, takes integers only as numbers without a fraction or exponent (`5`), and says so in
docs/errors.md. Generated bodies holding such integral floats are dropped rather than sent, so
the checks judge what the API documents.
"""

import schemathesis
from hypothesis.internal import lambda_sources

# CPython 3.11 before 3.11.8 can fail to parse a large source file with "AST constructor
# recursion depth mismatch" (gh-106905); hypothesis parses schemathesis's own sources to describe
# a lambda for its reports, and the error then aborts the operation's test. A description is
# cosmetic: fall back to a generic one.
_describe_lambda = lambda_sources._lambda_description


def _lambda_description_or_unknown(f, *args, **kwargs):
    try:
        return _describe_lambda(f, *args, **kwargs)
    except (SystemError, ValueError, RecursionError):
        return "lambda: <unknown>"


lambda_sources._lambda_description = _lambda_description_or_unknown


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


# `application/vnd.herald.batch` bodies (docs/binary-batches.md) are bytes, like octet-stream:
# generated ones are almost never a valid batch, which exercises the refusals.
@schemathesis.serializer("application/vnd.herald.batch")
def _herald_batch(ctx, value):
    if isinstance(value, (bytes, bytearray)):
        return {"data": bytes(value)}
    return {"data": str(value).encode()}
