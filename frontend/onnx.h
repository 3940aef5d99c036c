/* The ONNX front end: an ONNX model file -> the same verified IR graph the model
 * language gives (docs/onnx.md states the contract).
 *
 * The file is read with protobuf-c (C code generated from third_party/onnx/onnx.proto
 * when colossalc is built). The graph's inputs are the data (integer inputs become
 * i32), its float initialisers the trainable parameters under their own names, and its
 * one scalar float output the loss. Shape computations (Shape, Gather, Concat, Range,
 * ConstantOfShape, Where on constants, ...) are folded while the file is read; the
 * ops the models need map onto IR ops, and the patterns exporters spell out op by op
 * (layernorm, RMSNorm, GELU, SiLU, rotary embeddings, causal masks, attention) become
 * the IR's own ops. Anything else is refused with the node's name, op type and opset. */
#ifndef COLOSSALC_ONNX_H
#define COLOSSALC_ONNX_H
#include <stdbool.h>
#include <stddef.h>
#include "frontend/frontend.h"

/* Whether a file is an ONNX model: its name ends in .onnx, or its first bytes are a
 * ModelProto's (field 1, ir_version, a small varint) rather than text. */
bool onnx_is_model(const char *path, const char *data, size_t len);

/* Read an ONNX model (len bytes, any content) named path into a verified graph.
 * Overrides give the sizes of symbolic dimensions (`--set batch=4`). Returns NULL
 * after reporting the first error; never exits, so it is safe to call from a fuzzer. */
Graph *onnx_compile(Arena *a, const char *path, const char *data, size_t len, ConfigOverride *ov, int nov);

#endif
