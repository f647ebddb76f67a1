"""tcoll_torch.DistributedDataParallel: PyTorch's DDP contract on tcoll's execution layer.

    model = tcoll_torch.DistributedDataParallel(model, planner="optimal")
    loss_fn(model(x), y).backward()      # buckets reduced during backward; done on return
    optimizer.step()

The float32 gradients live in one tcoll gradient pool in backward order (each other
floating dtype in a side pool of its own, averaged at the end of backward); every
parameter's ``.grad`` is a view into it, so a bucket is averaged in place, with no copy (DDP's
``gradient_as_bucket_view``, GradientFlow's lazy allreduce). A post-accumulate-grad hook per
parameter tells the reducer its gradient is final; a bucket starts as soon as its tensors
are, in plan order, on the tcoll backend's communication engine while backward goes on.
``backward()`` returns after the last bucket (an autograd callback at the end of backward
waits for it, as DDP's reducer does), so the optimizer sees averaged gradients.

Buckets come from any tcoll planner (``layerwise``, ``single``, ``threshold``, ``ddp``,
``mgwfbp``, ``adafusion``, ``optimal``): a first plan from the tensor sizes, then after
``autotune_iterations`` measured iterations a re-plan from the measured backward and
communication times; every rank adopts rank 0's plan. Schemes are tcoll's compression
registry's (``_C.compression_registry()``, compress/registry.hpp): ``dense`` (wire float32,
bfloat16 or float16: the registry's ``bfloat16`` and ``half``), ``csc`` (GradientFlow's
coarse-grained sparse chunks; see docs/torch.md for what the hook form leaves out), ``topk``
(each rank's ``density`` share of largest gradients, with error feedback unless
``residual`` says ``momentum_scaled`` or ``none``) and ``dgc`` (Deep Gradient Compression:
momentum correction and masking around top-k; the momentum is inside the averaged gradient,
so train with plain SGD). ``topk`` and ``dgc`` select over the whole pool, so they start once
backward has produced every gradient. The scheme knobs (``density``, ``warmup_iterations``,
``residual``, ``momentum``, ``chunk_elements``, ``threshold_bytes``, ``wire_scale``) left at
None take the scheme's default (csc: density 0.15, 100 warm-up iterations, error feedback;
topk and dgc: density 0.01, no warm-up); one the scheme does not read is an error.

Unused parameters (``find_unused_parameters``, ``static_graph``) follow DDP's reducer: the
ranks allreduce a map of the parameters each used since the last synchronized backward; a
parameter some rank used gets the average as ``.grad`` everywhere, one nobody used keeps
its ``.grad`` (None stays None).
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


class _SidePool:
    """The gradients of the parameters of one dtype other than float32 (float64, float16,
    bfloat16), each ``.grad`` a view into one flat tensor: averaged at the end of backward by
    one allreduce of the group (tcoll's planners and schemes run on float32)."""

    def __init__(self, params):
        self.params = list(params)
        numel = sum(p.numel() for p in self.params)
        self.flat = torch.zeros(numel, dtype=self.params[0].dtype)
        self.views, at = [], 0
        for p in self.params:
            self.views.append(self.flat[at:at + p.numel()].view(p.shape))
            at += p.numel()
        self.marked = [False] * len(self.params)
        with torch.no_grad():
            for p, view in zip(self.params, self.views):
                if p.grad is not None:
                    view.copy_(p.grad)
                    p.grad = view


class DistributedDataParallel(torch.nn.Module):
    """A drop-in for ``torch.nn.parallel.DistributedDataParallel`` for CPU models on a process
    group whose CPU backend is ``tcoll`` (see the module docstring). It takes every argument
    PyTorch's DDP takes, in the same order; tcoll's own knobs follow as keywords. Arguments
    about devices and PyTorch's bucket layout have no meaning here and are accepted (see
    docs/torch.md, "tcoll's DistributedDataParallel")."""

    def __init__(self, module, device_ids=None, output_device=None, dim=0,
                 broadcast_buffers=None, init_sync=True, process_group=None, bucket_cap_mb=None,
                 find_unused_parameters=False, check_reduction=False,
                 gradient_as_bucket_view=False, static_graph=False,
                 delay_all_reduce_named_params=None, param_to_hook_all_reduce=None,
                 mixed_precision=None, device_mesh=None, skip_all_reduce_unused_params=False,
                 bucket_cap_mb_list=None, batched_grad_copy=False, forward_sync_buffers=None,
                 lazy_bucket_allocation=False, *, planner="optimal", scheme="dense",
                 wire="float32", autotune_iterations=3, check_plan=True, wire_scale=None,
                 density=None, chunk_elements=None, warmup_iterations=None,
                 threshold_bytes=None, residual=None, momentum=None, rebuild_order=False):
        super().__init__()
        self.module = module
        if device_mesh is not None:
            if process_group is not None:
                raise RuntimeError("tcoll_torch.DistributedDataParallel: pass process_group "
                                   "or device_mesh, not both (as PyTorch's DDP)")
            if device_mesh.ndim != 1:
                raise RuntimeError("tcoll_torch.DistributedDataParallel: only a 1-D device_mesh "
                                   f"is supported, got {device_mesh.ndim} dimensions")
            process_group = device_mesh.get_group(mesh_dim=0)
        if process_group is None:
            process_group = dist.distributed_c10d._get_default_group()
        self.process_group = process_group
        if device_ids or output_device is not None:
            # PyTorch's DDP says the same for a CPU module
            raise ValueError(
                "DistributedDataParallel device_ids and output_device arguments only work with "
                "single-device/multiple-device GPU modules or CPU modules, but got device_ids "
                f"{device_ids}, output_device {output_device}, and module parameters "
                f"{ {p.device for p in module.parameters()} } (tcoll_torch takes CPU modules)")
        if mixed_precision is not None:
            wire = self._wire_of(mixed_precision, wire)
        self.device_ids = None
        self.output_device = None
        self.dim = dim
        self.static_graph = static_graph
        # static_graph: the same parameters are unused in every iteration, which the
        # unused-parameter path handles as well (its one extra call is a tiny allreduce)
        self.find_unused_parameters = find_unused_parameters
        self._find_unused = find_unused_parameters or static_graph
        if forward_sync_buffers is not None:
            self.forward_sync_buffers, init_sync_buffers = forward_sync_buffers, True
        else:
            self.forward_sync_buffers = broadcast_buffers if broadcast_buffers is not None else True
            init_sync_buffers = self.forward_sync_buffers
        self.require_backward_grad_sync = True
        # knobs of PyTorch's DDP that tcoll's reducer has no use for, kept for inspection
        self.bucket_cap_mb = bucket_cap_mb
        self.gradient_as_bucket_view = gradient_as_bucket_view

        params, seen = [], set()
        for name, p in module.named_parameters():
            if not p.requires_grad or id(p) in seen:
                continue
            seen.add(id(p))
            if p.device.type != "cpu" or p.layout != torch.strided or not p.is_floating_point():
                raise ValueError(
                    f"tcoll_torch.DistributedDataParallel: parameter {name} is "
                    f"{p.dtype} on {p.device} ({p.layout}); only dense floating-point CPU "
                    "parameters are supported")
            params.append(p)
        if not params:
            raise ValueError("tcoll_torch.DistributedDataParallel: the module has no parameter "
                             "that requires a gradient")
        if init_sync:
            self._broadcast(list(self.module.parameters()) +
                            (list(self.module.buffers()) if init_sync_buffers else []))

        # backward order: the reverse of registration, as DDP's first buckets assume. float32
        # parameters go to tcoll's pool (planners, schemes, overlap with backward); each other
        # dtype gets a side pool, averaged at the end of backward
        backward_order = list(reversed(params))
        self._params = [p for p in backward_order if p.dtype == torch.float32]
        self._side = {}
        for p in backward_order:
            if p.dtype != torch.float32:
                self._side.setdefault(p.dtype, []).append(p)
        self._side = [_SidePool(ps) for _, ps in sorted(self._side.items(), key=lambda kv: str(kv[0]))]
        self._side_of = {id(p): (pool, i) for pool in self._side for i, p in enumerate(pool.params)}
        self._rebuild_order = rebuild_order and bool(self._params)
        options = reducer_options(
            planner=planner, scheme=scheme, wire=wire, autotune_iterations=autotune_iterations,
            check_plan=check_plan, wire_scale=wire_scale, density=density,
            chunk_elements=chunk_elements, warmup_iterations=warmup_iterations,
            threshold_bytes=threshold_bytes, residual=residual, momentum=momentum)
        self._options = options
        self._backend = process_group._get_backend(torch.device("cpu"))
        self._reducer = None
        self._index, self._views = {}, []
        if self._params:
            self._make_pool(self._params)
        # every parameter: used (its hook saw a gradient) since the last synchronized backward
        self._names = {id(p): n for n, p in module.named_parameters()}
        self._all = backward_order
        self._used = {id(p): False for p in backward_order}
        self._finalize_queued = False
        self._hooks = [p.register_post_accumulate_grad_hook(self._hook) for p in backward_order]

    @staticmethod
    def _wire_of(mixed_precision, wire):
        """PyTorch's (private) _MixedPrecision: its reduce_dtype is tcoll's wire format;
        parameters keep their dtype (param_dtype and buffer_dtype other than None are not
        supported)."""
        if getattr(mixed_precision, "param_dtype", None) is not None or \
                getattr(mixed_precision, "buffer_dtype", None) is not None:
            raise NotImplementedError(
                "tcoll_torch.DistributedDataParallel: mixed_precision with param_dtype or "
                "buffer_dtype is not supported (its reduce_dtype is: the wire format)")
        reduce_dtype = getattr(mixed_precision, "reduce_dtype", None)
        names = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}
        if reduce_dtype is None:
            return wire
        if reduce_dtype not in names:
            raise ValueError("tcoll_torch.DistributedDataParallel: mixed_precision.reduce_dtype "
                             f"must be float32, bfloat16 or float16, got {reduce_dtype}")
        return names[reduce_dtype]

    # -- what DDP users call -------------------------------------------------------------

    def forward(self, *args, **kwargs):
        # buffers from rank 0 when the previous forward was one that backward synchronizes
        # (PyTorch's require_forward_param_sync), so evaluation under no_grad changes nothing
        if self.require_forward_param_sync and self.forward_sync_buffers:
            self._broadcast(list(self.module.buffers()))
        self.require_forward_param_sync = torch.is_grad_enabled() and \
            self.require_backward_grad_sync
        return self.module(*args, **kwargs)

    require_forward_param_sync = True

    @property
    def broadcast_buffers(self):
        """PyTorch's older name of ``forward_sync_buffers``."""
        return self.forward_sync_buffers

    @broadcast_buffers.setter
    def broadcast_buffers(self, value):
        self.forward_sync_buffers = value

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
        """Bucket ends of the plan in use (float32 tensors in backward order; empty for csc
        and for a model without float32 parameters)."""
        return list(self._reducer.plan()) if self._reducer else []

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
        """A reducer whose pool holds `params`' gradients in this order; each `.grad` that is
        set becomes its view (the gradient it held is copied in; one that is None stays None
        until its first gradient, as in PyTorch), and a scheme's per-element state (topk's
        residual, dgc's velocity and accumulation) moves along. Collective (the plan
        check)."""
        old = self._reducer
        old_layout = [(id(p), p.numel()) for p in self._params] if old is not None else []
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

    def _view_of(self, param):
        index = self._index.get(id(param))
        if index is not None:
            return self._views[index]
        pool, i = self._side_of[id(param)]
        return pool.views[i]

    def _hook(self, param):
        view = self._view_of(param)
        if param.grad is not view:
            # a first gradient, or zero_grad(set_to_none=True) dropped the view, so autograd
            # made a fresh gradient: it goes into the pool, and the view comes back
            with torch.no_grad():
                view.copy_(param.grad)
            param.grad = view
        self._used[id(param)] = True  # also inside no_sync: DDP's local_used_map
        if not self.require_backward_grad_sync:
            return
        if not self._finalize_queued:
            self._finalize_queued = True
            torch.autograd.Variable._execution_engine.queue_callback(self._finalize)
        index = self._index.get(id(param))
        if index is None:
            pool, i = self._side_of[id(param)]
            if pool.marked[i]:
                self._finalize_queued = False
                self._twice(param, RuntimeError("already marked"))
            pool.marked[i] = True
            return
        try:
            self._reducer.mark_ready(index)
        except RuntimeError as e:
            # backward stops here and runs no callback: the next one queues its own
            self._finalize_queued = False
            if "already marked" not in str(e):
                raise
            self._twice(param, e)

    def _twice(self, param, e):
        raise RuntimeError(
            f"{e}\ntcoll_torch.DistributedDataParallel: parameter "
            f"{self._names.get(id(param), '?')} got its gradient twice in one backward (a "
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

    def _prepare_unused(self, params, views, unused):
        """Before a parameter that got no gradient in this backward is reduced (DDP's
        mark_variable_ready): its part of the pool holds its `.grad` if it has one (what
        no_sync accumulated, or zeros), otherwise zeros. Returns {index: the local gradient}
        for those whose `.grad` must stay as it was if no rank used them."""
        keep = {}
        with torch.no_grad():
            for i in unused:
                p, view = params[i], views[i]
                if p.grad is None:
                    view.zero_()
                    continue
                if p.grad is not view:
                    view.copy_(p.grad)
                keep[i] = view.clone()
        return keep

    def _settle_unused(self, params, views, unused, keep, used_anywhere):
        """After the reduction, as DDP's finalize_bucket_dense: a parameter some rank used
        gets the average as its `.grad`; one no rank used keeps its `.grad` untouched."""
        with torch.no_grad():
            for i in unused:
                p, view = params[i], views[i]
                if used_anywhere[id(p)]:
                    p.grad = view
                elif i in keep and p.grad is view:
                    view.copy_(keep[i])

    def _finalize(self):
        self._finalize_queued = False
        unmarked = self._reducer.unmarked() if self._reducer else []
        side_unmarked = [[i for i, m in enumerate(pool.marked) if not m] for pool in self._side]
        if not self._find_unused and any(side_unmarked):
            # (the float32 pool's own check fails in finish(), below)
            missing = [pool.params[u[0]] for pool, u in zip(self._side, side_unmarked) if u]
            for pool in self._side:
                pool.marked = [False] * len(pool.marked)
            raise RuntimeError(self._unused_message(missing) + " Its peers fail at the "
                               "group's timeout.")
        keep = side_keep = None
        if self._find_unused:
            keep = self._prepare_unused(self._params, self._views, unmarked)
            side_keep = [self._prepare_unused(pool.params, pool.views, u)
                         for pool, u in zip(self._side, side_unmarked)]
            for i in unmarked:
                self._reducer.mark_ready(i)
        # every rank starts these in the same order: the float32 pool's buckets (all marked
        # now), each side pool, then the map of used parameters
        works = [dist.all_reduce(pool.flat, op=dist.ReduceOp.AVG, group=self.process_group,
                                 async_op=True) for pool in self._side]
        used_map = None
        if self._find_unused:
            used_map = torch.tensor([self._used[id(p)] for p in self._all], dtype=torch.uint8)
            works.append(dist.all_reduce(used_map, op=dist.ReduceOp.MAX,
                                         group=self.process_group, async_op=True))
        for pool in self._side:
            pool.marked = [False] * len(pool.marked)
        try:
            if self._reducer:
                self._reducer.finish()
            for w in works:
                w.wait()
        except RuntimeError as e:
            if unmarked and not self._find_unused:
                raise RuntimeError(f"{e}\n" + self._unused_message(
                    [self._params[i] for i in unmarked]) +
                    " The process group is broken now (its peers fail too).") from e
            raise
        if self._find_unused:
            used_anywhere = {id(p): bool(u) for p, u in zip(self._all, used_map.tolist())}
            self._settle_unused(self._params, self._views, unmarked, keep, used_anywhere)
            for pool, u, k in zip(self._side, side_unmarked, side_keep):
                self._settle_unused(pool.params, pool.views, u, k, used_anywhere)
        self._used = {id(p): False for p in self._all}
        if self._rebuild_order:
            self._rebuild_in_arrival_order()

    def _unused_message(self, missing):
        return (f"tcoll_torch.DistributedDataParallel: {len(missing)} parameter(s) got no "
                f"gradient in this backward (the first: {self._names.get(id(missing[0]), '?')});"
                " pass find_unused_parameters=True if that is expected.")

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
