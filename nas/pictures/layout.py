"""A layered (Sugiyama-style) layout of the small DAGs that `nas.pictures.plots` draws: cells and ESS gates.

Nodes sit in columns by depth, left to right. An edge that skips columns gets a bend point in each
column it passes, and bend points take places in their columns like nodes, so every piece of every
edge runs between neighbouring columns only, where no node but its own ends can be. The columns
are ordered to cut crossings (barycentre sweeps), heights pull each node and bend point toward its
neighbours while keeping the columns' spacing, and then the columns move apart until every edge
keeps `CLEARANCE` from every node it does not join and every edge label fits in its gap. Lengths
are in units of `INCH` inches, so text sizes in points convert to units.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
from matplotlib.path import Path as CurvePath
from matplotlib.textpath import TextPath

INCH = 0.55  # inches per unit
RADIUS = {"input": 0.38, "node": 0.28, "output": 0.38, "gate": 0.28}
LABEL_FONT = 7  # points, of the op on an edge
LABEL_PAD = 0.12  # the label box's padding, in fractions of the font size (matplotlib's boxstyle pad)
MIN_GAP = 1.6  # units between neighbouring columns
CLEARANCE = 0.1  # units between an edge and the rim of any node it does not join
SPACE = 0.1  # units between a label and a node rim or another label
SEPARATION = (0.45, 0.75, 1.0)  # units between neighbours in a column, by how many of the two are nodes
CORNER = 0.35  # a bend is rounded over this fraction of the pieces either side of it
SWEEPS, ROUNDS, TRIES = 6, 24, 40


@dataclass
class Graph:
    """A DAG to draw left to right: node columns, labels, kinds and labelled edges."""

    column: dict[str, int] = field(default_factory=dict)
    label: dict[str, str] = field(default_factory=dict)
    kind: dict[str, str] = field(default_factory=dict)
    edges: list[tuple[str, str, str]] = field(default_factory=list)

    def add(self, key: str, column: int, label: str, kind: str = "node") -> None:
        self.column[key], self.label[key], self.kind[key] = column, label, kind


@dataclass
class Layout:
    """Where a Graph is drawn: node centres, each edge's path (rim to rim), each edge label's centre
    (None for an unlabelled edge) and the box (x0, y0, x1, y1) that holds it all."""

    pos: dict[str, tuple[float, float]]
    paths: list[CurvePath]
    labels: list[tuple[float, float] | None]
    box: tuple[float, float, float, float]

    @property
    def width(self) -> float:
        return self.box[2] - self.box[0]

    @property
    def height(self) -> float:
        return self.box[3] - self.box[1]


def layered_layout(g: Graph) -> Layout:
    """`g` placed as the module docstring says; if the columns cannot be moved far enough apart in
    `TRIES` steps (never seen on real cells), the last try is returned."""
    rank = dict(g.column)
    chains = []
    for i, (src, dst, _) in enumerate(g.edges):
        bends = [f"{i}/{r}" for r in range(rank[src] + 1, rank[dst])]  # "/" is in no node's key
        rank.update((key, rank[src] + 1 + k) for k, key in enumerate(bends))
        chains.append([src, *bends, dst])
    columns: list[list[str]] = [[] for _ in range(max(rank.values()) + 1)]
    for key, r in rank.items():
        columns[r].append(key)
    up, down = defaultdict(list), defaultdict(list)
    for chain in chains:
        for a, b in zip(chain, chain[1:]):
            down[a].append(b)
            up[b].append(a)
    columns = _order(columns, up, down)
    height = _heights(columns, up, down, g.column)
    gaps = [MIN_GAP] * (len(columns) - 1)
    for _ in range(TRIES):
        x = np.concatenate([[0.0], np.cumsum(gaps)])
        pos = {key: (float(x[rank[key]]), height[key]) for key in rank}
        paths = [
            _edge_path([pos[k] for k in chain], RADIUS[g.kind[chain[0]]], RADIUS[g.kind[chain[-1]]]) for chain in chains
        ]
        labels, crowded = _place_labels(g, chains, pos, rank)
        blocked = any(
            _too_close(path, [(pos[k], RADIUS[g.kind[k]]) for k in g.column if k not in (c[0], c[-1])])
            for path, c in zip(paths, chains)
        )
        if not crowded and not blocked:
            break
        gaps = [gap * (1.25 if blocked else 1.0) + (0.3 if r in crowded else 0.0) for r, gap in enumerate(gaps)]
    nodes = {key: pos[key] for key in g.column}
    return Layout(nodes, paths, labels, _box(g, nodes, paths, labels))


def _order(columns: list[list[str]], up: dict, down: dict) -> list[list[str]]:
    """Barycentre sweeps down and up the columns; the order with the fewest crossings."""
    current = [list(c) for c in columns]
    best, fewest = [list(c) for c in current], _crossings(current, down)
    for _ in range(SWEEPS):
        for r in range(1, len(current)):
            current[r] = _by_barycentre(current[r], up, current[r - 1])
        for r in range(len(current) - 2, -1, -1):
            current[r] = _by_barycentre(current[r], down, current[r + 1])
        crossings = _crossings(current, down)
        if crossings < fewest:
            best, fewest = [list(c) for c in current], crossings
    return best


def _by_barycentre(column: list[str], neighbours: dict, other: list[str]) -> list[str]:
    """`column` sorted by the mean place of each entry's neighbours in `other` (its own place if none)."""
    index = {key: i for i, key in enumerate(other)}

    def centre(item: tuple[int, str]) -> float:
        places = [index[n] for n in neighbours[item[1]] if n in index]
        return sum(places) / len(places) if places else item[0]

    return [key for _, key in sorted(enumerate(column), key=centre)]


