"""tcoll_torch.DistributedDataParallel: PyTorch's DDP contract on tcoll's execution layer.

    model = tcoll_torch.DistributedDataParallel(model, planner="optimal")
    loss_fn(model(x), y).backward()      # buckets reduced during backward; done on return
    optimizer.step()

The gradients live in one tcoll gradient pool in backward order; every parameter's ``.grad``
is a view into it, so a bucket is averaged in place, with no copy (DDP's
``gradient_as_bucket_view``, GradientFlow's lazy allreduce). A post-accumulate-grad hook per
parameter tells the reducer its gradient is final; a bucket starts as soon as its tensors
are, in plan order, on the tcoll backend's communication engine while backward goes on.
``backward()`` returns after the last bucket (an autograd callback at the end of backward
waits for it, as DDP's reducer does), so the optimizer sees averaged gradients.

Buckets come from any tcoll planner (``layerwise``, ``single``, ``threshold``, ``ddp``,
``mgwfbp``, ``adafusion``, ``optimal``): a first plan from the tensor sizes, then after
``autotune_iterations`` measured iterations a re-plan from the measured backward and
communication times; every rank adopts rank 0's plan. Schemes: ``dense`` (wire float32,
bfloat16 or float16), ``csc`` (GradientFlow's coarse-grained sparse chunks; see
docs/torch.md for what the hook form leaves out), ``topk`` (each rank's ``density`` share of
largest gradients, with error feedback unless ``residual="none"``) and ``dgc`` (Deep
Gradient Compression: momentum correction and masking around top-k; the momentum is inside
the averaged gradient, so train with plain SGD). ``topk`` and ``dgc`` select over the whole
pool, so they start once backward has produced every gradient.
"""
import contextlib

import torch
import torch.distributed as dist

from . import _C

__all__ = ["DistributedDataParallel"]


def reducer_options(**values):
    """A ``_C.ReducerOptions`` with the given fields set (the rest at their defaults)."""
    options = _C.ReducerOptions()
    for name, value in values.items():
        setattr(options, name, value)
    return options


def carry_state(old_state, old_layout, new_state, new_layout):
    """Copies each parameter's part of a scheme's per-element state (residual, velocity,
    accumulation: lists of 1-D tensors laid out as the layouts of (key, numel) say) from the
    old layout to its place in the new one."""
    old_at, at = {}, 0
    for key, numel in old_layout:
        old_at[key] = at
        at += numel
    at = 0
    for key, numel in new_layout:
        if key in old_at:
            for old, new in zip(old_state, new_state):
                new[at:at + numel].copy_(old[old_at[key]:old_at[key] + numel])
        at += numel


