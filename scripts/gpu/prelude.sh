# Source at the start of every command on the GPU machine (the `device` tool's bare H200 box):
# unpacks the carried EGL/Vulkan loaders (.gl/) and installs the carried wheels (.whl/: gymnasium,
# moderngl, glcontext, geopy, ...) that its image lacks, then puts src/ on the path.
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export __EGL_VENDOR_LIBRARY_FILENAMES=${__EGL_VENDOR_LIBRARY_FILENAMES:-/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json}
[ -f "$__EGL_VENDOR_LIBRARY_FILENAMES" ] || unset __EGL_VENDOR_LIBRARY_FILENAMES
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
# packed packages too large to carry as wheels (scripts/gpu/pack_transformers.sh)
for f in .whl/*.tar.xz; do [ -f "$f" ] && tar -xJf "$f" -C /tmp/site; done
export PYTHONPATH=/tmp/site:$PWD/src:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
