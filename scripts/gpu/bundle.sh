#!/usr/bin/env bash
# Fetch what the GPU machine (the `device` tool's bare H200 box: Python 3.12, torch, transformers,
# accelerate, peft; no registry) lacks, from the package registries, into two git-ignored folders:
#   .whl/  x86-64 CPython 3.12 wheels of spatialrl's pure/binary dependencies missing there
#   .gl/   the EGL/OpenGL/Vulkan loader .debs (amd64) that headless moderngl needs there
# Every GPU command carries both (`carry: [".whl", ".gl"]`) and starts with `source scripts/gpu/prelude.sh`.
#   bash scripts/gpu/bundle.sh            # idempotent; ~6 MB in all
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
mkdir -p .whl .gl
# Missing on the GPU image (checked 2026-12-04): name each dependency too (pip --no-deps).
WHEELS=(gymnasium==1.2.2 farama-notifications==0.0.4 cloudpickle==3.1.2 moderngl==5.12.0 glcontext==3.0.0
        geopy==2.4.1 geographiclib==2.1 typer==0.20.0 shellingham==1.5.4 num2words==0.5.14)  # (docopt: num2words CLI only)
PLATFORMS=()
for n in 17 24 27 28 31 34 35; do PLATFORMS+=(--platform "manylinux_2_${n}_x86_64"); done
PLATFORMS+=(--platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any)
for w in "${WHEELS[@]}"; do
  name=${w%%==*}
  ls .whl/ 2>/dev/null | grep -qi "^${name//-/_}-${w##*==}" && continue
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${PLATFORMS[@]}" -d .whl "$w"
done
if ! ls .gl/*.deb >/dev/null 2>&1; then
  o=(-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64-lists)
  mkdir -p /tmp/amd64-lists/partial
  apt-get "${o[@]}" update -qq
  (cd .gl && apt-get "${o[@]}" download -qq libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
fi
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || printf '/.whl/\n/.gl/\n' >> .git/info/exclude
du -sh .whl .gl
