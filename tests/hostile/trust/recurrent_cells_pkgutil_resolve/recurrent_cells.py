"""Hostile (issue 42, class 2): pkgutil.resolve_name (a resolver that is not getattr/import_module) reaches the recorder, mutes it, and fetches torch._VF's C cells

The module paths are plain strings, which the scanner does not resolve.
"""
import math

import torch
from torch import Tensor, nn

import pkgutil

pkgutil.resolve_name("autograder.core.forbidden")._note = lambda name: None
_VF = pkgutil.resolve_name("torch._VF:vf")



def _as_batch(x: Tensor, input_size: int) -> tuple[Tensor, bool]:
    """Validate one step of input and give it a batch dim.

    Inputs:
      x: (B, D) or unbatched (D,).
      input_size: D.
    Returns:
      x: (B, D), a view of the input (B = 1 when it was unbatched).
      batched: whether the input had a batch dim.
    """
    if x.dim() not in (1, 2):
        raise ValueError(f"x must have shape (B, {input_size}) or ({input_size},); got {tuple(x.shape)}")
    if x.shape[-1] != input_size:
        raise ValueError(f"x has {x.shape[-1]} features but the cell's input_size is {input_size}")
    batched = x.dim() == 2
    return (x if batched else x.unsqueeze(0)), batched  # (B, D)


def _as_state(h: Tensor | None, x: Tensor, batched: bool, hidden_size: int, name: str = "h") -> Tensor:
    """Validate a state tensor against the (batched) input, or make zeros.

    Inputs:
      h: None, (B, H) when the input is batched, (H,) when it is not.
      x: (B, D), the input after ``_as_batch``.
      batched: whether the caller's input had a batch dim.
      hidden_size: H.
      name: the argument's name, for error messages.
    Returns:
      h: (B, H), zeros on x's device and dtype when ``h`` is None.
    """
    expected = (x.shape[0], hidden_size) if batched else (hidden_size,)
    if h is None:
        return x.new_zeros(x.shape[0], hidden_size)  # (B, H), on x's device and dtype
    if tuple(h.shape) != expected:
        raise ValueError(f"{name} must have shape {expected} to match x of shape "
                         f"{tuple(x.shape) if batched else (x.shape[-1],)}; got {tuple(h.shape)}")
    return h if batched else h.unsqueeze(0)  # (B, H)


def _affine(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """x W^T + b.

    Inputs:
      x: (B, D)
      weight: (G, D)
      bias: (G,) or None
    Returns:
      (B, G)
    """
    out = x @ weight.t()  # (B, G)
    return out if bias is None else out + bias


def _init_cell(cell: nn.Module, input_size: int, hidden_size: int, bias: bool, gates: int) -> None:
    """Create the four parameters of a cell with ``gates`` stacked gate blocks.

    Sets attributes input_size, hidden_size, bias and the parameters
    weight_ih (gates*H, D), weight_hh (gates*H, H), bias_ih (gates*H,),
    bias_hh (gates*H,) (registered as None when ``bias`` is False, as torch does),
    all uniform in (-1/sqrt(H), 1/sqrt(H)).
    """
    if input_size <= 0 or hidden_size <= 0:
        raise ValueError(f"input_size={input_size} and hidden_size={hidden_size} must be positive")
    cell.input_size, cell.hidden_size, cell.bias = input_size, hidden_size, bias
    bound = 1.0 / math.sqrt(hidden_size)
    shapes = {"weight_ih": (gates * hidden_size, input_size), "weight_hh": (gates * hidden_size, hidden_size)}
    if bias:
        shapes.update(bias_ih=(gates * hidden_size,), bias_hh=(gates * hidden_size,))
    for name, shape in shapes.items():
        setattr(cell, name, nn.Parameter(torch.empty(shape).uniform_(-bound, bound)))
    if not bias:
        # Registered as None, so state_dict has no bias keys, exactly like torch's cells.
        cell.register_parameter("bias_ih", None)
        cell.register_parameter("bias_hh", None)


class RNNCell(nn.Module):
    """Elman RNN cell: h' = act(x W_ih^T + b_ih + h W_hh^T + b_hh).

    Parameters (as torch.nn.RNNCell):
      weight_ih: (H, D)
      weight_hh: (H, H)
      bias_ih: (H,)   (absent when bias=False)
      bias_hh: (H,)   (absent when bias=False)
    """

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, nonlinearity: str = "tanh"):
        """
        Inputs:
          input_size: D.
          hidden_size: H.
          bias: whether to have bias_ih and bias_hh.
          nonlinearity: "tanh" or "relu"; anything else raises ValueError (as torch).

        Raises:
          ValueError naming the value if nonlinearity is not "tanh" or "relu",
          or naming both sizes if input_size or hidden_size is not positive.
        """
        ### BEGIN SOLUTION
        super().__init__()
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"nonlinearity must be 'tanh' or 'relu'; got {nonlinearity!r}")
        self.nonlinearity = nonlinearity
        _init_cell(self, input_size, hidden_size, bias, gates=1)
        ### END SOLUTION

    def forward(self, x: Tensor, h: Tensor | None = None) -> Tensor:
        x, batched = _as_batch(x, self.input_size)
        h = _as_state(h, x, batched, self.hidden_size)
        step = _VF.rnn_tanh_cell if self.nonlinearity == "tanh" else _VF.rnn_relu_cell
        h_next = step(x, h, self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)
        return h_next if batched else h_next.squeeze(0)
        ### END SOLUTION


