"""Per-series normalisation: each channel of each series standardised by its own statistics over the
steps it has, saved with the run and read back the same."""
import torch

from anyformer.data.series.dataset import SeriesDataset, SeriesPreprocess, standardise_each


def test_each_series_and_channel_gets_mean_zero_and_unit_sd_over_its_own_steps():
    values = torch.randn(3, 2, 40) * torch.tensor([1.0, 50.0])[None, :, None] + 7
    lengths = torch.tensor([40, 25, 3])
    values = values * (torch.arange(40)[None] < lengths[:, None])[:, None]
    out = standardise_each(values, lengths)
    for b, n in enumerate(lengths.tolist()):
        own = out[b, :, :n]
        torch.testing.assert_close(own.mean(-1), torch.zeros(2), atol=1e-5, rtol=0)
        torch.testing.assert_close(own.std(-1, unbiased=False), torch.ones(2), atol=1e-4, rtol=0)
        assert (out[b, :, n:] == 0).all()  # padding stays zero


def test_a_constant_series_becomes_zeros_not_nans():
    out = standardise_each(torch.full((1, 1, 10), 4.0), torch.tensor([10]))
    assert torch.equal(out, torch.zeros(1, 1, 10))


def test_the_choice_is_saved_with_the_run_and_read_back():
    values = torch.tensor([[[1.0, 3.0, 0.0]], [[5.0, 7.0, 9.0]]])
    ds = SeriesDataset(values, torch.tensor([2, 3]), torch.tensor([0, 1]), ["a", "b"], "t")
    each = SeriesPreprocess.from_dataset(ds, per_series=True)
    assert each.to_dict()["per_series"] is True
    again = SeriesPreprocess.from_info({"preprocess": each.to_dict()})
    assert again.per_series and torch.equal(again(values, ds.lengths), each(values, ds.lengths))
    # Offset and scale of a whole series no longer change what the model sees.
    torch.testing.assert_close(each(values * 3 + 10, ds.lengths), each(values, ds.lengths))
    # A run saved before the option existed was standardised per channel only.
    old = {k: v for k, v in SeriesPreprocess.from_dataset(ds).to_dict().items() if k != "per_series"}
    assert SeriesPreprocess.from_info({"preprocess": old}).per_series is False
