"""Labelled series in the files users have: a wide CSV (ragged ends), a long CSV (with a channel, rows
shuffled), a _TRAIN/_TEST pair, single files, .tsv, .npy and .npz; a real archive dataset written as
a CSV reads as its .ts does; every refusal is one line that names what was expected and what came."""
import numpy as np
import pytest
import torch

from anyformer.data import DataError
from anyformer.data.series.dataset import aeon_data_dir, find_series_files, load_series_data, looks_like_series
from anyformer.data.series.read import read_series_file


def write(path, text):
    path.write_text(text)
    return path


def names(ds):
    return [ds.classes[k] for k in ds.labels.tolist()]


# ------------------------------------------------------------------------------------ wide
def test_wide_csv_with_ragged_ends_an_id_column_and_a_label_found_by_name(tmp_path):
    p = write(tmp_path / "my.csv", "ID,t0,t1,t2,t3,Class\n"
                                   "a,1,2,3,4,cat\n"
                                   "b,5,6,,,dog\n"          # ends early with empty cells
                                   "c,7,NaN,nan,,cat\n"     # or with NaN
                                   "d,0.5,-1e-3,2,3.25,dog\n")
    train, test = load_series_data(str(p))
    assert test is None  # a single file has no test split
    assert tuple(train.values.shape) == (4, 1, 4) and train.lengths.tolist() == [4, 2, 1, 4]
    assert train.values[1, 0].tolist() == [5, 6, 0, 0]  # padded with zeros past its end, as the archive's are
    assert train.values[3, 0].tolist() == pytest.approx([0.5, -1e-3, 2, 3.25])
    assert train.classes == ["cat", "dog"] and names(train) == ["cat", "dog", "cat", "dog"]
    assert train.name == "my"


def test_the_unnamed_index_column_pandas_writes_is_not_a_step(tmp_path):
    p = write(tmp_path / "pd.csv", ",label,a,b\n0,x,1.5,2\n1,y,3,\n")
    ds, _ = load_series_data(str(p))
    assert ds.values[:, 0].tolist() == [[1.5, 2], [3, 0]] and ds.lengths.tolist() == [2, 1]


def test_wide_label_column_named_by_the_user_in_any_case(tmp_path):
    p = write(tmp_path / "s.csv", "species,x1,x2,label2\nA,1,2,3\nB,4,5,6\n")
    ds, _ = load_series_data(str(p), label_column="SPECIES")
    assert names(ds) == ["A", "B"] and ds.values[:, 0].tolist() == [[1, 2, 3], [4, 5, 6]]


def test_a_separator_other_than_a_comma_and_a_byte_order_mark(tmp_path):
    p = tmp_path / "semi.csv"
    p.write_bytes("\ufefflabel;a;b\n1;0.5;0.25\n2;1;2\n".encode("utf-8"))
    ds, _ = load_series_data(str(p))
    assert ds.classes == ["1", "2"] and ds.values[0, 0].tolist() == [0.5, 0.25]


# ------------------------------------------------------------------------------------ long
def test_long_csv_with_a_channel_rows_in_any_order(tmp_path):
    rows = []
    for sid, label, n in (("s2", "walk", 3), ("s1", "run", 2), ("s10", "walk", 4)):
        for t in range(n):
            for ch in ("ay", "ax"):
                rows.append(f"{sid},{t * 0.5},{ch},{(1 if ch == 'ax' else -1) * (t + 1) * 10 + int(sid[1:])},{label}")
    order = np.random.default_rng(0).permutation(len(rows))
    p = write(tmp_path / "long.csv", "series_id,Time,Variable,Value,Target\n" + "\n".join(rows[i] for i in order))
    ds, test = load_series_data(str(p))
    assert test is None and tuple(ds.values.shape) == (3, 2, 4)
    assert ds.lengths.tolist() == [2, 4, 3]  # ids sorted as text (s1, s10, s2) whatever the rows' order
    assert names(ds) == ["run", "walk", "walk"]
    assert ds.values[2].tolist() == [[12, 22, 32, 0], [-8, -18, -28, 0]]  # channels by name: ax, then ay


