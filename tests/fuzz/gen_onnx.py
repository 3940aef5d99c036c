#!/usr/bin/env python3
"""Random ONNX graphs for the ONNX front end's fuzzing: well-formed files that put the
supported ops (imported and folded, frontend/onnx_ops.c and onnx_fold.c) together with
random inputs, constants and attributes, edge values included (0, -1, huge, INT64_MIN,
NaN), so that the import reaches past protobuf decoding into shape folding and pattern
matching, where byte-level mutation seldom gets. Every file must import or be refused
with one error; build-fuzz/fuzz_onnx runs them (scripts/fuzz.sh seeds its corpus with
them).

  /usr/bin/python3 tests/fuzz/gen_onnx.py DIR [COUNT [SEED]]"""
import os
import random
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

EDGE_INTS = [0, 1, 2, -1, -2, 3, 4, 8, 1 << 31, -(1 << 31), (1 << 62) + 4, -(1 << 63), (1 << 63) - 1]
EDGE_FLOATS = [0.0, 1.0, -1.0, 0.5, 1e30, -1e30, float("inf"), float("-inf"), float("nan"), 1e-30]
UNARY = ["Neg", "Relu", "Gelu", "Sigmoid", "Tanh", "Erf", "Sqrt", "Reciprocal", "Exp", "Log", "Abs", "Floor",
         "Ceil", "Not", "Cos", "Sin", "Identity", "Dropout"]
BINARY = ["Add", "Sub", "Mul", "Div", "Pow", "Min", "Max", "Equal", "Less", "Greater", "LessOrEqual",
          "GreaterOrEqual", "And", "Or", "Xor", "MatMul"]
SHAPING = ["Reshape", "Unsqueeze", "Squeeze", "Flatten", "Transpose", "Expand", "Slice", "Split", "Concat",
           "Gather", "Shape", "Size", "ConstantOfShape", "Range", "Trilu", "Where", "Cast", "Softmax",
           "LogSoftmax", "ReduceMean", "ReduceSum", "LayerNormalization", "Gemm"]


def an_int(r):
    return r.choice(EDGE_INTS) if r.random() < 0.3 else r.randint(-4, 8)


def int_list(r, n=None):
    return [an_int(r) for _ in range(n if n is not None else r.randint(0, 4))]


def const_value(r):
    """A random constant tensor: int64 or float, scalar or small, edge values mixed in."""
    kind = r.random()
    shape = [r.randint(0, 3) for _ in range(r.randint(0, 3))]
    n = int(np.prod(shape)) if shape else 1
    if kind < 0.55:
        v = np.array([an_int(r) for _ in range(n)], dtype=np.int64).reshape(shape)
    elif kind < 0.9:
        vals = [r.choice(EDGE_FLOATS) if r.random() < 0.2 else r.uniform(-3, 3) for _ in range(n)]
        v = np.array(vals, dtype=np.float32).reshape(shape)
    else:
        v = np.array([r.random() < 0.5 for _ in range(n)], dtype=np.bool_).reshape(shape)
    return numpy_helper.from_array(v)


