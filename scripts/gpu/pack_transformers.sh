#!/usr/bin/env bash
# Pack a transformers release for the GPU machine, whose image has an older one (5.17: no
# `mm_encoder_outputs`, so the vision cache stays off there). The full wheel (13.5 MB) does not fit the
# device tool's 64 MiB carry beside the shipped weights, so only the model families spatialrl runs
# are kept (and bloom: peft imports BloomPreTrainedModel); prelude.sh unpacks .whl/*.tar.xz into /tmp/site.
#   bash scripts/gpu/pack_transformers.sh 5.24.0      # → .whl/transformers-5.24.0-slim.tar.xz
set -euo pipefail
VERSION=${1:?transformers version}
KEEP="auto bloom encoder_decoder qwen2_vl qwen2_5_vl qwen3_vl qwen2 llama mllama idefics3 smolvlm siglip"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: -d "$TMP" "transformers==$VERSION"
(cd "$TMP" && unzip -q transformers-*.whl -d site)
for d in "$TMP"/site/transformers/models/*/; do
  name=$(basename "$d"); [[ " $KEEP " == *" $name "* ]] || rm -rf "$d"
done
mkdir -p "$ROOT/.whl"
tar -cJf "$ROOT/.whl/transformers-$VERSION-slim.tar.xz" -C "$TMP/site" .
du -h "$ROOT/.whl/transformers-$VERSION-slim.tar.xz"
