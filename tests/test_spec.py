import pytest

from hsd_runtime import ModelSpecError, parse_chain, parse_spec


@pytest.mark.parametrize(
    "text",
    ["smollm2-135m", "smollm2-135m:layers=8", "smollm2-135m:dtype=bf16:layers=8", "ngram:n=3", "/models/x.gguf:layers=2"],
)
def test_spec_round_trips_unchanged(text):
    assert str(parse_spec(text)) == text


def test_spec_fields():
    spec = parse_spec("smollm2-135m:layers=8:dtype=bf16")
    assert (spec.name, spec.layers, spec.dtype) == ("smollm2-135m", 8, "bf16")
    assert str(spec.base) == "smollm2-135m:dtype=bf16"


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("", "empty model spec"),
        ("m:layers=0", "integer from 1 to 1,000,000"),
        ("m:layers=x", "integer from 1 to 1,000,000"),
        ("m:depth=2", "unknown option 'depth'"),
        ("m:layers", "is not key=value"),
        ("m:dtype=int4", "dtype=int4"),
        ("m:layers=2:layers=3", "given twice"),
        ("ngram:layers=2", "ngram takes only"),
        ("m:n=3", "ngram only"),
        ("m:min=2", "option min=K applies to ngram only"),
        ("ngram:min=4", "min=4 exceeds the order n=3"),
        ("ngram:n=2:min=0", "integer from 1 to 1,000,000"),
    ],
)
def test_bad_specs_say_what_is_wrong(text, fragment):
    with pytest.raises(ModelSpecError, match=fragment):
        parse_spec(text)


def test_chain_target_cannot_be_ngram():
    with pytest.raises(ModelSpecError, match="target"):
        parse_chain("m,ngram")
    assert [str(s) for s in parse_chain("ngram,m:layers=2,m")] == ["ngram", "m:layers=2", "m"]


@pytest.mark.parametrize("char", ["\n", "\r", "\x00", "\x1b", "\x7f", "\x85", "\u2028", "\u2029"])
@pytest.mark.parametrize("where", ["/models/{}x.gguf", "m:steer=/s/{}x", "bpd:/h/x:rescore=ngram:corpus=/c{}x"])
def test_a_control_character_anywhere_in_a_spec_is_refused(char, where):
    """A name goes into the database and into every export's comments and commands, where a line
    break (C0 and C1 controls, DEL, U+2028, U+2029) would start a line of its own."""
    with pytest.raises(ModelSpecError, match=f"holds the control character U\\+{ord(char):04X}"):
        parse_spec(where.format(char))