def test_long_csv_univariate_with_dates(tmp_path):
    p = write(tmp_path / "d.csv", "id,timestamp,v,label\n"
                                  "a,2024-01-03,3,x\na,2024-01-01,1,x\na,2024-01-02,2,x\n"
                                  "b,2024-01-02T00:00,20,y\nb,2024-01-01T12:00,10,y\n")
    ds, _ = load_series_data(str(p))
    assert ds.channels == 1 and ds.values[0, 0].tolist() == [1, 2, 3] and ds.values[1, 0, :2].tolist() == [10, 20]


# ------------------------------------------------------------------------------------ pairs and single files
def test_a_csv_pair_gives_a_test_split(tmp_path):
    write(tmp_path / "P_TRAIN.csv", "label,a,b,c\nx,1,2,3\ny,4,5,6\nx,7,8,9\n")
    write(tmp_path / "P_TEST.csv", "label,a,b,c\ny,1,1,1\n")
    for data in (tmp_path, tmp_path / "P_TRAIN.csv", tmp_path / "P_TEST.csv"):
        train, test = load_series_data(str(data))
        assert len(train) == 3 and len(test) == 1 and names(test) == ["y"] and test.classes == ["x", "y"]


def test_a_lone_train_file_or_a_folder_of_one_file_is_a_single_file(tmp_path):
    write(tmp_path / "P_TRAIN.csv", "label,a\nx,1\ny,2\n")
    assert find_series_files(str(tmp_path / "P_TRAIN.csv")) == {"train": tmp_path / "P_TRAIN.csv"}
    assert find_series_files(str(tmp_path)) == {"train": tmp_path / "P_TRAIN.csv"}


def test_a_tsv_alone_and_npy_and_npz_files(tmp_path):
    write(tmp_path / "a.tsv", "1\t0.5\t0.25\tNaN\n2\t1\t2\t3\n")
    ds, test = load_series_data(str(tmp_path / "a.tsv"))
    assert test is None and ds.lengths.tolist() == [2, 3] and ds.classes == ["1", "2"]

    arr = np.array([[1.0, 0.5, 0.25, np.nan], [-1.0, 1, 2, 3], [1.0, 9, 8, 7]])
    np.save(tmp_path / "a.npy", arr)  # the label in column 0, as the archive's .tsv
    ds, _ = load_series_data(str(tmp_path / "a.npy"))
    assert ds.classes == ["-1", "1"] and names(ds) == ["1", "-1", "1"] and ds.lengths.tolist() == [2, 3, 3]
    assert ds.values[2, 0].tolist() == [9, 8, 7]

    x = np.arange(24, dtype=np.float32).reshape(4, 2, 3)
    x[1, :, 2] = np.nan  # a shorter series, both channels padded
    np.savez(tmp_path / "m.npz", X=x, y=np.array(["b", "a", "b", "a"]))
    ds, _ = load_series_data(str(tmp_path / "m.npz"))
    assert tuple(ds.values.shape) == (4, 2, 3) and ds.lengths.tolist() == [3, 2, 3, 3]
    assert ds.classes == ["a", "b"] and names(ds) == ["b", "a", "b", "a"]
    assert torch.equal(ds.values[0], torch.from_numpy(x[0]))

    np.savez(tmp_path / "u.npz", X=np.ones((2, 5)), y=np.array([3, 7]))  # (N, T): univariate
    ds, _ = load_series_data(str(tmp_path / "u.npz"))
    assert tuple(ds.values.shape) == (2, 1, 5) and ds.classes == ["3", "7"]


def test_an_npz_pair(tmp_path):
    np.savez(tmp_path / "Q_TRAIN.npz", X=np.ones((4, 6)), y=np.array([0, 1, 0, 1]))
    np.savez(tmp_path / "Q_TEST.npz", X=np.zeros((2, 6)), y=np.array([1, 0]))
    train, test = load_series_data(str(tmp_path))
    assert len(train) == 4 and names(test) == ["1", "0"]


