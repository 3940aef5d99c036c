#!/usr/bin/env python3
"""Writes the malformed and unsupported ONNX files of tests/onnx/bad and expect.txt, what
colossalc must say about each (check_bad_onnx.py runs them). Run with the onnx module
(scripts/setup.sh installs it): /usr/bin/python3 tests/onnx/bad/make.py"""
import os
import random
import onnx
from onnx import TensorProto, helper, numpy_helper
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
EXPECT = []


def model(nodes, inits=(), inputs=None, outputs=None, opset=14, batch=2):
    """A small classifier: tokens [batch, 4] -> emb [8, 4] -> @ w [4, 8] -> cross-entropy,
    with the nodes given in place of its body."""
    inputs = inputs or [helper.make_tensor_value_info("tokens", TensorProto.INT64, [batch, 4]),
                        helper.make_tensor_value_info("targets", TensorProto.INT64, [batch, 4])]
    outputs = outputs or [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])]
    base = [numpy_helper.from_array(np.linspace(-1, 1, 32, dtype=np.float32).reshape(8, 4), "emb.weight"),
            numpy_helper.from_array(np.linspace(1, -1, 32, dtype=np.float32).reshape(4, 8), "w")]
    g = helper.make_graph(nodes, "bad", inputs, outputs, base + list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="make.py")
    m.ir_version = 8
    return m


def body(logits_op=None, loss_attrs=None):
    """logits = emb[tokens] @ w [batch, 4, 8], flattened to [batch * 4, 8] for the loss"""
    nodes = [helper.make_node("Gather", ["emb.weight", "tokens"], ["x"], name="/emb/Gather"),
             helper.make_node("MatMul", ["x", "w"], ["logits"], name="/head/MatMul")]
    if logits_op:
        nodes.append(logits_op)
    shapes = [numpy_helper.from_array(np.array(v, dtype=np.int64)) for v in ([-1, 8], [-1])]
    nodes += [helper.make_node("Constant", [], ["rows"], name="/rows", value=shapes[0]),
              helper.make_node("Constant", [], ["flat"], name="/flat", value=shapes[1]),
              helper.make_node("Reshape", [nodes[-1].output[0], "rows"], ["scores"], name="/Reshape"),
              helper.make_node("Reshape", ["targets", "flat"], ["labels"], name="/Reshape_1"),
              helper.make_node("SoftmaxCrossEntropyLoss", ["scores", "labels"], ["loss"], name="/loss",
                               **(loss_attrs or {}))]
    return nodes


def write(name, data, expect, args=""):
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.SerializeToString())
    EXPECT.append(f"{name}: expect: {expect}")
    if args:
        EXPECT.append(f"{name}: args: {args}")


def nested(depth):
    """A Loop whose body holds a Loop whose body ... depth deep."""
    g = helper.make_graph([], "inner", [], [])
    for _ in range(depth):
        n = helper.make_node("Loop", [], [], body=g)
        g = helper.make_graph([n], "g", [], [])
    return g.node


