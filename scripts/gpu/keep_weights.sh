#!/usr/bin/env bash
# Keep the weights a GPU session returned so the next session continues training them:
#   bash scripts/gpu/keep_weights.sh /work/.device/<n> [DEST]     # DEST: .init (git-ignored)
# unpacks every <arm>.tar.gz of that folder (train_builtin.sh's OUT: one model folder per arm; logs.tar.gz
# and results.tar.gz are skipped) into DEST/<arm>/, replacing an older copy only when the archive is
# whole. The next session carries DEST and starts from it:
#   run(carry=[".whl", ".gl", ".init"]): ... INIT=.init DATA_ROUND=<r+1> ... bash scripts/gpu/train_builtin.sh
# (13 MiB per arm in bf16: three arms and the wheels stay under the device tool's 64 MiB carry limit.)
set -euo pipefail
SRC=${1:?usage: keep_weights.sh FOLDER [DEST]}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DEST=${2:-$ROOT/.init}
mkdir -p "$DEST"
found=0
for archive in "$SRC"/*.tar.gz; do
  [ -e "$archive" ] || continue
  arm=$(basename "$archive" .tar.gz)
  case $arm in logs|results) continue ;; esac
  tmp=$(mktemp -d "$DEST/.unpack-XXXXXX")
  if tar -xzf "$archive" -C "$tmp" && [ -f "$tmp/$arm/config.json" ] && [ -f "$tmp/$arm/model.safetensors" ]; then
    rm -rf "${DEST:?}/$arm" && mv "$tmp/$arm" "$DEST/$arm"
    echo "kept $arm: $(du -sh "$DEST/$arm" | cut -f1) → $DEST/$arm"
    found=$((found + 1))
  else
    echo "skipped $archive: not a whole model folder ($arm/config.json and model.safetensors)" >&2
  fi
  rm -rf "$tmp"
done
[ "$found" -gt 0 ] || { echo "no model archives in $SRC" >&2; exit 1; }
