"""A dynamically quantised (INT8) BERT graph made batch-invariant: each text quantised on its own.

onnxruntime's ``quantize_dynamic`` graphs quantise every activation entering a weight matrix with one
``DynamicQuantizeLinear`` over the whole tensor, all the texts of a batch (and their padding) at once:
a text's quantisation step then depends on its batch-mates. Measured on the packaged token encoder,
400 short texts: padded batches of 8-64 moved single token vectors to cosine 0.79 of the same text
encoded alone (p1 0.975), and batches of texts of one length, with no padding at all, just as much
(min 0.78): the shared range, not the padding, is what moves them.

``per_text_quantisation`` rewrites each such node to take its range per text, over the text's real
tokens only (the attention mask zeroes the padding first; 0 is inside every range anyway), which is
what a text alone gets: so a text's vectors are the same in any batch, padded or not, as alone.
Per-text zero points are outside ``MatMulInteger``'s CPU kernel (a scalar only), so the matrix product
takes a zero point of 0 and the zero point's share, ``zero_point x column sums of the weights``, is
subtracted after it, in int32: the same integers. (Taking it off the bias in float instead saves a pass
but loses bits: products past 2^24 moved token vectors to cosine 0.95.)
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

MASK = "engram_text_mask"


def per_text_quantisation(model_bytes: bytes) -> bytes:
    """The serialised model with per-text activation quantisation (see the module docstring); a
    model without ``DynamicQuantizeLinear`` comes back unchanged."""
    model = onnx.load_from_string(model_bytes)
    graph = model.graph
    quantizers = [n for n in graph.node if n.op_type == "DynamicQuantizeLinear"]
    if not quantizers:
        return model_bytes
    ranks = {v.name: len(v.type.tensor_type.shape.dim) for v in graph.value_info}
    # The scales and zero points, scalars now, become one per text; every other shape stays, and is
    # kept: without them onnxruntime fuses the graph differently, and the vectors move (cosine 0.95).
    kept_shapes = [v for v in graph.value_info if len(v.type.tensor_type.shape.dim) > 0]
    del graph.value_info[:]
    graph.value_info.extend(kept_shapes)
    weights = {t.name: t for t in graph.initializer}
    nodes: list[Any] = []
    constants: list[Any] = []

    def constant(name: str, value: np.ndarray[Any, Any]) -> str:
        constants.append(numpy_helper.from_array(value, name))
        return name

    def node(op: str, inputs: list[str], output: str, **attrs: Any) -> str:
        nodes.append(helper.make_node(op, inputs, [output], name=output, **attrs))
        return output

    zero = constant("engram_q_zero", np.array(0.0, np.float32))
    top = constant("engram_q_255", np.array(255.0, np.float32))
    tiny = constant("engram_q_tiny", np.array(1e-30, np.float32))
    axis = constant("engram_q_axis", np.array([2], np.int64))
    mask = node("Cast", [node("Unsqueeze", ["attention_mask", axis], MASK + "_3d")], MASK, to=1)
    rewritten: dict[str, str] = {}  # zero-point output of a rewritten quantizer -> its int32 twin
    replaced: set[str] = set()  # the quantized outputs of the quantizers rewritten
    for q in quantizers:
        x, (xq, scale, zp) = q.input[0], q.output
        if ranks.get(x) != 3:  # [batch, tokens, features] only (the pooler's [batch, features] stays)
            continue
        p = x + "_pt"
        masked = node("Mul", [x, mask], p + "_masked")  # padding -> 0, inside every range already
        high = node("Max", [node("ReduceMax", [masked], p + "_rmax", axes=[1, 2]), zero], p + "_max")
        low = node("Min", [node("ReduceMin", [masked], p + "_rmin", axes=[1, 2]), zero], p + "_min")
        node("Max", [node("Div", [node("Sub", [high, low], p + "_range"), top], p + "_step"), tiny], scale)
        shift = node("Sub", [zero, node("Div", [low, scale], p + "_shift")], p + "_zp0")
        zero_point = node("Round", [node("Clip", [shift, zero, top], p + "_zpc")], p + "_zpf")
        # One scale and zero point per text (axis 0): the same integers as the original kernel's.
        flat = constant(p + "_flat", np.array([-1], np.int64))
        per_text_zp = node("Cast", [node("Reshape", [zero_point, flat], p + "_zpv")], p + "_zp8", to=2)
        per_text_scale = node("Reshape", [scale, flat], p + "_scalev")
        node("QuantizeLinear", [x, per_text_scale, per_text_zp], xq, axis=0)
        rewritten[zp] = node("Cast", [zero_point], p + "_zp32", to=6)  # int32
        replaced.add(xq)
    for n in graph.node:
        if n.op_type != "MatMulInteger" or len(n.input) < 3 or n.input[2] not in rewritten:
            continue
        w, w_zp = n.input[1], n.input[3] if len(n.input) > 3 else ""
        columns = numpy_helper.to_array(weights[w]).astype(np.int32)
        if w_zp:
            columns = columns - numpy_helper.to_array(weights[w_zp]).astype(np.int32)
        sums = constant(n.output[0] + "_colsum", columns.sum(axis=0).astype(np.int32))
        raw = n.output[0] + "_zp0"
        share = node("Mul", [rewritten[n.input[2]], sums], n.output[0] + "_zpshare")  # [batch, 1, out]
        node("Sub", [raw, share], n.output[0])
        n.input[2] = ""
        n.output[0] = raw
    kept = [n for n in graph.node if not (n.op_type == "DynamicQuantizeLinear" and n.output[0] in replaced)]
    del graph.node[:]
    graph.node.extend(_topological([*kept, *nodes]))
    graph.initializer.extend(constants)
    return bytes(model.SerializeToString())


def _topological(nodes: list[Any]) -> list[Any]:
    """ONNX wants every node after the nodes that produce its inputs."""
    producer = {out: i for i, n in enumerate(nodes) for out in n.output}
    order: list[Any] = []
    state: dict[int, int] = {}
    for start in range(len(nodes)):
        stack = [(start, False)]
        while stack:
            i, expanded = stack.pop()
            if expanded:
                if state.get(i) != 2:
                    state[i] = 2
                    order.append(nodes[i])
                continue
            if state.get(i):
                continue
            state[i] = 1
            stack.append((i, True))
            stack.extend(
                (producer[x], False) for x in nodes[i].input if x in producer and not state.get(producer[x])
            )
    return order
