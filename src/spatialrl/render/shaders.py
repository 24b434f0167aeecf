"""GLSL sources. One vertex layout for every pass: 13 floats per vertex
(position 3, normal 3, colour 3, uv 2, texture layer 1 (-1 = none), instance id 1 (exact in f32 below 2^24))."""

VERTEX_FORMAT = "3f 3f 3f 2f 1f 1f"
VERTEX_ATTRS = ("in_pos", "in_normal", "in_color", "in_uv", "in_layer", "in_id")
FLOATS_PER_VERTEX = 13

# Lighting depends only on the normal (no shadows, no specular), so it is computed per vertex:
# per-pixel lighting cost llvmpipe ~40% more time per frame for no visible gain on flat-shaded boxes.
# "Ambient cube" (Valve, 2006): one brightness per axis direction (+x, -x, +y, -y, +z, -z), blended
# by the squared normal, so every wall orientation and every side of a box gets its own brightness;
# plus an optional directional key light (the sun in cities).
SHADED_VS = """
#version 330
uniform mat4 mvp;
uniform vec3 cube_pos;  // brightness of faces facing +x, +y, +z
uniform vec3 cube_neg;  // ... facing -x, -y, -z
uniform vec3 key_dir;
uniform float key;
in vec3 in_pos;
in vec3 in_normal;
in vec3 in_color;
in vec2 in_uv;
in float in_layer;
out vec3 v_color;
out vec2 v_uv;
flat out float v_layer;
void main() {
    gl_Position = mvp * vec4(in_pos, 1.0);
    vec3 n = normalize(in_normal);
    float shade = dot(n * n, mix(cube_neg, cube_pos, step(0.0, n))) + key * max(dot(n, key_dir), 0.0);
    v_color = in_color * shade;
    v_uv = in_uv;
    v_layer = in_layer;
}
"""

SHADED_FS = """
#version 330
uniform sampler2DArray textures;
in vec3 v_color;
in vec2 v_uv;
flat in float v_layer;
out vec4 f_color;
void main() {
    vec3 c = v_color;
    if (v_layer >= 0.0) {  // flat per triangle: untextured triangles skip the (costly) texture fetch
        c *= texture(textures, vec3(v_uv, v_layer)).rgb;
    }
    f_color = vec4(c, 1.0);  // the UNORM8 target clamps to 1
}
"""

ID_VS = """
#version 330
uniform mat4 mvp;
in vec3 in_pos;
in float in_id;
flat out int v_id;
void main() {
    gl_Position = mvp * vec4(in_pos, 1.0);
    v_id = int(in_id + 0.5);
}
"""

# The id is written as 24 bits spread over R, G, B of an RGBA8 target: k/255 converts exactly to the
# byte k, so the readback is lossless without relying on integer colour attachments.
ID_FS = """
#version 330
flat in int v_id;
out vec4 f_color;
void main() {
    f_color = vec4(float(v_id & 255), float((v_id >> 8) & 255), float((v_id >> 16) & 255), 255.0) / 255.0;
}
"""

# Full-screen triangle at the far plane, drawn after the scene with depth test LEQUAL so only
# background pixels pay for it. The view ray comes from the camera basis and the FOV.
SKY_VS = """
#version 330
uniform vec3 cam_right;
uniform vec3 cam_up;
uniform vec3 cam_forward;
uniform vec2 half_extent;  // (tan(fov/2) * aspect, tan(fov/2))
out vec3 v_dir;
void main() {
    vec2 p = vec2(float((gl_VertexID & 1) << 2) - 1.0, float((gl_VertexID & 2) << 1) - 1.0);
    // clip y is flipped by the renderer (row 0 at the top), so NDC +y is the bottom of the image
    v_dir = cam_forward + p.x * half_extent.x * cam_right - p.y * half_extent.y * cam_up;
    gl_Position = vec4(p, 1.0, 1.0);
}
"""

SKY_FS = """
#version 330
uniform vec3 zenith;
uniform vec3 horizon;
uniform vec3 ground;
in vec3 v_dir;
out vec4 f_color;
void main() {
    float e = normalize(v_dir).y;
    vec3 c = e >= 0.0 ? mix(horizon, zenith, sqrt(e)) : mix(horizon, ground, min(1.0, -e * 6.0));
    f_color = vec4(c, 1.0);
}
"""
