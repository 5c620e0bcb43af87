import filecmp

from tagger.synthetic import generate


def _files(root):
    return sorted(p.relative_to(root) for p in root.rglob("*") if p.is_file())


def test_same_seed_gives_byte_identical_files_and_another_seed_differs(tmp_path):
    a = generate(tmp_path / "a", seed=7, train=40, dev=10, test=10, lm_lines=50, raw_paragraphs=3)
    b = generate(tmp_path / "b", seed=7, train=40, dev=10, test=10, lm_lines=50, raw_paragraphs=3)
    c = generate(tmp_path / "c", seed=8, train=40, dev=10, test=10, lm_lines=50, raw_paragraphs=3)
    names = _files(a)
    assert len(names) == 10 and names == _files(b) == _files(c)
    for name in names:
        assert filecmp.cmp(a / name, b / name, shallow=False)
    assert all(not filecmp.cmp(a / name, c / name, shallow=False) for name in names)


def test_iob1_marks_b_only_between_adjacent_same_type_entities(tmp_path):
    root = generate(tmp_path / "d", seed=1, train=400, dev=10, test=10, lm_lines=20, raw_paragraphs=1)
    iob1 = [
        line.split()
        for line in (root / "conll03" / "eng.train").read_text().splitlines()
        if line and not line.startswith("-DOCSTART-")
    ]
    iob2 = [line.split() for line in (root / "iob2" / "train.txt").read_text().splitlines() if line]
    assert [t[0] for t in iob1] == [t[0] for t in iob2]
    b_in_iob1 = [k for k, t in enumerate(iob1) if t[3].startswith("B-")]
    assert b_in_iob1, "the grammar has adjacent same-type entities"
    for k in b_in_iob1:  # a B- in IOB1 always follows a token of the same type
        assert iob1[k - 1][3][2:] == iob1[k][3][2:] and iob2[k][1].startswith("B-")
    assert sum(t[1].startswith("B-") for t in iob2) > 3 * len(b_in_iob1)
