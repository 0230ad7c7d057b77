"""ANYFORMER_PLAN's grammar and its one-line errors."""
import pytest

from anyformer.plan.choices import ALL, forced_choice, parse


def test_items_and_stock():
    assert parse("linear=stock,attention=explicit") == {"linear": "stock", "attention": "explicit"}
    assert parse(" stock ") == {ALL: "stock"}
    assert parse("stock, linear=onednn") == {ALL: "stock", "linear": "onednn"}
    assert parse("linear=onednn,stock") == {ALL: "stock"}  # left to right: the bare item resets
    assert parse("attention=stock") == {"attention": "fused"}  # stock means each decision's own stock
    assert parse("linear=auto") == {"linear": None}
    assert parse("") == parse(None) == parse("auto") == {}


def test_forced_choice_reads_stock_for_all():
    forced = parse("stock,linear=onednn")
    assert forced_choice(forced, "linear") == "onednn"
    assert forced_choice(forced, "amp") == "none"
    assert forced_choice(parse("attention=explicit"), "linear") is None


@pytest.mark.parametrize("spec, says", [
    ("linear=fast", "unknown choice 'fast' for linear; expected one of stock, onednn, mixed, native, auto"),
    ("lienar=stock", "unknown decision 'lienar'; expected one of"),
    ("linear=", "expected NAME=CHOICE items"),
    ("fast", "a bare item may be 'stock' or 'auto', got 'fast'"),
])
def test_malformed_specs_say_what_was_expected(spec, says):
    with pytest.raises(ValueError) as e:
        parse(spec)
    assert says in str(e.value) and "ANYFORMER_PLAN" in str(e.value) and "\n" not in str(e.value)