def test_looks_like_series_by_names_alone(tmp_path):
    write(tmp_path / "a.csv", "label,x\n1,2\n")
    write(tmp_path / "notes.txt", "hello")
    (tmp_path / "pair").mkdir()
    write(tmp_path / "pair" / "P_TRAIN.ts", "")
    (tmp_path / "images" / "cat").mkdir(parents=True)
    assert looks_like_series(tmp_path / "a.csv") and looks_like_series(tmp_path / "pair")
    assert looks_like_series(tmp_path)  # a folder holding a series file
    assert not looks_like_series(tmp_path / "notes.txt") and not looks_like_series(tmp_path / "images")
    assert not looks_like_series(tmp_path / "nothing.csv")  # no such file
    assert looks_like_series("GunPoint") and not looks_like_series("mnist")  # archive names, as --data takes them


# ------------------------------------------------------------------------------------ a real dataset as a CSV
def ts_cases(path):
    """(values as written, label) of each case of a univariate .ts file, read here by hand."""
    lines = path.read_text().splitlines()
    start = next(i for i, l in enumerate(lines) if l.strip().lower() == "@data") + 1
    cases = []
    for line in lines[start:]:
        if line.strip():
            values, label = line.strip().rsplit(":", 1)
            cases.append((values.split(","), label))
    return cases


def test_an_archive_dataset_as_a_wide_csv_pair_reads_as_its_ts(tmp_path):
    """PickupGestureWiimoteZ (aeon ships it): 10 classes, series of 29 to 361 steps, so the CSV's
    shorter rows end in empty cells."""
    folder = aeon_data_dir() / "PickupGestureWiimoteZ"
    for tag in ("TRAIN", "TEST"):
        cases = ts_cases(folder / f"PickupGestureWiimoteZ_{tag}.ts")
        width = max(len(v) for v, _ in cases)
        lines = ["id,label," + ",".join(f"t{j}" for j in range(width))]
        lines += [f"case{i},{label}," + ",".join(v + [""] * (width - len(v))) for i, (v, label) in enumerate(cases)]
        write(tmp_path / f"Gesture_{tag}.csv", "\n".join(lines) + "\n")
    ts_train, ts_test = load_series_data(str(folder / "PickupGestureWiimoteZ_TRAIN.ts"))
    csv_train, csv_test = load_series_data(str(tmp_path / "Gesture_TRAIN.csv"))
    assert int(ts_train.lengths.min()) < int(ts_train.lengths.max())  # unequal lengths, as promised
    for ts, csv in ((ts_train, csv_train), (ts_test, csv_test)):
        assert torch.equal(ts.values, csv.values) and torch.equal(ts.lengths, csv.lengths)
        assert names(ts) == names(csv)
    assert sorted(csv_train.classes, key=int) == csv_train.classes and set(csv_train.classes) == set(ts_train.classes)


# ------------------------------------------------------------------------------------ refusals
@pytest.mark.parametrize("text, message", [
    ("", r"bad\.csv: empty; expected a header line"),
    ("\n \n", r"bad\.csv: empty; expected a header line"),
    ("label,a\n", r"bad\.csv: a header and no rows"),
    ("1,2,3\n4,5,6\n", r"bad\.csv:1: the first line holds numbers, not column names"),
    ("a,b,c\n1,2,3\n", r"bad\.csv: no label column in the header \['a', 'b', 'c'\]; expected a column named label, "
                       r"class, target, y or category, or pass --label-column NAME"),
    ("label,class,a\nx,y,1\n", r"bad\.csv: columns 'label' and 'class' could each be the label column; expected one; "
                               r"pass --label-column NAME"),
    ("label,a,b,c\nx,1,,3\n", r"bad\.csv: row 1 \(line 2\), column 'b': missing value inside the series "
                              r"\(values follow it\); expected empty cells or NaN only at the end"),
    ("label,a,b\nx,1,2\ny,1,abc\n", r"bad\.csv: row 2 \(line 3\), column 'b': 'abc' is not a number; expected decimal"),
    ("label,a,b\nx,1,inf\n", r"row 1 \(line 2\), column 'b': infinite value"),
    ("label,a,b\n,1,2\n", r"row 1 \(line 2\), column 'label': no label"),
    ("label,a,b\nx,,\n", r"row 1 \(line 2\) has a label and no values"),
    ("label,a\nx,1,2\n", r"Expected 2 fields in line 2, saw 3"),
    ("label\nx\n", r"has no value columns besides the label"),
    ("label,a,A\nx,1,2\n", r"column\(s\) \['A', 'a'\] appear more than once"),
    ("label,a,b\n1,1,2\n2,3,4\ncat,5,6\nx,7,8\n", r"bad\.csv: column 'label': the labels mix numbers \(1, 2\) and "
                                                  r"words \('cat', 'x'\); expected labels of one kind"),
])
def test_wide_refusals_are_one_line(tmp_path, text, message):
    write(tmp_path / "bad.csv", text)
    with pytest.raises(DataError, match=message) as e:
        load_series_data(str(tmp_path / "bad.csv"))
    assert "\n" not in str(e.value)


