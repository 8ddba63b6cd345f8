#version 450
// Greedy sampling support after a prefill's logits (decode folds it into mass.comp's
// dispatch): argmax.glsl, one workgroup per range of the vocabulary.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_basic : require
#include "common.glsl"
#include "split.glsl"
#include "argmax.glsl"

layout(local_size_x_id = 0) in;

void main() {
    argmax_logits(gl_WorkGroupID.x);
}
