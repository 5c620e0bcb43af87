import json

import pytest

from nas.cells import genotype
from nas.common.errors import InputError
from nas.cells.genotype import Genotype

DARTS_V2_ENAS_ARC = "0 2 1 1 1 1 1 3 2 0 5 2 3 0 5 1"  # the ENAS fixed-arc form of DARTS_V2


def test_darts_v2_matches_the_enas_notation_in_notes():
    assert genotype.load("darts_v2").to_enas() == DARTS_V2_ENAS_ARC


@pytest.mark.parametrize(
    "name,first,concat",
    [
        ("darts_v1", ("relu", 0), list(range(1, 9))),
        ("enas", ("tanh", 0), [2, 5, 6, 9, 10, 11]),
        ("idarts_global_v1", ("identity", 0), list(range(1, 9))),
    ],
)
def test_shipped_cells_resolve_by_bare_name_and_carry_provenance(name, first, concat):
    geno = genotype.load(name)
    assert geno.nodes[0] == (first,)
    assert list(geno.concat) == concat
    assert "source" in geno.provenance


def test_round_trip_through_a_file(tmp_path):
    geno = Genotype(
        ((("tanh", 0), ("relu", 0)), (("identity", 1),)), (1, 2), name="two-input", provenance={"method": "idarts"}
    )
    genotype.save(geno, tmp_path / "cell.json")
    again = genotype.load(tmp_path / "cell.json")
    assert again == geno and again.provenance == {"method": "idarts"}


def _base() -> dict:
    return genotype.load("darts_v2").to_dict()


@pytest.mark.parametrize(
    "mutate,field",
    [
        (lambda d: d["nodes"][2][0].__setitem__(0, "gelu"), "nodes[2][0]"),
        (lambda d: d["nodes"][2][0].__setitem__(1, 3), "nodes[2][0]"),
        (lambda d: d["nodes"].__setitem__(1, []), "nodes[1]"),
        (lambda d: d.__setitem__("nodes", []), "nodes"),
        (lambda d: d.__setitem__("concat", [1, 9]), "concat"),
        (lambda d: d.__setitem__("concat", [0]), "concat"),
        (lambda d: d.__setitem__("version", 7), "version"),
        (lambda d: d.__setitem__("attention", "local"), "attention"),
        (lambda d: d.__setitem__("colour", "red"), "colour"),
    ],
)
def test_each_bad_field_is_named(tmp_path, mutate, field):
    data = _base()
    mutate(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InputError) as err:
        genotype.load(path)
    assert f"field '{field}'" in str(err.value) and str(path) in str(err.value)


def test_a_missing_bare_name_lists_the_shipped_cells_and_how_to_make_it():
    with pytest.raises(InputError) as err:
        genotype.load("ess_wt103.json")
    message = str(err.value)
    assert "darts_v2" in message and "bin/search-lm" in message and "ess_wt103.json" in message


def test_invalid_json_names_the_line(tmp_path):
    path = tmp_path / "cell.json"
    path.write_text('{\n  "version": 1,\n  "nodes": [\n')
    with pytest.raises(InputError, match=r"line 4"):
        genotype.load(path)
