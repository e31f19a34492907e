#!/usr/bin/env bash
# Regenerate advisor/importers/_proto/tf_runmetadata_pb2.py(i) from tf_runmetadata.proto.
#
# Dev-time only: needs grpcio-tools, installed into a throwaway venv so the project's own
# environment keeps whatever protobuf runtime it has. grpcio-tools is pinned because the
# generated code refuses to load on a protobuf runtime older than the protoc that wrote it:
# grpcio-tools 1.75.1 bundles protoc 31.1, i.e. gencode 6.31.1, which is the lower bound of
# `protobuf` in pyproject.toml (also TensorFlow 2.21's own lower bound). Change both together.
set -euo pipefail

GRPCIO_TOOLS_VERSION="1.75.1"
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${REGEN_PROTO_VENV:-${TMPDIR:-/tmp}/advisor-regen-proto-venv}"

if [[ ! -x "$venv/bin/python" ]]; then
    python3 -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet "grpcio-tools==${GRPCIO_TOOLS_VERSION}"

cd "$repo_root"
"$venv/bin/python" -m grpc_tools.protoc \
    --proto_path=. \
    --python_out=. \
    --pyi_out=. \
    advisor/importers/_proto/tf_runmetadata.proto
echo "regenerated advisor/importers/_proto/tf_runmetadata_pb2.py and .pyi"