def _crossings(columns: list[list[str]], down: dict) -> int:
    count = 0
    for left, right in zip(columns, columns[1:]):
        index = {key: i for i, key in enumerate(right)}
        pairs = [(i, index[b]) for i, a in enumerate(left) for b in down[a]]
        count += sum((a1 - a2) * (b1 - b2) < 0 for k, (a1, b1) in enumerate(pairs) for a2, b2 in pairs[k + 1 :])
    return count


def _heights(columns: list[list[str]], up: dict, down: dict, nodes: dict) -> dict[str, float]:
    """Each entry's height: packed and centred, then pulled toward the mean height of its neighbours
    in alternating sweeps, the column's order and spacing kept."""
    height: dict[str, float] = {}
    for column in columns:
        seps = _separations(column, nodes)
        height.update(zip(column, [sum(seps) / 2 - sum(seps[:k]) for k in range(len(column))]))
    for sweep in range(ROUNDS):
        for column in columns if sweep % 2 == 0 else columns[::-1]:
            wanted = [
                np.mean([height[n] for n in up[key] + down[key]]) if up[key] + down[key] else height[key]
                for key in column
            ]
            height.update(zip(column, _spread(wanted, _separations(column, nodes))))
    return height


def _separations(column: list[str], nodes: dict) -> list[float]:
    return [SEPARATION[(a in nodes) + (b in nodes)] for a, b in zip(column, column[1:])]


