"""Cell drawings read as the cell: no edge runs across a node it does not join, and no text meets other
text or a node. Checked on the drawn figure itself (its circles, arrows and text boxes)."""

import itertools
import random

import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.patches import Circle, FancyArrowPatch
from matplotlib.text import Text

from nas.cells.genotype import Genotype, load, shipped_cells, validate
from nas.pictures.plots import cell_figure

OPS = ["identity", "tanh", "relu", "sigmoid"]


def random_genotype(seed: int) -> Genotype:
    """A random cell: 2-10 nodes with 1-3 inputs each, a random output set, and ESS gates half the time."""
    rng = random.Random(seed)
    n = rng.randint(2, 10)
    nodes = [
        [[rng.choice(OPS), pred] for pred in rng.sample(range(i), min(i, rng.randint(1, 3)))] for i in range(1, n + 1)
    ]
    concat = sorted(rng.sample(range(1, n + 1), rng.randint(1, n)))
    inter = None
    if seed % 2:
        m = rng.randint(1, 4)

        def gate() -> list:  # node i reads its history vector (0, for i <= m) or an earlier node
            return [
                [[rng.choice(OPS), rng.choice([0] * (i <= m) + list(range(1, i)))]]
                for i in range(1, m + rng.randint(0, 2) + 1)
            ]

        inter = {
            "history": m,
            "squash": rng.choice(["sigmoid", "2sigmoid", "none"]),
            "size_match": "project",
            "f": gate(),
            "g": gate(),
        }
    return validate(
        {
            "version": 1,
            "name": f"random {seed}",
            "nodes": nodes,
            "concat": concat,
            "inter": inter,
            "attention": rng.choice([None, "dot"]),
        },
        "random",
    )


CELLS = [pytest.param(load(name), id=name) for name in shipped_cells()] + [
    pytest.param(random_genotype(seed), id=f"random-{seed}") for seed in range(12)
]


def sampled(path, per_piece: int = 40) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(points along the whole arrow, the line's first point, its last point: the arrow's tip)."""
    t = np.linspace(0, 1, per_piece)
    pieces = list(path.iter_bezier())
    points = np.concatenate([segment(t) for segment, _ in pieces])
    moves = [k for k, (_, code) in enumerate(pieces) if code == path.MOVETO]
    line_end = moves[1] - 1 if len(moves) > 1 else len(pieces) - 1  # the head is drawn after the line
    return points, pieces[0][0].control_points[0], pieces[line_end][0].control_points[-1]


@pytest.mark.parametrize("geno", CELLS)
def test_no_edge_passes_over_a_node_it_does_not_join(geno):
    fig = cell_figure(geno)
    fig.canvas.draw()
    checked = 0
    for ax in fig.axes:
        circles = [p for p in ax.patches if isinstance(p, Circle)]
        centres = np.array([c.center for c in circles])
        radii = np.array([c.radius for c in circles])
        arrows = [p for p in ax.patches if isinstance(p, FancyArrowPatch)]
        assert arrows and circles
        for arrow in arrows:
            points, first, tip = sampled(arrow.get_path())
            ends = set()
            for point in (first, tip):  # the edge's own nodes: the circles its ends touch
                gaps = np.abs(np.hypot(*(centres - point).T) - radii)
                assert gaps.min() < 0.05, "an edge end is not on a node's rim"
                ends.add(int(gaps.argmin()))
            assert len(ends) == 2
            for k in set(range(len(circles))) - ends:
                distance = np.hypot(*(points - centres[k]).T).min()
                assert distance > radii[k], f"an edge passes {radii[k] - distance:.2f} inside node {k}"
                checked += 1
    assert checked > 0
    plt.close(fig)


def _disc_meets_box(centre, radius, box) -> bool:
    nearest = np.clip(centre, [box.x0, box.y0], [box.x1, box.y1])
    return np.hypot(*(nearest - centre)) < radius


@pytest.mark.parametrize("geno", CELLS)
def test_no_text_overlaps_other_text_or_a_node(geno):
    fig = cell_figure(geno)
    renderer = fig.canvas.get_renderer()
    texts = [t for t in fig.findobj(Text) if t.get_visible() and t.get_text()]
    boxes = [t.get_window_extent(renderer) for t in texts]
    assert len(texts) > 2 * len(geno.nodes)
    for (a, box_a), (b, box_b) in itertools.combinations(zip(texts, boxes), 2):
        assert not box_a.overlaps(box_b), f"{a.get_text()!r} overlaps {b.get_text()!r}"
    for ax in fig.axes:
        labels = [(t, t.get_bbox_patch().get_window_extent(renderer)) for t in ax.texts if t.get_bbox_patch()]
        for circle in (p for p in ax.patches if isinstance(p, Circle)):
            centre = ax.transData.transform(circle.center)
            radius = ax.transData.transform((circle.center[0] + circle.radius, circle.center[1]))[0] - centre[0]
            for text, box in labels:
                assert not _disc_meets_box(centre, radius, box), f"edge label {text.get_text()!r} covers a node"
    plt.close(fig)