class Graph:
    def __init__(self, r):
        self.r = r
        self.nodes = []
        self.values = ["x"]  # x = emb[tokens]: [2, 4, 4] float
        self.k = 0
        self.folding = r.random() < 0.5

    def fresh(self, base):
        self.k += 1
        return f"{base}{self.k}"

    def const(self):
        name = self.fresh("c")
        self.nodes.append(helper.make_node("Constant", [], [name], name="/" + name, value=const_value(self.r)))
        self.values.append(name)
        return name

    def pick(self):
        """An input: a new constant, an earlier constant or folded value, or x (or a
        value computed from it); constant-only graphs (self.folding) reach the folds."""
        r = self.r
        if r.random() < 0.35 or (self.folding and len(self.values) == 1):
            return self.const()
        pool = self.values[1:] if self.folding else self.values
        return r.choice(pool)

    def attrs(self, op):
        r = self.r
        a = {}
        if r.random() < 0.7:
            if op in ("Concat", "Gather", "Softmax", "LogSoftmax", "Flatten", "Split", "LayerNormalization"):
                a["axis"] = an_int(r)
            if op == "Transpose" and r.random() < 0.8:
                a["perm"] = int_list(r, r.randint(1, 4)) if r.random() < 0.3 else r.sample(range(3), 3)
            if op in ("ReduceMean", "ReduceSum"):
                a["keepdims"] = r.randint(0, 1)
            if op == "Trilu":
                a["upper"] = r.randint(0, 1)
            if op == "Cast":
                a["to"] = r.choice([1, 6, 7, 9, 10, 11, 16, 2, 3, 5, 0, 99])
            if op == "Gemm":
                a["transA"], a["transB"] = r.randint(0, 1), r.randint(0, 1)
                if r.random() < 0.3:
                    a["alpha"] = r.choice(EDGE_FLOATS)
            if op == "Gelu" and r.random() < 0.5:
                a["approximate"] = r.choice(["tanh", "none", "x"])
            if op == "LayerNormalization" and r.random() < 0.5:
                a["epsilon"] = r.choice(EDGE_FLOATS)
            if op == "Squeeze" and r.random() < 0.3:
                a["axes"] = int_list(r, r.randint(1, 3))
        return a

    def node(self):
        r = self.r
        group = r.random()
        if group < 0.25:
            op, ins = r.choice(UNARY), [self.pick()]
        elif group < 0.5:
            op, ins = r.choice(BINARY), [self.pick(), self.pick()]
        else:
            op = r.choice(SHAPING)
            arity = {"Expand": 2, "Reshape": 2, "Unsqueeze": 2, "Squeeze": r.randint(1, 2), "Slice": r.randint(3, 5),
                     "Split": r.randint(1, 2), "Concat": r.randint(1, 3), "Gather": 2, "Range": 3, "Trilu": r.randint(1, 2),
                     "Where": 3, "LayerNormalization": r.randint(1, 3), "Gemm": r.randint(2, 3)}.get(op, 1)
            ins = [self.pick() for _ in range(arity)]
        nout = r.randint(1, 3) if op == "Split" else 1
        outs = [self.fresh("v") for _ in range(nout)]
        self.nodes.append(helper.make_node(op, ins, outs, name=f"/{op}_{self.k}", **self.attrs(op)))
        self.values += outs
        return outs[0]


def make(r):
    g = Graph(r)
    g.nodes.append(helper.make_node("Gather", ["emb.weight", "tokens"], ["x"], name="/emb/Gather"))
    last = "x"
    for _ in range(r.randint(1, 8)):
        last = g.node()
    head = last if r.random() < 0.5 else "x"
    nodes = g.nodes + [helper.make_node("MatMul", [head, "w"], ["logits"], name="/head/MatMul")]
    shapes = [numpy_helper.from_array(np.array(v, dtype=np.int64)) for v in ([-1, 8], [-1])]
    nodes += [helper.make_node("Constant", [], ["rows"], name="/rows", value=shapes[0]),
              helper.make_node("Constant", [], ["flat"], name="/flat", value=shapes[1]),
              helper.make_node("Reshape", ["logits", "rows"], ["scores"], name="/Reshape"),
              helper.make_node("Reshape", ["targets", "flat"], ["labels"], name="/Reshape_1"),
              helper.make_node("SoftmaxCrossEntropyLoss", ["scores", "labels"], ["loss"], name="/loss")]
    inputs = [helper.make_tensor_value_info(n, TensorProto.INT64, [2, 4]) for n in ("tokens", "targets")]
    outputs = [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])]
    inits = [numpy_helper.from_array(np.linspace(-1, 1, 32, dtype=np.float32).reshape(8, 4), "emb.weight"),
             numpy_helper.from_array(np.linspace(1, -1, 32, dtype=np.float32).reshape(4, 8), "w")]
    graph = helper.make_graph(nodes, "random", inputs, outputs, inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", r.choice([11, 13, 14, 17, 18]))])
    m.ir_version = 8
    return m


def write_graphs(out, count, seed):
    """count random graphs from seed, as OUT/random-SEED-NNNNN.onnx"""
    os.makedirs(out, exist_ok=True)
    r = random.Random(seed)
    for i in range(count):
        with open(os.path.join(out, f"random-{seed}-{i:05d}.onnx"), "wb") as f:
            f.write(make(r).SerializeToString())


def main():
    write_graphs(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 100,
                 int(sys.argv[3]) if len(sys.argv) > 3 else 1)


if __name__ == "__main__":
    main()