def main():
    good = model(body())
    onnx.checker.check_model(good)
    raw = good.SerializeToString()
    write("empty.onnx", b"", "error: empty file: not an ONNX model")
    write("truncated.onnx", raw[: len(raw) * 2 // 3], "error: malformed ONNX file")
    rnd = random.Random(7)
    write("garbage.onnx", bytes([0x08, 0x07, 0x12, 0xFF, 0xFF, 0x03]) + bytes(rnd.randrange(256) for _ in range(200)),
          "error: malformed ONNX file")
    write("nested_too_deep.onnx", model(nested(40)), "error: malformed ONNX file: protobuf messages nested more than")
    empty = onnx.ModelProto()
    empty.ir_version = 8
    empty.opset_import.append(helper.make_opsetid("", 14))
    write("no_graph.onnx", empty, "error: the ONNX model has no graph")
    write("unsupported_op.onnx", model(body(helper.make_node("LpNormalization", ["logits"], ["y"], name="/norm/Lp"))),
          "node '/norm/Lp' (LpNormalization, opset 14): error: ONNX op LpNormalization is not supported")
    write("erf_alone.onnx", model(body(helper.make_node("Erf", ["logits"], ["y"], name="/Erf"))),
          "node '/Erf' (Erf, opset 14): error: Erf has no IR op")
    scale = helper.make_node("Constant", [], ["scale"], name="/scale", value=numpy_helper.from_array(np.arange(8, dtype=np.float32)))
    write("const_tensor_operand.onnx", model([scale] + body(helper.make_node("Mul", ["logits", "scale"], ["y"], name="/Mul"))),
          "node '/Mul' (Mul, opset 14): error: a constant tensor operand of shape [8]")
    ext = model(body())
    ext.graph.initializer[1].data_location = TensorProto.EXTERNAL
    ext.graph.initializer[1].ClearField("float_data")
    ext.graph.initializer[1].ClearField("raw_data")
    write("external_data.onnx", ext, "initializer 'w': error: the values are stored outside the file")
    short = model(body())
    short.graph.initializer[1].raw_data = short.graph.initializer[1].raw_data[:-4]
    write("short_initializer.onnx", short, "initializer 'w': error: holds 31 values for 32 elements")
    f16 = model(body(), [numpy_helper.from_array(np.ones(3, dtype=np.float16), "half")])
    write("float16_param.onnx", f16, "initializer 'half': error: a parameter of ONNX element type 10")
    write("no_scalar_output.onnx",
          model(body()[:2], outputs=[helper.make_tensor_value_info("logits", TensorProto.FLOAT, [2, 4, 8])]),
          "error: no output is a floating-point scalar")
    two = body() + [helper.make_node("Identity", ["loss"], ["loss2"], name="/Identity")]
    write("two_losses.onnx", model(two, outputs=[helper.make_tensor_value_info(n, TensorProto.FLOAT, []) for n in ("loss", "loss2")]),
          "error: 2 outputs are floating-point scalars")
    und = body()
    und[1].input[1] = "nowhere"
    write("undefined_value.onnx", model(und), "node '/head/MatMul' (MatMul, opset 14): error: input 2, 'nowhere', is not defined")
    dup = body()
    dup.insert(1, helper.make_node("Identity", ["tokens"], ["x"], name="/again"))
    write("duplicate_value.onnx", model(dup), "node '/again' (Identity, opset 14): error: the value 'x' is defined twice")
    sym = [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", 4]) for n in ("tokens", "targets")]
    write("symbolic_batch.onnx", model(body(), inputs=sym), "input 'tokens': error: has a symbolic dimension 'batch': give its size with --set batch=N")
    write("fixed_batch.onnx", model(body()), "error: --set batch=3: the file's batch is fixed", "--set batch=3")
    write("unknown_dimension.onnx", model(body()), "error: --set heads: the ONNX file has no symbolic dimension 'heads'", "--set heads=4")
    write("opset_too_new.onnx", model(body(), opset=99), "error: opset 99 is newer than colossalc knows")
    dom = body()
    dom[1].domain = "com.microsoft"
    write("other_domain.onnx", model(dom), "node '/head/MatMul' (MatMul, opset 14): error: the op's domain 'com.microsoft' is not supported")
    write("loss_sum.onnx", model(body(loss_attrs={"reduction": "sum"})), "(SoftmaxCrossEntropyLoss, opset 14): error: reduction 'sum' is not supported")
    big = [helper.make_node("Constant", [], ["shape"], name="/shape", value=numpy_helper.from_array(np.array([1 << 20, 1 << 20], dtype=np.int64))),
           helper.make_node("ConstantOfShape", ["shape"], ["zeros"], name="/zeros")]
    write("huge_constant.onnx", model(big + body(helper.make_node("Add", ["logits", "zeros"], ["y"], name="/Add"))),
          "node '/zeros' (ConstantOfShape, opset 14): error: a constant of more than 2^24 elements")
    sizes = helper.make_node("Constant", [], ["sizes"], name="/sizes",
                             value=numpy_helper.from_array(np.array([(1 << 62) + 4, (1 << 62) + 4], dtype=np.int64)))
    split = helper.make_node("Split", ["logits", "sizes"], ["y", "z"], name="/Split", axis=2)
    write("split_overflow.onnx", model([sizes] + body(split)),
          "node '/Split' (Split, opset 14): error: split sizes add up to more than the axis's 8")
    ends = [helper.make_node("Constant", [], [name], name="/" + name, value=numpy_helper.from_array(np.array(v)))
            for name, v in (("start", np.int64(0)), ("limit", np.int64(4)), ("delta", np.float32(1)))]
    rng = helper.make_node("Range", ["start", "limit", "delta"], ["r"], name="/Range")
    write("range_mixed_types.onnx", model(ends + [rng] + body()),
          "node '/Range' (Range, opset 14): error: start, limit and delta must be of one type")
    with open(os.path.join(HERE, "expect.txt"), "w") as f:
        f.write("# What colossalc says about each file (tests/onnx/bad/make.py writes them; check_bad_onnx.py runs them)\n")
        f.write("\n".join(EXPECT) + "\n")


if __name__ == "__main__":
    main()