LONG = "id,time,channel,value,label\n"


@pytest.mark.parametrize("text, message", [
    (LONG + "a,0,x,1,p\na,1,x,2,q\n", r"id 'a' has two labels, 'p' \(line 2\) and 'q' \(line 3\); expected one label "
                                      r"per series"),
    (LONG + "a,0,x,1,p\na,0,x,2,p\n", r"id 'a', channel 'x': time '0' appears twice \(lines 2 and 3\)"),
    (LONG + "a,0,x,1,p\na,1,x,2,p\na,0,y,1,p\n", r"id 'a': channel 'y' has 1 steps at other times than channel 'x' "
                                                 r"\(2 steps\)"),
    (LONG + "a,0,x,1,p\na,0,y,1,p\nb,0,x,1,q\n", r"id 'b' has no rows for channel 'y'"),
    (LONG + "a,0,x,,p\n", r"row 1 \(line 2\), column 'value': missing value; expected a number on every row"),
    (LONG + "a,0,x,one,p\n", r"column 'value': 'one' is not a finite number"),
    (LONG + "a,0,x,1,p\na,soon,x,1,p\n", r"bad\.csv:3: column 'time': 'soon' is neither a number nor an ISO date"),
    (LONG + "a,2024-01-01,x,1,p\na,5,x,1,p\n", r"bad\.csv:3: column 'time': '5' is a number among dates"),
    ("id,time,value\na,0,1\n", r"a long CSV \(it has time and value columns\) without an label column: the header is "
                               r"\['id', 'time', 'value'\]; expected a column named label, class or target \(or pass "
                               r"--label-column NAME\)"),
    ("time,value,label\n0,1,p\n", r"without an id column"),
    ("id,time,value,label,site\na,0,1,p,x\n", r"column\(s\) \['site'\] are not part of a long CSV"),
    ("id,series,time,value,label\na,a,0,1,p\n", r"columns 'id' and 'series' could each be the id column"),
])
def test_long_refusals_are_one_line(tmp_path, text, message):
    write(tmp_path / "bad.csv", text)
    with pytest.raises(DataError, match=message) as e:
        load_series_data(str(tmp_path / "bad.csv"))
    assert "\n" not in str(e.value)


def test_a_label_column_that_does_not_exist(tmp_path):
    write(tmp_path / "s.csv", "label,a\nx,1\n")
    with pytest.raises(DataError, match=r"s\.csv: no column 'kind' \(--label-column\) in the header \['label', 'a'\]"):
        load_series_data(str(tmp_path / "s.csv"), label_column="kind")
    np.save(tmp_path / "a.npy", np.ones((2, 3)))
    with pytest.raises(DataError, match=r"a\.npy: --label-column 'kind' names a CSV column, but this is a \.npy file"):
        load_series_data(str(tmp_path / "a.npy"), label_column="kind")


