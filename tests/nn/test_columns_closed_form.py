"""The table's input heads and the table model against their formulas: a number's token x w_j + b_j
(or the periodic one), a missing number's own token, a category's row of its column's table, and a row
whose columns are a set: the same output in any column order once the tokens follow their columns."""
import math

import pytest
import torch

from anyformer.models import TableConfig, TableTransformer
from anyformer.nn import CategoryEmbedding, NumberEmbedding, RegressionHead


def test_a_number_s_token_is_its_column_s_line_and_a_missing_one_its_own_token():
    emb = NumberEmbedding(3, 4)
    x = torch.tensor([[0.5, -2.0, float("nan")]])
    out = emb(x)
    for j in range(2):
        torch.testing.assert_close(out[0, j], x[0, j] * emb.weight[j] + emb.bias[j])
    torch.testing.assert_close(out[0, 2], emb.missing[2])
    out.sum().backward()
    assert emb.missing.grad[2].abs().sum() > 0 and emb.missing.grad[:2].abs().sum() == 0
    assert torch.isfinite(emb.weight.grad).all()  # a NaN cell sends no NaN back


def test_the_periodic_token_follows_its_formula():
    emb = NumberEmbedding(2, 3, kind="periodic", frequencies=4)
    x = torch.tensor([[0.3, 1.7]])
    out = emb(x)
    for j in range(2):
        angle = 2 * math.pi * x[0, j] * emb.frequencies[j]
        waves = torch.cat([torch.sin(angle), torch.cos(angle)])
        torch.testing.assert_close(out[0, j], torch.relu(waves @ emb.weight[j] + emb.bias[j]))


def test_each_category_column_reads_its_own_table_rows():
    emb = CategoryEmbedding([3, 5], 4)
    idx = torch.tensor([[2, 0], [0, 4]])
    out = emb(idx)
    torch.testing.assert_close(out[0, 0], emb.weight[2] + emb.bias[0])
    torch.testing.assert_close(out[0, 1], emb.weight[3 + 0] + emb.bias[1])
    torch.testing.assert_close(out[1, 1], emb.weight[3 + 4] + emb.bias[1])
    with pytest.raises(ValueError, match=r"category indices must lie in \[0, cardinality\) per column \[3, 5\]"):
        emb(torch.tensor([[3, 0]]))
    with pytest.raises(ValueError, match=r"expected category indices of shape \(B, 2\)"):
        emb(torch.tensor([[1]]))


def test_the_regression_head_gives_one_number_a_row():
    head = RegressionHead(8)
    tokens = torch.randn(5, 3, 8)
    torch.testing.assert_close(head(tokens), tokens[:, 0] @ head.fc.weight[0] + head.fc.bias[0])


def test_a_row_s_columns_are_a_set():
    """Swapping two number columns' values together with their weights leaves the output unchanged:
    no position says where a column stood."""
    torch.manual_seed(0)
    model = TableTransformer(TableConfig(numbers=3, categories=[4], outputs=3)).eval()
    swapped = TableTransformer(TableConfig(numbers=3, categories=[4], outputs=3)).eval()
    swapped.load_state_dict(model.state_dict())
    perm = torch.tensor([2, 0, 1])
    with torch.no_grad():
        for name in ("weight", "bias", "missing"):
            getattr(swapped.number_embed, name).copy_(getattr(model.number_embed, name)[perm])
    x, c = torch.randn(6, 3), torch.randint(0, 4, (6, 1))
    x[1, 0] = float("nan")
    with torch.no_grad():
        torch.testing.assert_close(swapped(x[:, perm], c), model(x, c), atol=1e-5, rtol=1e-5)
        assert not torch.allclose(model(x[:, perm], c), model(x, c))  # the columns' own weights still tell them apart


def test_the_model_takes_numbers_alone_or_categories_alone_and_names_a_wrong_input():
    assert TableTransformer(TableConfig(numbers=2, categories=[], task="regress", outputs=1))(torch.randn(4, 2)).shape == (4,)
    assert TableTransformer(TableConfig(numbers=0, categories=[3, 3], outputs=2))(None, torch.zeros(4, 2, dtype=torch.long)).shape == (4, 2)
    with pytest.raises(TypeError, match=r"reads 2 number columns: expected a float tensor \(B, 2\)"):
        TableTransformer(TableConfig(numbers=2, categories=[3]))(None, torch.zeros(1, 1, dtype=torch.long))
    with pytest.raises(ValueError, match="a table model needs at least one number or category column"):
        TableConfig(numbers=0, categories=[])
    with pytest.raises(ValueError, match="unknown number_embedding 'splines'"):
        TableConfig(number_embedding="splines")