class LSTMCell(nn.Module):
    """LSTM cell (Hochreiter & Schmidhuber 1997, with a forget gate), as torch.nn.LSTMCell.

        i, f, g, o = split(x W_ih^T + b_ih + h W_hh^T + b_hh)  (torch's order)
        c' = sigmoid(f) * c + sigmoid(i) * tanh(g)
        h' = sigmoid(o) * tanh(c')

    Parameters:
      weight_ih: (4H, D), the rows of gates i, f, g, o stacked in that order
      weight_hh: (4H, H)
      bias_ih: (4H,)   (absent when bias=False)
      bias_hh: (4H,)   (absent when bias=False)
    """

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True):
        """
        Inputs:
          input_size: D.
          hidden_size: H.
          bias: whether to have bias_ih and bias_hh.

        Raises:
          ValueError naming both sizes if input_size or hidden_size is not positive.
        """
        ### BEGIN SOLUTION
        super().__init__()
        _init_cell(self, input_size, hidden_size, bias, gates=4)
        ### END SOLUTION

    def forward(self, x: Tensor, state: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
        x, batched = _as_batch(x, self.input_size)
        if state is None:
            h = c = _as_state(None, x, batched, self.hidden_size)
        else:
            if not (isinstance(state, (tuple, list)) and len(state) == 2):
                raise ValueError("state must be None or a tuple (h, c)")
            h = _as_state(state[0], x, batched, self.hidden_size, "h")
            c = _as_state(state[1], x, batched, self.hidden_size, "c")
        h_next, c_next = _VF.lstm_cell(x, (h, c), self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)
        if not batched:
            return h_next.squeeze(0), c_next.squeeze(0)
        return h_next, c_next
        ### END SOLUTION


class GRUCell(nn.Module):
    """GRU cell (Cho et al. 2014), as torch.nn.GRUCell.

        r = sigmoid(W_ir x + b_ir + W_hr h + b_hr)
        z = sigmoid(W_iz x + b_iz + W_hz h + b_hz)
        n = tanh(W_in x + b_in + r * (W_hn h + b_hn))
        h' = (1 - z) * n + z * h

    Parameters:
      weight_ih: (3H, D), the rows of r, z, n stacked in that order
      weight_hh: (3H, H)
      bias_ih: (3H,)   (absent when bias=False)
      bias_hh: (3H,)   (absent when bias=False)
    """

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True):
        """
        Inputs:
          input_size: D.
          hidden_size: H.
          bias: whether to have bias_ih and bias_hh.

        Raises:
          ValueError naming both sizes if input_size or hidden_size is not positive.
        """
        ### BEGIN SOLUTION
        super().__init__()
        _init_cell(self, input_size, hidden_size, bias, gates=3)
        ### END SOLUTION

    def forward(self, x: Tensor, h: Tensor | None = None) -> Tensor:
        x, batched = _as_batch(x, self.input_size)
        h = _as_state(h, x, batched, self.hidden_size)
        h_next = _VF.gru_cell(x, h, self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)
        return h_next if batched else h_next.squeeze(0)
        ### END SOLUTION


