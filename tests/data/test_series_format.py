"""The archive readers on aeon's real files, and small malformed files refused in one line naming
the line and what was expected."""
import numpy as np
import pytest

from anyformer.data import DataError
from anyformer.data.series.archive import read_ts, read_tsv
from anyformer.data.series.dataset import aeon_data_dir, find_series_files, load_series_splits
from anyformer.data.series.read import read_series_file


@pytest.fixture(scope="module")
def aeon_dir():
    d = aeon_data_dir()
    assert d is not None, "aeon is not installed: pip install -e '.[series]' (its wheel ships the archive files)"
    return d


def test_univariate_equal_length(aeon_dir):
    train, test = load_series_splits("GunPoint")
    assert tuple(train.values.shape) == (50, 1, 150) and tuple(test.values.shape) == (150, 1, 150)
    assert train.classes == ["1", "2"] and set(train.labels.tolist()) == {0, 1}
    assert (train.lengths == 150).all()
    # The first value of the first case, as written in the file.
    first = next(l for l in (aeon_dir / "GunPoint" / "GunPoint_TRAIN.ts").read_text().splitlines()
                 if l and l[0] not in "#@")
    assert train.values[0, 0, 0].item() == pytest.approx(float(first.split(",")[0]))


def test_multivariate_class_names_as_declared(aeon_dir):
    train, test = load_series_splits("BasicMotions")
    assert tuple(train.values.shape) == (40, 6, 100) and len(test) == 40
    assert train.classes == ["Standing", "Running", "Walking", "Badminton"]  # the header's order


def test_unequal_lengths_are_padded_with_zeros_and_lengths_kept(aeon_dir):
    train, test = load_series_splits("JapaneseVowels")
    assert train.channels == 12 and len(train) == 270 and len(test) == 370
    assert (int(train.lengths.min()), int(train.lengths.max())) == (7, 26)
    assert int(test.lengths.max()) == 29
    short = int(train.lengths.argmin())
    assert (train.values[short, :, 7:] == 0).all() and (train.values[short, :, :7] != 0).any()
    eq, _ = load_series_splits("JapaneseVowels_eq")  # the archive's equal-length copy, beside the original
    assert tuple(eq.values.shape) == (270, 12, 25)


def test_tsv_reads_the_same_series_as_ts(aeon_dir):
    ts = read_ts(aeon_dir / "GunPoint" / "GunPoint_TRAIN.ts")
    tsv = read_tsv(aeon_dir / "GunPoint" / "GunPoint_TRAIN.tsv")
    assert ts.labels == tsv.labels
    assert all(np.allclose(a, b, atol=1e-6) for a, b in zip(ts.series, tsv.series))


def test_a_folder_or_a_file_path_finds_the_pair(aeon_dir, tmp_path):
    files = find_series_files(str(aeon_dir / "ArrowHead"))
    assert files["train"].name == "ArrowHead_TRAIN.ts" and files["test"].name == "ArrowHead_TEST.ts"
    assert find_series_files(str(aeon_dir / "GunPoint" / "GunPoint_TEST.ts")) == find_series_files("GunPoint")


def test_unknown_name_is_one_line():
    with pytest.raises(DataError, match=r"series dataset 'NoSuchSet' not found: looked in .*expected a name"):
        find_series_files("NoSuchSet")


HEADER = "@problemName T\n@univariate true\n@classLabel true a b\n@data\n"


@pytest.mark.parametrize("body, message", [
    ("1,2,3:a\n1,x,3:b\n", r"bad\.ts:6: 'x' in channel 0 is not a number; expected comma-separated"),
    ("1,2,3:a\n1,?,3:b\n", r"bad\.ts:6: missing value in channel 0"),
    ("1,2,3:a\n1,NaN,3:b\n", r"bad\.ts:6: missing value \(NaN\)"),
    ("1,2,3:a\n1,2,3:c\n", r"bad\.ts:6: class label 'c' is not declared; expected one of \['a', 'b'\]"),
    ("1,2,3:a\n1,2,3:4,5,6:b\n", r"bad\.ts:6: 2 channels, expected 1 as on the first case"),
    ("1,2,3:a\n1,2,3\n", r"bad\.ts:6: expected channels separated by ':' and a class label last"),
    ("", r"bad\.ts: no cases after @data"),
])
def test_malformed_ts_is_one_line_naming_the_line(tmp_path, body, message):
    path = tmp_path / "bad.ts"
    path.write_text(HEADER + body)
    with pytest.raises(DataError, match=message) as e:
        read_series_file(path)
    assert "\n" not in str(e.value)


def test_header_problems(tmp_path):
    cases = {
        "nodata.ts": ("@problemName T\n@classLabel true a\n1,2:a\n", r"nodata\.ts:3: expected a header line"),
        "nolabels.ts": ("@classLabel false\n@data\n1,2:a\n", r"@classLabel is 'false'; expected '@classLabel true"),
        "stamps.ts": ("@timeStamps true\n@classLabel true 1\n@data\n(2007-01-01,1.0):1\n", r"@timeStamps true"),
        "ragged.ts": ("@classLabel true a\n@dimensions 2\n@data\n1,2:1,2,3:a\n",
                      r"ragged\.ts:4: channel 1 has 3 values, expected 2"),
    }
    for name, (text, message) in cases.items():
        (tmp_path / name).write_text(text)
        with pytest.raises(DataError, match=message):
            read_series_file(tmp_path / name)


def test_tsv_trailing_nans_are_padding_but_inner_nans_are_refused(tmp_path):
    path = tmp_path / "X_TRAIN.tsv"
    path.write_text("1\t0.5\t0.25\tNaN\tNaN\n2\t1\t2\t3\t4\n")
    raw = read_tsv(path)
    assert [s.shape for s in raw.series] == [(1, 2), (1, 4)] and raw.labels == ["1", "2"]
    path.write_text("1\t0.5\tNaN\t0.25\n")
    with pytest.raises(DataError, match=r"X_TRAIN\.tsv:1: missing value \(NaN\)"):
        read_tsv(path)


def test_test_labels_must_occur_in_training(tmp_path):
    (tmp_path / "P_TRAIN.ts").write_text("@classLabel true a b\n@data\n1,2:a\n3,4:b\n")
    (tmp_path / "P_TEST.ts").write_text("@classLabel true a b z\n@data\n1,2:z\n")
    with pytest.raises(DataError, match=r"P_TEST\.ts: class label\(s\) \['z'\] do not occur in the training split"):
        load_series_splits(str(tmp_path))
