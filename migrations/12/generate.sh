#!/usr/bin/env bash
# Writes the fixtures of on-disk format 12 (migrations/README.md). Format 12 moved the
# metadata's topics into rows of their own and stores no new kind of state, so its fixtures are
# made by the same steps as format 11's, run with the release that writes format 12:
#
#   HERALD=/path/to/herald migrations/12/generate.sh        # both fixtures
#   FIXTURES=one-node migrations/12/generate.sh             # one of them
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
FIXTURE_FORMAT=12 FIXTURE_DIR=$HERE exec "$HERE/../11/generate.sh" "$@"