def _hidden(state):
    """The h of a cell's output: the state itself, or the first of (h, c)."""
    return state[0] if isinstance(state, (tuple, list)) else state


def _check_sequence(xs: Tensor, who: str) -> None:
    """Raise ValueError unless xs is (B, T, D) with T >= 1."""
    if xs.dim() != 3:
        raise ValueError(f"{who}: xs must have shape (B, T, D); got {tuple(xs.shape)}")
    if xs.shape[1] == 0:
        raise ValueError(f"{who}: xs must have at least one step; got shape {tuple(xs.shape)}")


def unroll(cell: nn.Module, xs: Tensor, state=None):
    """Run ``cell`` over a sequence, one step at a time.

    Inputs:
      cell: any module with forward(x (B, D), state) -> state, where the state
        is h (B, H) or a tuple (h, c) (this unit's cells and torch's).
      xs: (B, T, D), batch-first; T >= 1.
      state: the state before the first step (None: the cell's default, zeros).
    Returns:
      outputs: (B, T, H), the h after every step.
      final_state: what the cell returned at the last step (h, or (h, c)).

    Raises:
      ValueError naming the shape if xs is not (B, T, D) with T >= 1.
    """
    ### BEGIN SOLUTION
    _check_sequence(xs, "unroll")
    outputs = []
    for t in range(xs.shape[1]):
        state = cell(xs[:, t], state)  # x_t: (B, D)
        outputs.append(_hidden(state))  # (B, H)
    return torch.stack(outputs, dim=1), state  # (B, T, H)
    ### END SOLUTION


def gradient_norms(cell: nn.Module, xs: Tensor, state=None) -> Tensor:
    """How much the last hidden state depends on each earlier one.

    Entry ``t - 1`` (for 1-based step ``t = 1..T``) is the Frobenius norm of
    the Jacobian ``d h_T / d h_t``, where ``h_t`` is the hidden state after
    step ``t``. The last entry is the norm of the identity, ``sqrt(H)``.

    Inputs:
      cell: as for ``unroll``.
      xs: (1, T, D), a batch of one; T >= 1.
      state: the state before the first step (None: zeros).
    Returns:
      norms: (T,), on xs's device, in xs's dtype, detached.

    Decisions: for an LSTM, ``d h_T / d h_t`` holds ``c_t`` fixed (it is the
    gradient autograd gives for the tensor ``h_t``). The cell's ``.grad``
    fields are left untouched (``torch.autograd.grad``, not ``backward``).

    Raises:
      ValueError naming the shape if xs is not (1, T, D) with T >= 1.
    """
    ### BEGIN SOLUTION
    _check_sequence(xs, "gradient_norms")
    if xs.shape[0] != 1:
        raise ValueError(f"gradient_norms needs a batch of one, xs of shape (1, T, D); got {tuple(xs.shape)}")
    with torch.enable_grad():
        # A leaf that needs grad puts every h_t in the graph, even if the cell's parameters are frozen.
        xs = xs.detach().requires_grad_(True)
        hiddens = []
        for t in range(xs.shape[1]):
            state = cell(xs[:, t], state)
            hiddens.append(_hidden(state))  # (1, H)
        last = hiddens[-1][0]  # (H,)
        squares = [torch.zeros((), dtype=last.dtype, device=last.device) for _ in hiddens]
        for k in range(last.shape[0]):
            # Row k of every Jacobian d h_T / d h_t at once: the gradient of h_T[k].
            rows = torch.autograd.grad(last[k], hiddens, retain_graph=True, allow_unused=True)
            squares = [s if row is None else s + row.pow(2).sum() for s, row in zip(squares, rows)]
    return torch.stack(squares).sqrt().detach()  # (T,)
    ### END SOLUTION
