"""The hypernetwork of init method `hypernet`: a new token's row from its pieces under the source tokenizer.

A target token's text is split by the source tokenizer (as FVT splits it, `init/methods/fvt.py`); the first
`max_pieces` pieces' source rows are projected to `width`, given a learned position each, read by a small
transformer encoder (pre-norm, no dropout) and mean-pooled over the real pieces; a linear head maps the pool to
a residual over the token's FVT row (the mean of all its pieces' source rows, or the copied source row of an
overlapping token). The head starts at zero, so the untrained network is FVT row for row; training (stage
`hypernet`, `train/hypernet.py`) moves it only where the frozen source model's loss asks for it.

Saved as `hypernet.safetensors` (the network's weights only; the source rows are the source model's) and
`config.json` (`HyperNetConfig`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn as nn
import numpy as np

from vocabtransfer import io
from vocabtransfer.errors import VocabTransferError

WEIGHTS, CONFIG = "hypernet.safetensors", "config.json"


@dataclass(frozen=True)
class HyperNetConfig:
    dim: int  # the source's embedding size: the rows read and predicted
    width: int  # the encoder's width
    layers: int
    heads: int
    max_pieces: int  # source pieces read per token (FVT's base row uses them all)

    def __post_init__(self):
        if self.width % self.heads:
            raise VocabTransferError(
                f"hypernet: width {self.width} is not a multiple of heads {self.heads}; choose heads that divide it"
            )


def default_heads(width: int) -> int:
    """The most attention heads of at most 8 whose size divides `width` (a transformer's usual split)."""
    return next(h for h in (8, 6, 4, 3, 2, 1) if width % h == 0)


class HyperNet(nn.Module):
    """pieces (N, K) source ids, -1 after a row's last (every row at least one piece, pieces first), their FVT rows
    (N, dim) and the source rows (V_s, dim) -> the N predicted rows: FVT's plus the network's residual. Rows of
    the same number of pieces are encoded together, unpadded."""

    def __init__(self, config: HyperNetConfig):
        super().__init__()
        self.config = config
        self.project = nn.Linear(config.dim, config.width)
        self.position = nn.Embedding(config.max_pieces, config.width)
        layer = nn.TransformerEncoderLayer(
            config.width, config.heads, 2 * config.width, dropout=0.0, batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, config.layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(config.width)
        self.head = nn.Linear(config.width, config.dim)
        nn.init.zeros_(self.head.weight)  # step 0 is FVT exactly
        nn.init.zeros_(self.head.bias)

    def forward(self, pieces: torch.Tensor, base: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
        counts = (pieces >= 0).sum(1)
        pooled = torch.zeros(
            (pieces.shape[0], self.config.width), dtype=self.project.weight.dtype, device=pieces.device
        )
        for k in counts.unique().tolist():  # rows of k pieces together, without padding (most tokens have 1-3)
            rows = (counts == k).nonzero().squeeze(1)
            x = self.project(source[pieces[rows, :k]].to(self.project.weight.dtype)) + self.position.weight[:k]
            h = self.norm(self.encoder(x))
            pooled = pooled.index_copy(0, rows, h.mean(1).to(pooled.dtype))
        return base + self.head(pooled).to(base.dtype)

    def save(self, directory: Path) -> None:
        io.save_tensors(self.state_dict(), directory / WEIGHTS)
        io.write_json(asdict(self.config), directory / CONFIG)


def load(directory: Path) -> HyperNet:
    """The trained network of `directory` (stage hypernet's output): one error naming the file when it is
    missing or torn."""
    try:
        config = HyperNetConfig(**io.read_json(directory / CONFIG))
        state = io.load_tensors(directory / WEIGHTS)
    except (VocabTransferError, TypeError) as exc:
        raise VocabTransferError(
            f"{directory}: not a trained hypernetwork ({exc}); rerun stage hypernet (snakemake -R hypernet)"
        ) from exc
    net = HyperNet(config)
    missing, unexpected = net.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise VocabTransferError(
            f"{directory / WEIGHTS}: weights do not fit config.json (missing {missing[:3]}, "
            f"unexpected {unexpected[:3]}); rerun stage hypernet"
        )
    return net.eval()


def piece_matrix(pieces, rows, n_rows: int, max_pieces: int) -> torch.Tensor:
    """(n_rows, max_pieces) int64 of the first `max_pieces` pieces of each row (pieces grouped by row, in text
    order, as `fvt.split_with_source` returns them), -1 after a row's last."""

    pieces, rows = np.asarray(pieces, dtype=np.int64), np.asarray(rows, dtype=np.int64)
    out = np.full((n_rows, max_pieces), -1, dtype=np.int64)
    if pieces.size:
        starts = np.searchsorted(rows, np.arange(n_rows))
        position = np.arange(rows.size) - starts[rows]
        keep = position < max_pieces
        out[rows[keep], position[keep]] = pieces[keep]
    return torch.from_numpy(out)
