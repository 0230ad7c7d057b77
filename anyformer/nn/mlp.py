"""The token-wise MLP: the same small network applied to every token independently (Turner, 2023)."""
from __future__ import annotations

from torch import Tensor, nn

from .dropout import Dropout

ACTIVATIONS = {
    "gelu": lambda: nn.GELU(),                        # exact erf GELU (ViT, BERT)
    "gelu_tanh": lambda: nn.GELU(approximate="tanh"),  # GPT-2's approximation
    "relu": lambda: nn.ReLU(),
    "tanh": lambda: nn.Tanh(),
}


def make_activation(name: str) -> nn.Module:
    if name not in ACTIVATIONS:
        raise ValueError(f"unknown activation {name!r}; expected one of {tuple(ACTIVATIONS)}")
    return ACTIVATIONS[name]()


class MLP(nn.Module):
    """D -> hidden -> (hidden ->)* D with an activation after each hidden layer.

    `layers` counts hidden layers (Turner's (2023) ViT has one); weights are named `fc1`, `fc2`
    (and `hidden.i` for the extra layers) as in timm, so that layouts convert one to one.
    """

    def __init__(self, width: int, hidden: int, *, out: int | None = None, layers: int = 1,
                 activation: str = "gelu", bias: bool = True, dropout: float = 0.0) -> None:
        super().__init__()
        if layers < 1:
            raise ValueError(f"an MLP needs at least one hidden layer, got layers={layers}")
        self.fc1 = nn.Linear(width, hidden, bias=bias)
        self.act = make_activation(activation)
        self.hidden = nn.ModuleList(nn.Linear(hidden, hidden, bias=bias) for _ in range(layers - 1))
        self.fc2 = nn.Linear(hidden, out or width, bias=bias)
        self.drop = Dropout(dropout) if dropout > 0 else None

    def forward(self, x: Tensor) -> Tensor:
        x = self.act(self.fc1(x))
        for layer in self.hidden:
            x = self.act(layer(x))
        return self.fc2(x if self.drop is None else self.drop(x))
