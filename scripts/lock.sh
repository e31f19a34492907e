#!/usr/bin/env bash
# Regenerate the lock files from pyproject.toml: exact versions with their sha256 hashes, for
# every platform (--universal), for the Python the image and CI run (3.11).
#   requirements/controller.lock  the package's own dependencies: the Dockerfile installs exactly these
#   requirements/test.lock        plus the test and docs extras: .ci/run installs exactly these
#   requirements/build.lock       the build backend (requirements/build.in): the Dockerfile builds the wheel with it
# Needs uv (pip install uv). Install from a lock with
#   pip install --require-hashes --no-deps -r requirements/controller.lock && pip install --no-deps .
set -euo pipefail
cd "$(dirname "$0")/.."
UV=${UV:-uv}
common=(--quiet --universal --python-version 3.11 --generate-hashes --no-header --annotation-style line)
"$UV" pip compile "${common[@]}" pyproject.toml -o requirements/controller.lock
"$UV" pip compile "${common[@]}" --extra test --extra docs pyproject.toml -o requirements/test.lock
"$UV" pip compile "${common[@]}" requirements/build.in -o requirements/build.lock
