"""One series from a CSV or .npy file (predict's input), series augmentation, and the saved
per-channel standardisation."""
import numpy as np
import pytest
import torch

from anyformer.data import DataError
from anyformer.data.series.augment import augment_series, resample
from anyformer.data.series.dataset import SeriesDataset, SeriesPreprocess
from anyformer.data.series.one_series import read_series_input


def test_csv_columns_are_channels_and_a_header_is_skipped(tmp_path):
    p = tmp_path / "s.csv"
    p.write_text("x,y\n1,10\n2,20\n3,30\n")
    assert read_series_input(p, 2).tolist() == [[1, 2, 3], [10, 20, 30]]
    p.write_text("1,2,3,4\n")  # a univariate series written as one row
    assert read_series_input(p, 1).tolist() == [[1, 2, 3, 4]]


def test_npy_in_either_orientation(tmp_path):
    a = np.arange(12, dtype=np.float64).reshape(3, 4)
    np.save(tmp_path / "ct.npy", a)
    np.save(tmp_path / "tc.npy", a.T)
    assert np.array_equal(read_series_input(tmp_path / "ct.npy", 3), a)
    assert np.array_equal(read_series_input(tmp_path / "tc.npy", 3), a)


def test_bad_inputs_are_one_line(tmp_path):
    np.save(tmp_path / "five.npy", np.zeros((5, 40)))
    with pytest.raises(DataError, match=r"five\.npy: a series of shape 5x40 has no axis of 3 channels; this model "
                                         r"takes 3 channel\(s\)"):
        read_series_input(tmp_path / "five.npy", 3)
    (tmp_path / "nan.csv").write_text("1,2\n3,nan\n")
    with pytest.raises(DataError, match=r"nan\.csv: NaN at channel 1, step 1; expected finite numbers"):
        read_series_input(tmp_path / "nan.csv", 2)
    (tmp_path / "word.csv").write_text("1,2\n3,abc\n")
    with pytest.raises(DataError, match=r"word\.csv:2: 'abc' is not a number"):
        read_series_input(tmp_path / "word.csv", 2)
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(DataError, match=r"obj\.npy: not a plain numeric \.npy array"):  # no pickle is loaded
        read_series_input(tmp_path / "obj.npy", 1)
    with pytest.raises(DataError, match=r"unknown series file type '\.png'; expected \.csv or \.npy"):
        (tmp_path / "x.png").write_bytes(b"\x89PNG")
        read_series_input(tmp_path / "x.png", 1)


def test_augment_keeps_shape_and_padding_and_is_seeded():
    x = torch.randn(4, 2, 30)
    lengths = torch.tensor([30, 20, 10, 1])
    x = x * (torch.arange(30)[None] < lengths[:, None])[:, None]
    a = augment_series(x, lengths, torch.Generator().manual_seed(1))
    b = augment_series(x, lengths, torch.Generator().manual_seed(1))
    assert a.shape == x.shape and torch.equal(a, b)
    assert (a[1, :, 20:] == 0).all() and (a[2, :, 10:] == 0).all()
    assert not torch.allclose(a[0], x[0])
    # Without warp, crop, scale and jitter it is the identity.
    same = augment_series(x, lengths, torch.Generator().manual_seed(1), jitter=0, scale=0, warp=0, crop=0)
    torch.testing.assert_close(same, x)


def test_resample_interpolates_linearly():
    x = torch.tensor([[[0.0, 10.0, 20.0]]])
    assert resample(x, torch.tensor([[0.0, 0.5, 1.5, 2.0]])).tolist() == [[[0.0, 5.0, 15.0, 20.0]]]


def test_standardisation_uses_the_steps_series_have_and_round_trips():
    values = torch.tensor([[[1.0, 3.0, 0.0]], [[5.0, 7.0, 9.0]]])
    ds = SeriesDataset(values, torch.tensor([2, 3]), torch.tensor([0, 1]), ["a", "b"], "t")
    pre = SeriesPreprocess.from_dataset(ds)
    assert pre.mean == pytest.approx([5.0])  # (1 + 3 + 5 + 7 + 9) / 5: the padded zero is not a value
    out = pre(values, ds.lengths)
    assert out[0, 0, 2] == 0
    again = SeriesPreprocess.from_info({"preprocess": pre.to_dict()})
    assert torch.equal(again(values, ds.lengths), out)
