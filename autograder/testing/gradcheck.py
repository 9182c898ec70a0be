"""Gradient checking across the subject boundary.

``torch.autograd.gradcheck`` must run next to the function, which here means
inside the code under test, where its verdict could be tampered with. This
check needs only outputs and gradients: it compares the analytic directional
derivative ``<v^T J, u>`` (from one backward call) with the central finite
difference ``<v, f(x + eps u) - f(x - eps u)> / (2 eps)``, for random ``u``
and ``v``: the "fast mode" of torch's own gradcheck, with the arithmetic on
the trusted side.
"""
from __future__ import annotations

from typing import Callable

import torch

from autograder.core.cases import attach
from autograder.core.i18n import N_, _, translate_text
from autograder.core.protocol import Call, Result, leaves_of, map_nested


def check_gradients(
    run: Callable[[Call], Result],
    build: Callable[[list[torch.Tensor], object], Call],
    tensors: list[torch.Tensor],
    *,
    seed: int = 0,
    directions: int = 3,
    eps: float = 1e-6,
    atol: float = 1e-7,
    rtol: float = 1e-4,
) -> None:
    """Raise AssertionError unless the gradients of ``build(tensors, ...)`` are right.

    ``build(tensors, grad_outputs)`` returns the Call, with ``tensors`` as its
    first positional arguments, in float64.
    """
    gen = torch.Generator().manual_seed(seed)
    base = run(build(tensors, None)).output
    grad_outputs = map_nested(
        base,
        lambda o: torch.randn(o.shape, generator=gen, dtype=o.dtype)
        if isinstance(o, torch.Tensor) and o.is_floating_point() else None,
    )
    analytic_call = build(tensors, grad_outputs)
    analytic_grads = run(analytic_call).arg_grads[: len(tensors)]
    # Shapes first: a mismatched pair would broadcast, and (n, 1) * (1, n) allocates n * n.
    _same_shapes(analytic_grads, tensors, N_("gradient"))
    vs = [v for v in leaves_of(grad_outputs) if isinstance(v, torch.Tensor)]

    def project(output) -> float:
        leaves = leaves_of(output)
        if len(leaves) != len(leaves_of(grad_outputs)):
            raise AssertionError(_("the output's structure changed between calls on nearby inputs"))
        outs = [o for o, v in zip(leaves, leaves_of(grad_outputs)) if isinstance(v, torch.Tensor)]
        _same_shapes(outs, vs, N_("output"))
        return sum(float((o.double() * v.double()).sum()) for o, v in zip(outs, vs))

    for k in range(directions):
        us = [torch.randn(t.shape, generator=gen, dtype=t.dtype) for t in tensors]
        plus = run(build([t + eps * u for t, u in zip(tensors, us)], None)).output
        minus = run(build([t - eps * u for t, u in zip(tensors, us)], None)).output
        numeric = (project(plus) - project(minus)) / (2 * eps)
        analytic = sum(float((g.double() * u.double()).sum()) for g, u in zip(analytic_grads, us))
        if abs(numeric - analytic) > atol + rtol * abs(numeric):
            raise attach(AssertionError(_(
                "gradients disagree with finite differences: along random direction {direction}, autograd gives "
                "{analytic:.8g} but the function changes at rate {numeric:.8g}"
            ).format(direction=k + 1, analytic=analytic, numeric=numeric)), call=analytic_call, what=N_("gradients"))


def _same_shapes(got, expected: list[torch.Tensor], what: str) -> None:
    """Each of ``got`` is a plain tensor shaped like its ``expected`` counterpart."""
    what = translate_text(what)  # the message's label, in the student's language
    if len(got) != len(expected):
        raise AssertionError(_("expected {count} {what}s, got {got}").format(count=len(expected), what=what,
                                                                             got=len(got)))
    for g, e in zip(got, expected):
        if type(g) is not torch.Tensor or g.shape != e.shape:
            found = _("shape {shape}").format(shape=tuple(g.shape)) if isinstance(g, torch.Tensor) else type(g).__name__
            raise AssertionError(_("a {what} should have shape {expected}, got {found}").format(
                what=what, expected=tuple(e.shape), found=found))
