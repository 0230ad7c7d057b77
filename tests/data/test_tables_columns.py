"""What a column is, from its cells; what the target asks for; and the refusals."""
import pandas as pd
import pytest

from anyformer.data import DataError
from anyformer.data.tables.columns import describe_columns, describe_target, find_target


def kinds(frame: pd.DataFrame, target: str = "y") -> dict[str, tuple[str, str]]:
    return {c.name: (c.kind, c.why) for c in describe_columns(frame.astype(str), target, "t.csv")}


def test_each_kind_of_column_is_told_from_its_cells():
    n = 40
    frame = pd.DataFrame({
        "size": [f"{1.5 * i:.1f}" for i in range(n)],
        "cyl": [str(4 + 2 * (i % 3)) for i in range(n)],                      # integers with few values
        "smoker": ["Yes" if i % 2 else "no" for i in range(n)],
        "when": [f"2024-01-{1 + i % 28:02d}" for i in range(n)],
        "row": [str(i + 1) for i in range(n)],                                  # consecutive integers: an id
        "name": [f"customer-{i}" for i in range(n)],                            # short and unique: an id
        "review": [f"a long free text review number {i} that says a lot" for i in range(n)],
        "colour": ["red", "green", "", "blue"] * 10,
        "same": ["x"] * n,
        "nothing": [""] * n,
        "y": ["a", "b"] * 20,
    })
    got = kinds(frame)
    assert got["size"] == ("number", "numbers")
    assert got["cyl"] == ("category", "integers with 3 values")
    assert got["smoker"] == ("category", "yes/no")
    assert got["when"] == ("date", "dates")
    assert got["row"][0] == "skipped" and "id" in got["row"][1]
    assert got["name"][0] == "skipped" and "id" in got["name"][1]
    assert got["review"][0] == "skipped" and "free text" in got["review"][1]
    assert got["colour"] == ("category", "words with 3 values")
    assert got["same"][0] == "skipped" and "same value" in got["same"][1]
    assert got["nothing"] == ("skipped", "empty")


def test_missing_cells_are_counted_and_do_not_change_a_column_s_kind():
    frame = pd.DataFrame({"x": ["1.5", "NA", "", "2.25", "?", "3"] * 5, "y": ["a", "b"] * 15})
    (col,) = describe_columns(frame, "y", "t.csv")
    assert (col.kind, col.missing) == ("number", 15)


def test_a_column_mixing_many_numbers_with_words_is_refused_and_few_values_are_codes():
    many = pd.DataFrame({"x": [str(i) for i in range(30)] + ["oops"], "y": ["a", "b"] * 15 + ["a"]})
    with pytest.raises(DataError, match=r"t\.csv: column 'x' mixes numbers \(0, 1, 2\) and words \('oops'\) in 31 "
                                        r"values; expected one kind per column"):
        describe_columns(many, "y", "t.csv")
    codes = pd.DataFrame({"rooms": ["1", "2", "3+"] * 10, "y": ["a", "b", "c"] * 10})
    assert describe_columns(codes, "y", "t.csv")[0].kind == "category"


def test_a_table_with_nothing_to_learn_from_is_refused():
    frame = pd.DataFrame({"id": [str(i) for i in range(20)], "y": ["a", "b"] * 10})
    with pytest.raises(DataError, match="no column to learn from besides the target 'y'.*--task text$"):
        describe_columns(frame, "y", "t.csv")


def test_the_target_is_found_by_name_or_given():
    assert find_target(["a", "Species", "b"], "species", "t") == "Species"
    assert find_target(["a", "Target"], None, "t") == "Target"
    with pytest.raises(DataError, match=r"no target column among \['a', 'b'\]; expected a column named label"):
        find_target(["a", "b"], None, "t")
    with pytest.raises(DataError, match="columns 'label' and 'class' could each be the target"):
        find_target(["label", "class"], None, "t")
    with pytest.raises(DataError, match=r"no column 'kind' \(--label-column\)"):
        find_target(["a"], "kind", "t")


def test_classes_or_a_number_from_the_target_s_cells_and_task_overrides():
    words = describe_target(pd.Series(["b", "a", "b", ""]), "y", None, "t")
    assert (words.task, words.classes) == ("classify", ("a", "b"))
    few = describe_target(pd.Series(["10", "2", "2", "10"]), "y", None, "t")
    assert (few.task, few.classes) == ("classify", ("2", "10")) and "--task regress" in few.why
    many = describe_target(pd.Series([str(i) for i in range(50)]), "y", None, "t")
    assert many.task == "regress" and "50 values" in many.why
    fractions = describe_target(pd.Series(["0.5", "1.25", "2.5", "0.5"]), "y", None, "t")
    assert fractions.task == "regress"
    assert describe_target(pd.Series(["10", "2", "2", "10"]), "y", "regress", "t").task == "regress"
    assert describe_target(pd.Series([str(i) for i in range(50)]), "y", "classify", "t").task == "classify"


@pytest.mark.parametrize("cells,task,said", [
    (["a", "a", "a"], None, "holds one class only ('a', 3 rows)"),
    (["", "NA"], None, "the target column 'y' is empty"),
    (["1", "2", "three"], None, "mixes numbers (1, 2) and words ('three')"),
    (["a", "b"], "regress", "--task regress, but the target 'y' holds words ('a')"),
    (["3", "3"], "regress", "holds one value only"),
])
def test_a_target_that_cannot_be_learned_is_refused(cells, task, said):
    with pytest.raises(DataError, match=None) as e:
        describe_target(pd.Series(cells), "y", task, "t.csv")
    assert said in str(e.value) and str(e.value).startswith("t.csv")
