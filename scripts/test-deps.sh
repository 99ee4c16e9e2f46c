#!/usr/bin/env bash
# What `make test` needs beyond a Rust toolchain and libclang (`make deps`), installed when
# missing, so that `make test` passes on a fresh Debian or Ubuntu machine:
# - nftables: the network-partition tests cut links between test nodes with nft rules (as root);
# - chromium: the browser tests drive Debian's /usr/bin/chromium with playwright-core (never a
#   downloaded browser);
# - nodejs and npm: the console's unit tests, playwright-core, the AsyncAPI parser and the
#   TypeScript client generator (their packages are pinned in package-lock.json files);
# - curl: tests/it/docs/readme.rs runs the README's curl walkthrough;
# - python3 with pip, and openapi-python-client (pinned): tests/it/docs/sdk.rs generates a
#   Python client;
# - a Python virtual environment with confluent-kafka's schema registry client and serializers
#   (pinned; in $HERALD_TEST_VENV, /var/tmp/herald-test-venv by default, apart from the system's
#   packages): tests/it/schemas/confluent_clients.rs runs them against a node.
# Debian packages need root (or sudo); without either the script says what to run and fails.
set -euo pipefail

OPENAPI_PYTHON_CLIENT_VERSION=0.29.1
CONFLUENT_KAFKA_VERSION=2.16.2
HERALD_TEST_VENV=${HERALD_TEST_VENV:-/var/tmp/herald-test-venv}

as_root() {
    if [ "$(id -u)" = 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        sudo "$@"
    else
        echo "test-deps: needs root to run: $*" >&2
        return 1
    fi
}

missing=()
command -v nft >/dev/null 2>&1 || missing+=(nftables)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
command -v curl >/dev/null 2>&1 || missing+=(curl)
command -v python3 >/dev/null 2>&1 || missing+=(python3)
python3 -m pip --version >/dev/null 2>&1 || missing+=(python3-pip)
python3 -c 'import ensurepip' >/dev/null 2>&1 || missing+=(python3-venv)
if [ "${#missing[@]}" -gt 0 ]; then
    echo "test-deps: installing ${missing[*]}"
    as_root apt-get update
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}"
fi

if ! openapi-python-client --version 2>/dev/null | grep -q "$OPENAPI_PYTHON_CLIENT_VERSION"; then
    echo "test-deps: installing openapi-python-client $OPENAPI_PYTHON_CLIENT_VERSION"
    pip=(python3 -m pip install --quiet --disable-pip-version-check
        "openapi-python-client==$OPENAPI_PYTHON_CLIENT_VERSION")
    # Debian's own python3 refuses pip installs outside a virtual environment (PEP 668).
    "${pip[@]}" 2>/dev/null || "${pip[@]}" --break-system-packages
fi

if ! "$HERALD_TEST_VENV/bin/python" -c "import confluent_kafka, sys; sys.exit(confluent_kafka.__version__ != '$CONFLUENT_KAFKA_VERSION')" 2>/dev/null; then
    echo "test-deps: installing confluent-kafka $CONFLUENT_KAFKA_VERSION into $HERALD_TEST_VENV"
    python3 -m venv "$HERALD_TEST_VENV"
    "$HERALD_TEST_VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
        "confluent-kafka[avro,json,protobuf,schemaregistry]==$CONFLUENT_KAFKA_VERSION"
fi