class DistributedDataParallel(torch.nn.Module):
    """A drop-in for ``torch.nn.parallel.DistributedDataParallel`` for CPU float32 models on
    a process group whose CPU backend is ``tcoll`` (see the module docstring)."""

    def __init__(self, module, process_group=None, planner="optimal", scheme="dense", *,
                 wire="float32", find_unused_parameters=False, broadcast_buffers=True,
                 autotune_iterations=3, check_plan=True, wire_scale=1.0, density=0.15,
                 chunk_elements=32000, warmup_iterations=100, threshold_bytes=4 << 20,
                 residual="error_feedback", momentum=0.9, rebuild_order=False):
        super().__init__()
        self.module = module
        if process_group is None:
            process_group = dist.distributed_c10d._get_default_group()
        self.process_group = process_group
        self.find_unused_parameters = find_unused_parameters
        self.broadcast_buffers = broadcast_buffers
        self.require_backward_grad_sync = True

        params, seen = [], set()
        for name, p in module.named_parameters():
            if not p.requires_grad or id(p) in seen:
                continue
            seen.add(id(p))
            if p.device.type != "cpu" or p.dtype != torch.float32 or p.layout != torch.strided:
                raise ValueError(
                    f"tcoll_torch.DistributedDataParallel: parameter {name} is "
                    f"{p.dtype} on {p.device} ({p.layout}); only dense CPU float32 parameters "
                    "are supported")
            params.append(p)
        if not params:
            raise ValueError("tcoll_torch.DistributedDataParallel: the module has no parameter "
                             "that requires a gradient")
        self._sync_module_states()

        # backward order: the reverse of registration, as DDP's first buckets assume
        self._params = list(reversed(params))
        self._rebuild_order = rebuild_order
        options = reducer_options(
            planner=planner, scheme=scheme, wire=wire, autotune_iterations=autotune_iterations,
            check_plan=check_plan, wire_scale=wire_scale, density=density,
            chunk_elements=chunk_elements, warmup_iterations=warmup_iterations,
            threshold_bytes=threshold_bytes, residual=residual, momentum=momentum)
        self._options = options
        self._backend = process_group._get_backend(torch.device("cpu"))
        self._make_pool(self._params)
        self._finalize_queued = False
        self._hooks = [p.register_post_accumulate_grad_hook(self._hook) for p in self._params]

    # -- what DDP users call -------------------------------------------------------------

    def forward(self, *args, **kwargs):
        if self.broadcast_buffers and torch.is_grad_enabled() and self.require_backward_grad_sync:
            self._broadcast(list(self.module.buffers()))
        return self.module(*args, **kwargs)

    @contextlib.contextmanager
    def no_sync(self):
        """Gradients of the backward passes inside accumulate locally, unreduced; the first
        backward after the block reduces the sum."""
        old = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = old

    # -- what tcoll adds -----------------------------------------------------------------

    def plan(self):
        """Bucket ends of the plan in use (tensors in backward order; empty for csc)."""
        return list(self._reducer.plan())

    def parameters_in_backward_order(self):
        return list(self._params)

    def autotuned(self):
        return self._reducer.autotuned()

    def fitted_cost(self):
        """(startup_us, per_byte_us) of autotune's cost line, or None before it."""
        return self._reducer.fitted_cost()

    def last_timing(self):
        """The last iteration's timings (microseconds since its begin)."""
        return self._reducer.timing()

    def stats(self):
        """Scheme figures of the last iteration (csc: density, chunks, bytes sent; topk, dgc:
        density, k, bytes sent)."""
        return self._reducer.stats()

    def write_timeline(self, path):
        """The last iteration as a Chrome trace (WAIT_FOR_DATA, QUEUE, ALLREDUCE per bucket)."""
        self._reducer.write_trace(str(path))

    # -- internals -----------------------------------------------------------------------

    def _make_pool(self, params):
        """A reducer whose pool holds `params`' gradients in this order; each `.grad` becomes
        its view (the gradient it held is copied in), and a scheme's per-element state
        (topk's residual, dgc's velocity and accumulation) moves along. Collective (the plan
        check)."""
        old = getattr(self, "_reducer", None)
        old_layout = [(id(p), p.numel()) for p in getattr(self, "_params", [])]
        self._reducer = _C.Reducer(self._backend, [p.numel() for p in params], self._options)
        if old is not None:
            carry_state(old.state(), old_layout, self._reducer.state(),
                        [(id(p), p.numel()) for p in params])
        self._params = list(params)
        self._views = [v.view(p.shape) for v, p in zip(self._reducer.grads(), params)]
        self._index = {id(p): i for i, p in enumerate(params)}
        with torch.no_grad():
            for p, view in zip(params, self._views):
                if p.grad is not None:
                    view.copy_(p.grad)
                p.grad = view

    def _hook(self, param):
        index = self._index[id(param)]
        view = self._views[index]
        if param.grad is not view:
            # zero_grad(set_to_none=True) dropped the view, so autograd made a fresh
            # gradient: it goes into the pool, and the view comes back
            with torch.no_grad():
                view.copy_(param.grad)
            param.grad = view
        if not self.require_backward_grad_sync:
            return
        if not self._finalize_queued:
            self._finalize_queued = True
            torch.autograd.Variable._execution_engine.queue_callback(self._finalize)
        try:
            self._reducer.mark_ready(index)
        except RuntimeError as e:
            # backward stops here and runs no callback: the next one queues its own
            self._finalize_queued = False
            if "already marked" not in str(e):
                raise
            names = {id(p): n for n, p in self.module.named_parameters()}
            raise RuntimeError(
                f"{e}\ntcoll_torch.DistributedDataParallel: parameter "
                f"{names.get(id(param), '?')} got its gradient twice in one backward (a "
                "parameter used both inside and outside a reentrant checkpoint does); "
                "every parameter may be reduced once per iteration") from e

    def _rebuild_in_arrival_order(self):
        """After the first iteration, as DDP rebuilds its buckets: the pool in the order the
        gradients arrived on rank 0 (every rank adopts it), if that differs from the pool's."""
        self._rebuild_order = False
        ready = self._reducer.timing()["tensor_ready_us"]
        order = sorted(range(len(ready)), key=lambda i: (ready[i] < 0, ready[i], i))
        agreed = torch.tensor(order, dtype=torch.int64)
        if dist.get_world_size(self.process_group) > 1:
            dist.broadcast(agreed, src=dist.get_global_rank(self.process_group, 0),
                           group=self.process_group)
        order = agreed.tolist()
        if order != list(range(len(order))):
            self._make_pool([self._params[i] for i in order])

    def _finalize(self):
        self._finalize_queued = False
        if self.find_unused_parameters:
            self._reducer.mark_unused()
        unmarked = self._reducer.unmarked()
        try:
            self._reducer.finish()
            if self._rebuild_order:
                self._rebuild_in_arrival_order()
        except RuntimeError as e:
            if unmarked and not self.find_unused_parameters:
                names = {id(p): n for n, p in self.module.named_parameters()}
                first = names.get(id(self._params[unmarked[0]]), "?")
                raise RuntimeError(
                    f"{e}\ntcoll_torch.DistributedDataParallel: {len(unmarked)} parameter(s) got "
                    f"no gradient in this backward (the first: {first}); pass "
                    "find_unused_parameters=True if that is expected. The process group is "
                    "broken now (its peers fail too).") from e
            raise

    def _sync_module_states(self):
        """Rank 0's parameters and buffers on every rank (DDP's construction-time sync)."""
        self._broadcast(list(self.module.parameters()) + list(self.module.buffers()))

    def _broadcast(self, tensors):
        if not tensors or dist.get_world_size(self.process_group) == 1:
            return
        source = dist.get_global_rank(self.process_group, 0)
        by_type = {}
        for t in tensors:
            by_type.setdefault(t.dtype, []).append(t)
        with torch.no_grad():
            for group in by_type.values():
                flat = torch._utils._flatten_dense_tensors([t.detach() for t in group])
                dist.broadcast(flat, src=source, group=self.process_group)
                for t, synced in zip(group, torch._utils._unflatten_dense_tensors(flat, group)):
                    t.copy_(synced)
