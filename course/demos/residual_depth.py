"""Claim 7: residuals let depth train.

The gradient that reaches the input of a stack of blocks is a product of one
Jacobian per block. Without residual paths that product shrinks (or blows up)
with depth, so the first blocks of a deep stack barely learn. With
``x + f(x)`` every block's Jacobian is ``I + df/dx``: there is always a path
that skips all the blocks, and the gradient stays of the same size at any depth.
"""
from __future__ import annotations

import torch
from torch import nn

from ._common import Units, check_size, demo, pyplot, save, sci, seeded, sig, tr

NAME = "residual_depth"
TITLE = "Residuals let depth train"
UNIT = "transformer_block"
PRESETS = {"small": dict(depths=[1, 2, 4, 8, 16], dim=16, length=8),
           "full": dict(depths=[1, 2, 4, 8, 12, 16, 24, 32], dim=32, length=16)}


def pre_norm(block: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The block itself (built with norm_first=True): x + attn(norm1(x)), then + ffn(norm2(.))."""
    return block(x)


def residual_only(block: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The block's two sublayers with their residual additions, no LayerNorm."""
    x = x + block.self_attn(x, need_weights=False)[0]
    return x + block.ffn(x)


def no_residual(block: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The same two sublayers stacked plainly: ffn(attn(x)), no residual, no LayerNorm."""
    return block.ffn(block.self_attn(x, need_weights=False)[0])


def input_gradient(blocks, x: torch.Tensor, target: torch.Tensor, step) -> float:
    """|| d loss / d x || for the stack, with loss = <output, target>."""
    x = x.detach().requires_grad_(True)
    with torch.enable_grad():
        h = x
        for block in blocks:
            h = step(block, h)
        (grad,) = torch.autograd.grad((h * target).sum(), x)
    return float(grad.norm())


@demo
def run(out_dir, *, size: str = "full", units: Units | None = None) -> dict:
    """Gradient norm at the input of stacks of 1..N random blocks, with and without residual paths.

    Returns:
      {"depths", "pre_norm", "post_norm", "residual_only", "no_residual"}: one
      gradient norm per depth. The same random weights for every curve (the
      post-norm blocks are copies of the pre-norm ones), and a depth-d stack
      is the first d blocks. float64, so a vanished gradient is not rounded to 0.
    """
    check_size(size)
    depths, dim, length = (PRESETS[size][k] for k in ("depths", "dim", "length"))
    block_module = units.need("transformer_block")
    generator = seeded()
    blocks = [block_module.TransformerBlock(dim, 2, 4 * dim, norm_first=True).double() for _ in range(max(depths))]
    post = [block_module.TransformerBlock(dim, 2, 4 * dim, norm_first=False).double() for _ in range(max(depths))]
    for pre_block, post_block in zip(blocks, post):
        post_block.load_state_dict(pre_block.state_dict())
    x = torch.randn(1, length, dim, generator=generator, dtype=torch.float64)
    target = torch.randn(1, length, dim, generator=generator, dtype=torch.float64)
    variants = {"pre_norm": (blocks, pre_norm), "post_norm": (post, pre_norm),
                "residual_only": (blocks, residual_only), "no_residual": (blocks, no_residual)}
    curves = {name: [input_gradient(stack[:depth], x, target, step) for depth in depths]
              for name, (stack, step) in variants.items()}

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    labels = {"pre_norm": tr("pre-norm blocks: x + f(norm(x))"), "post_norm": tr("post-norm blocks: norm(x + f(x))"),
              "residual_only": tr("residual, no norm: x + f(x)"), "no_residual": tr("no residual: f(x)")}
    for (name, values), marker in zip(curves.items(), "o^Ds"):
        ax.semilogy(depths, values, marker + "-", label=labels[name])
    ax.set_xlabel(tr("number of blocks"))
    ax.set_ylabel(tr("|| d loss / d input ||  (log scale)"))
    ax.set_title(tr("The gradient that reaches the first block (d_model = {dim})").format(dim=dim))
    ax.legend()
    path = save(fig, out_dir, NAME)
    return {"depths": depths, **curves, "png": str(path)}


def quotes(result: dict) -> dict[str, str]:
    """The numbers the lessons quote from this demo (course/lessons/measured.json)."""
    out = {f"plain_{depth}": sci(value, 1) for depth, value in zip(result["depths"], result["no_residual"])}
    residual = [v for k in ("pre_norm", "post_norm", "residual_only") for v in result[k]]
    out.update(residual_min=sig(min(residual), 2), residual_max=sig(max(residual), 2),
               deepest=str(result["depths"][-1]))
    return out
