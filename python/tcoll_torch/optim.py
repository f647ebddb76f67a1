"""Optimizers that need the reducer's view of an iteration.

``CscMomentumSGD`` is GradientFlow's "Momentum SGD Correction" (Algorithm 1, lines 12-17,
tcoll's ``sparse::csc_momentum_step``) for a ``tcoll_torch.DistributedDataParallel`` with
``scheme="csc"``::

    model = tcoll_torch.DistributedDataParallel(net, scheme="csc", density=0.01,
                                                residual="momentum_scaled", momentum=0.9)
    optimizer = tcoll_torch.CscMomentumSGD(model, lr=0.05)
    loss_fn(model(x), y).backward()
    optimizer.step()

Each element of a chunk the iteration reduced gets ``u = momentum * u + lr * g; w = w - u``;
the elements of the chunks kept back keep their weight and their momentum (frozen), which a
plain ``torch.optim.SGD(momentum=...)`` cannot do: it would decay the momentum of the chunks
it sees as zero and move their weights. The parameters are moved into one buffer laid out as
the gradient pool (each parameter's data becomes a view into it, as DDP's
``gradient_as_bucket_view`` does for gradients), so the step is one call over the pool.
"""
import torch

__all__ = ["CscMomentumSGD"]


class CscMomentumSGD(torch.optim.Optimizer):
    """Momentum SGD with GradientFlow's correction for ``scheme="csc"`` (module docstring).

    ``momentum`` defaults to the model's ``momentum`` (the residual rule
    ``"momentum_scaled"`` keeps ``momentum * g`` of the unsent gradient, and Algorithm 1 uses
    the one coefficient for both). One parameter group; ``lr`` and ``momentum`` are read from
    it at every step, so learning-rate schedulers work. The momentum buffers are in
    ``state_dict()`` per parameter, as ``torch.optim.SGD``'s."""

    def __init__(self, model, lr, momentum=None):
        options = getattr(model, "_options", None)
        if options is None or options.scheme != "csc":
            raise ValueError("tcoll_torch.CscMomentumSGD: the model must be a "
                             "tcoll_torch.DistributedDataParallel with scheme='csc', got "
                             f"{type(model).__name__}"
                             + (f" with scheme='{options.scheme}'" if options else ""))
        if momentum is None:
            momentum = options.momentum
        if not lr >= 0.0 or not 0.0 <= momentum < 1.0:
            raise ValueError(f"tcoll_torch.CscMomentumSGD: lr must be >= 0 and momentum in "
                             f"[0, 1), got lr={lr}, momentum={momentum}")
        self._model = model
        super().__init__(model.parameters_in_backward_order(),
                         {"lr": lr, "momentum": momentum})
        self._reducer = None
        self._lay_out()

    def _lay_out(self):
        """Parameters and momentum in buffers laid out as the model's current pool (again after
        the model re-lays its pool: each parameter's momentum moves to its new place)."""
        reducer = self._model._reducer
        params = self._model.parameters_in_backward_order()
        elements, offsets = reducer.pool_layout()
        weights = torch.zeros(elements)
        history = torch.zeros(elements)
        with torch.no_grad():
            for p, at in zip(params, offsets):
                n = p.numel()
                weights[at:at + n].copy_(p.detach().reshape(-1))
                buffer = self.state[p].get("momentum_buffer")
                if buffer is not None:
                    history[at:at + n].copy_(buffer.reshape(-1))
                p.data = weights[at:at + n].view_as(p)
                self.state[p]["momentum_buffer"] = history[at:at + n].view_as(p)
        self._weights, self._history = weights, history
        self._params = list(params)
        self._reducer = reducer

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if self._model._reducer is not self._reducer:  # the model re-laid its pool
            self._lay_out()
        group = self.param_groups[0]
        self._reducer.momentum_step(self._weights, self._history, float(group["lr"]),
                                    float(group["momentum"]))
        return loss

    def load_state_dict(self, state_dict):
        """As torch.optim's; the loaded momentum buffers are copied into the pool-shaped
        buffer, where the step reads them."""
        super().load_state_dict(state_dict)
        _, offsets = self._reducer.pool_layout()
        for p, at in zip(self._params, offsets):
            loaded = self.state[p].get("momentum_buffer")
            view = self._history[at:at + p.numel()].view_as(p)
            if loaded is not None and loaded is not view:
                view.copy_(loaded)
            self.state[p]["momentum_buffer"] = view
