"""The inductor pre-grad pass that runs sibling linear layers (attention's query, key and value projections) as one
matmul: :class:`FuseSiblingLinears`, installed by :func:`cselab.methods.compiled.use_tracing_settings` before a
compilation (its own module: importing inductor's pass base class costs a command's start-up about 2 s)."""

from __future__ import annotations

import operator

import torch
from torch import fx
from torch._inductor.custom_graph_pass import CustomGraphPass


class FuseSiblingLinears(CustomGraphPass):
    """An inductor pre-grad pass (``torch._inductor.config.pre_grad_custom_pass``): the linear layers of a graph
    that read the same input, with weights of one dtype and all with or all without a bias (attention's query, key
    and value projections), become ONE linear over the concatenated weights, whose output is split back::

        q, k, v = linear(x, Wq, bq), linear(x, Wk, bk), linear(x, Wv, bv)
        ->  q, k, v = split(linear(x, cat([Wq, Wk, Wv]), cat([bq, bk, bv])), [dq, dk, dv], dim=-1)

    Per transformer layer and step, one matmul instead of three forward, two instead of six backward (the input's
    and the weights' gradients), and one bias reduction: fewer host calls and larger matmuls, the same function (the
    outputs are the same dot products; float sums may differ in the last bits with the matmul's blocking).  Weights
    and biases must be defined before the first of the linears (parameters are graph inputs); the parameters and
    the state dict are untouched.  ``uuid`` hashes this file, so inductor's caches key on the pass.
    """

    LINEARS = (torch._C._nn.linear,)

    def __call__(self, graph: fx.Graph) -> None:
        order = {node: i for i, node in enumerate(graph.nodes)}
        groups: dict[tuple, list[fx.Node]] = {}
        for node in graph.nodes:
            if node.op == "call_function" and node.target in self.LINEARS and not node.kwargs:
                x, weight, bias = (list(node.args) + [None])[:3]
                value = weight.meta.get("example_value") if isinstance(weight, fx.Node) else None
                if isinstance(value, torch.Tensor) and value.dim() == 2 and isinstance(value.shape[0], int):
                    groups.setdefault((x, bias is None, value.dtype), []).append(node)
        for nodes in groups.values():
            first = min(order[n] for n in nodes)
            if len(nodes) > 1 and all(isinstance(a, fx.Node) and order[a] < first
                                      for n in nodes for a in n.args[1:] if a is not None):
                self._fuse(graph, nodes, min(nodes, key=order.__getitem__))

    @staticmethod
    def _fuse(graph: fx.Graph, nodes: list[fx.Node], first: fx.Node) -> None:
        x, has_bias = nodes[0].args[0], len(nodes[0].args) > 2 and nodes[0].args[2] is not None
        sizes = [n.args[1].meta["example_value"].shape[0] for n in nodes]
        with graph.inserting_before(first):
            weight = graph.call_function(torch.cat, ([n.args[1] for n in nodes],), {"dim": 0})
            bias = graph.call_function(torch.cat, ([n.args[2] for n in nodes],), {"dim": 0}) if has_bias else None
            fused = graph.call_function(torch._C._nn.linear, (x, weight, bias))
            parts = graph.call_function(torch.split, (fused, sizes), {"dim": -1})
            for i, node in enumerate(nodes):
                with graph.inserting_after(parts):
                    part = graph.call_function(operator.getitem, (parts, i))
                part.meta.update(node.meta)
                node.replace_all_uses_with(part)
        for node in nodes:
            graph.erase_node(node)

    def uuid(self) -> bytes:
        """The hash of this file: inductor's FX graph and AOTAutograd caches key on it."""
        from torch._inductor.custom_graph_pass import get_hash_for_files

        return get_hash_for_files((__file__,))