def test_array_refusals_are_one_line(tmp_path):
    cases = {}
    np.save(tmp_path / "flat.npy", np.ones(5))
    cases["flat.npy"] = r"flat\.npy: an array of shape \(5,\); expected an \.npy array \(N, 1 \+ T\)"
    np.save(tmp_path / "gap.npy", np.array([[1.0, 1, np.nan, 2]]))
    cases["gap.npy"] = r"gap\.npy: series 0, channel 0, step 1: missing value \(NaN\) inside the series"
    np.save(tmp_path / "nolabel.npy", np.array([[np.nan, 1, 2]]))
    cases["nolabel.npy"] = r"the label of series 0 is nan"
    np.save(tmp_path / "words.npy", np.array([["a", "1"]]))
    cases["words.npy"] = r"words\.npy: the array is a <U1 array; expected numbers"
    np.save(tmp_path / "objects.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    cases["objects.npy"] = r"objects\.npy: not a plain numeric NumPy file \(.*pickle"
    np.savez(tmp_path / "keys.npz", data=np.ones((2, 3)), labels=np.ones(2))
    cases["keys.npz"] = r"keys\.npz: arrays \['data', 'labels'\]; expected an \.npy array .* or an \.npz with arrays X"
    np.savez(tmp_path / "count.npz", X=np.ones((3, 4)), y=np.ones(2))
    cases["count.npz"] = r"count\.npz: y has shape \(2,\) for 3 series in X"
    np.savez(tmp_path / "ragged.npz", X=np.array([[[1, 2, 3], [1, 2, np.nan]]]), y=np.ones(1))
    cases["ragged.npz"] = r"ragged\.npz: series 0 has channels of \[2, 3\] steps"
    np.savez(tmp_path / "pickled.npz", X=np.ones((2, 3)), y=np.array(["a", 1], dtype=object))
    cases["pickled.npz"] = r"pickled\.npz: not a plain numeric NumPy file \(.*pickle"
    np.savez(tmp_path / "mixed.npz", X=np.ones((3, 3)), y=np.array(["1", "2", "dog"]))
    cases["mixed.npz"] = r"mixed\.npz: the labels: the labels mix numbers \(1, 2\) and words \('dog'\)"
    (tmp_path / "junk.npz").write_bytes(b"not numpy at all")
    cases["junk.npz"] = r"junk\.npz: not a plain numeric NumPy file"
    for name, message in cases.items():
        with pytest.raises(DataError, match=message) as e:
            read_series_file(tmp_path / name)
        assert "\n" not in str(e.value), name


def test_files_and_folders_that_are_not_series_data(tmp_path):
    write(tmp_path / "data.json", "{}")
    with pytest.raises(DataError, match=r"data\.json: unknown series format '\.json'; expected a \.ts, \.tsv, \.csv, "
                                        r"\.npy, \.npz file"):
        load_series_data(str(tmp_path / "data.json"))
    write(tmp_path / "P_TEST.csv", "label,a\nx,1\n")
    with pytest.raises(DataError, match=r"P_TEST\.csv: a test split without its training split P_TRAIN\.csv"):
        load_series_data(str(tmp_path / "P_TEST.csv"))
    (tmp_path / "two").mkdir()
    write(tmp_path / "two" / "a.csv", "label,a\nx,1\n")
    write(tmp_path / "two" / "b.npy", "")
    with pytest.raises(DataError, match=r"two holds 2 series files and no _TRAIN/_TEST pair \(a\.csv, b\.npy\)"):
        load_series_data(str(tmp_path / "two"))
    (tmp_path / "none").mkdir()
    with pytest.raises(DataError, match=r"none holds no series file; expected a <problem>_TRAIN/_TEST pair or one"):
        load_series_data(str(tmp_path / "none"))


def test_a_test_label_the_training_file_lacks(tmp_path):
    write(tmp_path / "P_TRAIN.csv", "label,a\nx,1\ny,2\n")
    write(tmp_path / "P_TEST.csv", "label,a\nz,1\n")
    with pytest.raises(DataError, match=r"P_TEST\.csv: class label\(s\) \['z'\] do not occur in the training split"):
        load_series_data(str(tmp_path))


def test_a_row_is_named_by_the_line_it_starts_on_and_read_as_tables_are(tmp_path):
    """The series CSV goes through the tables' reader: a quoted line break stays in its cell, and a bad
    cell is named by the line its row starts on (the row after it by where it starts, too)."""
    path = tmp_path / "s.csv"
    path.write_text('label,t0,t1\n"up\nwards",1,2\ndown,3,x\n')
    with pytest.raises(DataError, match=r"row 2 \(line 4\), column 't1': 'x' is not a number"):
        read_series_file(path)
    path.write_text('label,t0,t1\n"up\nwards",1,NA\ndown,3,4\n')
    raw = read_series_file(path)
    assert raw.labels == ["up\nwards", "down"] and raw.series[0].shape == (1, 1)  # NA: the tables' missing cell
