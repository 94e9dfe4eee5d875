"""Whole optimizer steps replayed as device graphs (`torch.cuda.CUDAGraph`: CUDA graphs, HIP graphs on ROCm).

A padded step's work (the forwards and backwards of its micro-batches, gradient clipping and the AdamW update) is
captured once per step layout (the shapes of its micro-batches) and replayed for every later step of that layout,
so the host launches one graph per step instead of thousands of kernels. Only the inputs change between steps:
they are copied into the graph's static buffers before each replay. Needs a capturable optimizer with a tensor
learning rate (`make_optimizer(capturable=True)`) so that the schedule's lr reaches the captured update.
All layouts share one memory pool; they are captured largest first (`largest_first`), so that the smaller ones
can take their memory from blocks the largest one has already freed into the pool."""

from __future__ import annotations

import math

import torch


def init_optimizer_state(optimizer: torch.optim.Optimizer, params: list[torch.Tensor]) -> None:
    """Create the optimizer's state before capture (a capture would re-zero state created inside it on every
    replay): one step with zero gradients at lr 0, which leaves every parameter as it was, then the step counts
    back to 0."""
    lrs = [group["lr"].clone() for group in optimizer.param_groups]
    for group in optimizer.param_groups:
        group["lr"].fill_(0.0)
    for p in params:
        p.grad = torch.zeros_like(p)
    optimizer.step()
    for group, lr in zip(optimizer.param_groups, lrs):
        group["lr"].copy_(lr)
    for p in params:
        p.grad = None
        state = optimizer.state[p]
        if torch.is_tensor(state.get("step")):
            state["step"].zero_()


def largest_first(layouts: list[tuple]) -> list[tuple]:
    """The distinct layouts (`StepGraphs.layout` keys: the shapes of a step's tensors), largest first by their
    element count (ties keep their first appearance's order): the order to capture them in."""
    distinct = list(dict.fromkeys(layouts))
    return sorted(distinct, key=lambda layout: -sum(math.prod(shape) for shape in layout))


class StepGraphs:
    """One captured graph per step layout. `forward_backward(batches)` runs a step's micro-batches (device tensors)
    and returns the step's loss; `update()` clips, steps the optimizer and returns the gradient norm. Both run
    inside the capture; the learning-rate schedule stays outside (it writes the optimizer's lr tensor)."""

    def __init__(self, forward_backward, update, optimizer, params, device: torch.device):
        self.forward_backward, self.update = forward_backward, update
        self.optimizer, self.params, self.device = optimizer, params, device
        self.pool = torch.cuda.graph_pool_handle()  # one memory pool for all layouts: they never run at once
        self.graphs: dict[tuple, tuple] = {}
        self.state_ready = False

    @staticmethod
    def layout(batches: list[tuple[torch.Tensor, ...]]) -> tuple:
        return tuple(tuple(t.shape) for batch in batches for t in batch)

    def capture(self, batches: list[tuple[torch.Tensor, ...]]) -> None:
        """Capture the step for this layout (untimed; `batches` are host tensors that give the shapes)."""
        key = self.layout(batches)
        if key in self.graphs:
            return
        if not self.state_ready:
            init_optimizer_state(self.optimizer, self.params)
            self.state_ready = True
        static = [tuple(t.to(self.device) for t in batch) for batch in batches]
        # Warm up on a side stream first (lazy library and autograd set-up must not happen inside the capture);
        # the gradients are thrown away and nothing is updated.
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            self.forward_backward(static)
        torch.cuda.current_stream(self.device).wait_stream(side)
        for p in self.params:
            p.grad = None
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            loss = self.forward_backward(static)
            norm = self.update()
            self.optimizer.zero_grad(set_to_none=True)
        self.graphs[key] = (static, graph, loss, norm)

    def step(self, batches: list[tuple[torch.Tensor, ...]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Copy this step's inputs into the captured buffers, replay, and return (loss, gradient norm) copies."""
        key = self.layout(batches)
        if key not in self.graphs:
            self.capture(batches)
        static, graph, loss, norm = self.graphs[key]
        for dst_batch, src_batch in zip(static, batches):
            for dst, src in zip(dst_batch, src_batch):
                dst.copy_(src, non_blocking=True)
        graph.replay()
        return loss.clone(), norm.clone()