def _spread(wanted: list[float], seps: list[float]) -> list[float]:
    """Heights nearest to `wanted` (least squares) that go down the column by at least `seps`:
    isotonic regression (pool adjacent violators) of depth minus the least depth each entry needs."""
    need = np.concatenate([[0.0], np.cumsum(seps)])
    blocks: list[list[float]] = []  # [mean, count]
    for value in -np.asarray(wanted, dtype=float) - need:
        blocks.append([value, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            mean, count = blocks.pop()
            blocks[-1] = [
                (blocks[-1][0] * blocks[-1][1] + mean * count) / (blocks[-1][1] + count),
                blocks[-1][1] + count,
            ]
    depth = np.array([mean for mean, count in blocks for _ in range(int(count))]) + need
    return [float(-d) for d in depth]


def _edge_path(points: list[tuple[float, float]], start_radius: float, end_radius: float) -> CurvePath:
    """From the rim of the first node through the bend points, rounded, to the rim of the last node."""
    start = _towards(points[0], points[1], start_radius)
    end = _towards(points[-1], points[-2], end_radius)
    route = [start, *points[1:-1], end]
    vertices, codes = [start], [CurvePath.MOVETO]
    for before, bend, after in zip(route, route[1:], route[2:]):
        vertices += [_part(bend, before, CORNER), bend, _part(bend, after, CORNER)]
        codes += [CurvePath.LINETO, CurvePath.CURVE3, CurvePath.CURVE3]
    return CurvePath(vertices + [end], codes + [CurvePath.LINETO])


def _towards(point: tuple[float, float], toward: tuple[float, float], distance: float) -> tuple[float, float]:
    dx, dy = toward[0] - point[0], toward[1] - point[1]
    norm = np.hypot(dx, dy) or 1.0
    return point[0] + distance * dx / norm, point[1] + distance * dy / norm


def _part(point: tuple[float, float], toward: tuple[float, float], fraction: float) -> tuple[float, float]:
    return point[0] + fraction * (toward[0] - point[0]), point[1] + fraction * (toward[1] - point[1])


def curve_points(path: CurvePath, per_piece: int = 32) -> np.ndarray:
    """Points along every piece (line or Bézier curve) of a path."""
    t = np.linspace(0, 1, per_piece)
    return np.concatenate([segment(t) for segment, _ in path.iter_bezier()])


def _too_close(path: CurvePath, nodes: list[tuple[tuple[float, float], float]]) -> bool:
    points = curve_points(path)
    return any(np.hypot(*(points - centre).T).min() < radius + CLEARANCE for centre, radius in nodes)


@lru_cache(maxsize=None)
def label_size(text: str) -> tuple[float, float]:
    """Width and height in units of an edge label with its box."""
    box = TextPath((0, 0), text, size=LABEL_FONT).get_extents()
    pad = 2 * LABEL_PAD * LABEL_FONT
    return (box.width + pad) / 72 / INCH, (max(box.height, LABEL_FONT) + pad) / 72 / INCH


def _place_labels(g: Graph, chains: list[list[str]], pos: dict, rank: dict) -> tuple[list, set[int]]:
    """A centre on its first piece for each edge label, clear of every node (inside the gap between
    the columns) and of the labels placed before it; returns the centres and the gaps that lacked room."""
    reach = max(RADIUS.values()) + SPACE
    placed: dict[int, list[tuple[float, float, float, float]]] = defaultdict(list)
    centres, crowded = [], set()
    for (_, _, label), chain in zip(g.edges, chains):
        if not label:
            centres.append(None)
            continue
        (x0, y0), (x1, y1) = pos[chain[0]], pos[chain[1]]
        w, h = label_size(label)
        gap = rank[chain[0]]
        low = (reach + w / 2) / (x1 - x0)
        high = min((x1 - reach - w / 2 - x0) / (x1 - x0), 1 - CORNER if len(chain) > 2 else 1.0)
        found = None
        for t in _candidates(low, high):
            cx, cy = x0 + t * (x1 - x0), y0 + t * (y1 - y0)
            if all(
                abs(cx - ox) >= (w + ow) / 2 + SPACE or abs(cy - oy) >= (h + oh) / 2 + SPACE
                for ox, oy, ow, oh in placed[gap]
            ):
                found = (cx, cy)
                break
        if found is None:
            crowded.add(gap)
            found = (x0 + (x1 - x0) / 2, y0 + (y1 - y0) / 2)
        placed[gap].append((*found, w, h))
        centres.append(found)
    return centres, crowded


def _candidates(low: float, high: float, steps: int = 5) -> list[float]:
    """Fractions from the middle of [low, high] outward; none if the range is empty."""
    if low > high:
        return []
    middle, step = (low + high) / 2, (high - low) / (2 * steps)
    return [middle + sign * k * step for k in range(steps + 1) for sign in ((1,) if k == 0 else (-1, 1))]


def _box(g: Graph, nodes: dict, paths: list[CurvePath], labels: list) -> tuple[float, float, float, float]:
    """The nodes, the edges (within their control points) and the labels, with a margin."""
    margin = 0.15
    xs = [x + side * RADIUS[g.kind[k]] for k, (x, _) in nodes.items() for side in (-1, 1)]
    ys = [y + side * RADIUS[g.kind[k]] for k, (_, y) in nodes.items() for side in (-1, 1)]
    for path in paths:
        xs += list(path.vertices[:, 0])
        ys += list(path.vertices[:, 1])
    for (_, _, label), centre in zip(g.edges, labels):
        if centre is not None:
            w, h = label_size(label)
            xs += [centre[0] - w / 2, centre[0] + w / 2]
            ys += [centre[1] - h / 2, centre[1] + h / 2]
    return min(xs) - margin, min(ys) - margin, max(xs) + margin, max(ys) + margin
